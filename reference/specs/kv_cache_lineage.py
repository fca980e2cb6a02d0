"""kv_cache_lineage_forward(shared, starts, rows, lengths, done, B, group): beam search's count of the cache
positions its rows hold in common, ahead of kv_cache_reorder_forward. shared (B, group): shared[b][j], the leading
positions row b holds in common with row first + j of its group of `group` consecutive rows (first: the group's
first row). Given the step's parents rows (B,), starts[b] becomes shared[b][rows[b] - first] (lengths[b] where
rows[b] is b; 0 where it is outside the group), and shared the counts after row b becomes a copy of row rows[b]:
min(lengths[b], lengths[c]) for rows b and c of one parent, what the two parents held in common otherwise, 0 where
either parent is outside the group. Nothing changes once done[0] is set. The kit provides it whole:
kernels/kv_cache_reorder.py."""

import numpy as np

from gpt2kit.reference.spec import Arguments, Spec, exact


def build(case, rng):
    """The variant: outside (one row's parent is in another group), done (the search is over)."""
    B, group = case.size["B"], case.size["group"]
    groups = np.arange(B) // group * group
    rows = groups + rng.integers(0, group, size=B)  # shared parents, rows kept, rows whose parent is overwritten
    if case.variant == "outside":
        rows[0] = (rows[0] + group) % B
    lengths = np.repeat(rng.integers(1, 2000, size=B // group), group)
    lengths[-1] = rng.integers(1, 2000)  # one row at another length
    # counts as a search leaves them: symmetric, each at most both rows' lengths; the diagonal anything (never read)
    shared = np.minimum(lengths[:, None], lengths[groups[:, None] + np.arange(group)]) * rng.random((B, group))
    shared = shared.astype(np.int32).reshape(B // group, group, group)
    shared = np.minimum(shared, shared.transpose(0, 2, 1))
    shared[:, np.arange(group), np.arange(group)] = rng.integers(0, 2000, size=(B // group, group))
    done = np.array([case.variant == "done"], np.int32)
    return Arguments(dict(shared=(B, group), starts=(B,), rows=rows.astype(np.int32), lengths=lengths.astype(np.int32),
                          done=done, B=B, group=group),
                     initial=dict(shared=shared.reshape(B, group), starts=np.full(B, -1, np.int32)))


SPEC = Spec(
    function="kv_cache_lineage_forward", module="kv_cache_reorder", outputs=("shared", "starts"), build=build,
    error_bound=exact, graded=False, provided=True,  # counts
    cases=(
        dict(B=5, group=5),     # GPT-2, beam 5
        dict(B=12, group=4),    # three prompts
        dict(B=16, group=16),   # the largest group
        dict(B=6, group=3, variant="outside"),
        dict(B=1, group=1),     # a row is its own parent
        dict(B=8, group=4, variant="done"),
    ),
)
