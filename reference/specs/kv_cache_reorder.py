"""kv_cache_reorder_forward(k_cache, v_cache, rows, starts, lengths, done, layers, B, NH, max_T, HS, group): beam
search's reordering of every layer's caches (layers, B, NH, max_T, HS), in place: row b takes row rows[b]'s (a row
of b's own group of `group` consecutive rows) in the slots that hold its positions from starts[b] below lengths[b]
(token p in slot p % max_T: the last max_T positions once a row is longer); the rest is left as it was, and nothing
changes once done[0] is set. The kit provides it whole: kernels/kv_cache_reorder.py."""

import numpy as np

from gpt2kit.reference.spec import Arguments, Spec, exact, normal


def build(case, rng):
    """The variant: swap (each pair of a group trades rows), done (the search is over), from_zero (every start is 0,
    as at a search's first step)."""
    layers, B, NH, max_T, HS, group = (case.size[k] for k in ("layers", "B", "NH", "max_T", "HS", "group"))
    groups = np.arange(B) // group * group
    if case.variant == "swap":  # both rows of a pair are read before either is written
        rows = np.arange(B) ^ 1
    else:  # parents drawn within each group: shared parents, rows kept, rows overwritten that others read
        rows = groups + rng.integers(0, group, size=B)
    # each group's rows at one length (as in beam search), then one row of a group at another; past max_T too
    lengths = np.repeat(rng.integers(0, max_T + 3, size=B // group), group)
    lengths[-1] = rng.integers(0, max_T + 1)
    # where each row's copy starts: anywhere from the first position to its length, a ring's wrapped part included
    starts = np.zeros(B, np.int64) if case.variant == "from_zero" else rng.integers(0, lengths + 1)
    # Every row starts with values of its own, so a row left unwritten, or written below its start, differs from
    # what it should hold. No NaN marks: a row that must change may be another's parent, whose old values the call
    # must read.
    caches = {name: normal(rng, layers, B, NH, max_T, HS) for name in ("k_cache", "v_cache")}
    done = np.array([case.variant == "done"], np.int32)
    return Arguments(dict(k_cache=caches["k_cache"].shape, v_cache=caches["v_cache"].shape,
                          rows=rows.astype(np.int32), starts=starts.astype(np.int32), lengths=lengths.astype(np.int32),
                          done=done, layers=layers, B=B, NH=NH, max_T=max_T, HS=HS, group=group), initial=caches)


SPEC = Spec(
    function="kv_cache_reorder_forward", module="kv_cache_reorder", outputs=("k_cache", "v_cache"), build=build,
    error_bound=exact, graded=False, provided=True,  # a copy
    cases=(
        dict(layers=2, B=5, NH=12, max_T=1024, HS=64, group=5),   # GPT-2, beam 5 (two of its layers: one launch)
        dict(layers=1, B=5, NH=12, max_T=1024, HS=64, group=5, variant="from_zero"),
        dict(layers=2, B=10, NH=4, max_T=70, HS=256, group=5),    # head size 256 (GPT-J), two prompts
        dict(layers=3, B=6, NH=3, max_T=37, HS=10, group=3),      # a head size that is no multiple of 4: float by float
        dict(layers=1, B=16, NH=1, max_T=20, HS=4, group=16),     # the largest group
        dict(layers=2, B=4, NH=2, max_T=33, HS=8, group=2, variant="swap"),
        dict(layers=1, B=1, NH=2, max_T=9, HS=8, group=1),        # a row is its own parent: nothing moves
        dict(layers=2, B=4, NH=2, max_T=17, HS=12, group=4, variant="done"),
    ),
)
