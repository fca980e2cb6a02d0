"""Beam search's reordering from the lineage's starts leaves every row as a whole copy would: the NumPy reference
and the gold functions (on NumPy arrays), step after step of random parents, a ring cache included."""

import numpy as np
import pytest

from gpt2kit.reference import cpu, gold

SEEDS = [101, 202, 303]


def run(functions, rng, steps, B, group, layers, NH, max_T, HS, whole):
    """A beam search's cache: a prompt prefilled each row alone, then each step the rows' new parents (drawn in
    the group, most rows keeping to a few beams, as a search does), the reordering, and a position appended to
    every row. `whole`: every copy from the first position, as the reordering did before the lineage."""
    caches = [rng.standard_normal((layers, B, NH, max_T, HS)).astype(np.float32) for _ in range(2)]
    lengths = np.full(B, 3, np.int32)
    shared = np.zeros((B, group), np.int32)
    starts, done = np.zeros(B, np.int32), np.zeros(1, np.int32)
    groups = np.arange(B) // group * group
    for _ in range(steps):
        favourites = rng.integers(0, group, size=(B // group, 2))  # the beams most others come from this step
        rows = (groups + np.where(rng.random(B) < 0.7, favourites[np.arange(B) // group, rng.integers(0, 2, B)],
                                  rng.integers(0, group, B))).astype(np.int32)
        if whole:
            starts[...] = 0
        else:
            functions.kv_cache_lineage_forward(shared, starts, rows, lengths, done, B, group)
        functions.kv_cache_reorder_forward(*caches, rows, starts, lengths, done, layers, B, NH, max_T, HS, group)
        for cache in caches:  # the step's own keys and values: different in every row
            cache[:, np.arange(B), :, lengths % max_T] = rng.standard_normal((B, layers, NH, HS)).astype(np.float32)
        lengths += 1
    return caches


@pytest.mark.parametrize("functions", [cpu, gold], ids=["reference", "gold"])
@pytest.mark.parametrize("max_T", [64, 23], ids=["max_T64", "ring23"])
@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"seed{s}")
def test_reordering_from_the_lineage_starts_equals_whole_copies(functions, max_T, seed):
    sizes = dict(steps=40, B=8, group=4, layers=2, NH=2, max_T=max_T, HS=3)
    whole = run(functions, np.random.default_rng(seed), whole=True, **sizes)
    from_lineage = run(functions, np.random.default_rng(seed), whole=False, **sizes)
    for a, b in zip(whole, from_lineage):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"seed{s}")
def test_lineage_starts_past_the_common_prefix_copy_less(seed):
    """The point of the counts: after the first step, a step copies far fewer positions than whole rows."""
    rng = np.random.default_rng(seed)
    B, group, length = 5, 5, 100
    shared, starts = np.zeros((B, group), np.int32), np.zeros(B, np.int32)
    lengths, done = np.full(B, length, np.int32), np.zeros(1, np.int32)
    cpu.kv_cache_lineage_forward(shared, starts, np.zeros(B, np.int32), lengths, done, B, group)
    assert starts.tolist() == [length, 0, 0, 0, 0]  # everyone copies beam 0 whole; beam 0 keeps its own
    lengths += 1
    rows = rng.permutation(B).astype(np.int32)
    cpu.kv_cache_lineage_forward(shared, starts, rows, lengths, done, B, group)
    # every row came from beam 0 one step ago: all but the step's own position is in common
    assert starts.tolist() == [length + 1 if rows[b] == b else length for b in range(B)]
