"""The split-K matmul's host arithmetic, without a GPU: the slices of K its blocks sum cover K
exactly, none of them empty, and there are enough of them to fill the GPU about twice, never more.
(Milestone 3's kit and later ones: grading.handout leaves a variant module's own test out of earlier kits.)"""

import pytest

from gpt2kit.kernel_runtime import ceil_div
from gpt2kit.reference.registry import kernel_module

pytestmark = pytest.mark.calls("split_span", module="matmul_split_k")  # skipped, not failed, while a stub

# (M, K, N): a 256-token prompt's projections, the spec's odd sizes, K shorter than one slice
SHAPES = [(256, 768, 768), (256, 3072, 768), (9, 130, 257), (14, 37, 45), (64, 20, 70), (100, 1, 3), (200, 33, 2000)]


@pytest.mark.parametrize("multiprocessors", [84, 132], ids=["A40", "H200"])
@pytest.mark.parametrize("M, K, N", SHAPES)
def test_slices_cover_k_once_and_fill_the_gpu(monkeypatch, multiprocessors, M, K, N):
    split_k = kernel_module("matmul_split_k")
    monkeypatch.setattr(split_k, "multiprocessor_count", lambda: multiprocessors)
    span = split_k.split_span(M, K, N)
    splits = ceil_div(K, span)
    assert span > 0 and span % split_k.SLICE == 0, f"span {span} is not a whole number of slices"
    assert (splits - 1) * span < K <= splits * span, f"span {span} x {splits} blocks does not cover K={K} once"
    tiles, slices = ceil_div(M, split_k.TILE) * ceil_div(N, split_k.TILE), ceil_div(K, split_k.SLICE)
    wanted = min(slices, ceil_div(split_k.BLOCKS_PER_SM * multiprocessors, tiles))
    assert tiles * (splits - 1) < split_k.BLOCKS_PER_SM * multiprocessors, f"{splits} splits: more blocks than needed"
    assert 2 * splits >= wanted, f"{splits} splits of {tiles} tiles leave the GPU idle (about {wanted} wanted)"
