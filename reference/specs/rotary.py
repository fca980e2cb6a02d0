"""rotary_forward(out, inp, positions, sin_cos, B, T, C, NH, rotary_dim): GPT-J's rotary position
embedding. out = inp (B, T, 3C) with the first rotary_dim values of every query and key head turned
pair by pair (2i, 2i+1) by the angle of position positions[b] + t, read from the table sin_cos
(max_T, rotary_dim): sines, then cosines. Values are copied. Milestone 3: kernels/rotary.py."""

import numpy as np

from gpt2kit.reference.numerics import U, rotary_sin_cos
from gpt2kit.reference.spec import Arguments, Spec, cache_lengths, normal
from gpt2kit.reference.specs.residual import signed_magnitudes


def build(case, rng):
    B, T, C, NH, rotary_dim, max_T = (case.size[k] for k in ("B", "T", "C", "NH", "rotary_dim", "max_T"))
    if case.values == "extreme":  # |x| from 1e-20 to 1e30: no product under- or overflows
        inp = signed_magnitudes(rng, B * T * 3 * C, -20, 30).reshape(B, T, 3 * C)
    else:
        inp = normal(rng, B, T, 3 * C)
    return Arguments(dict(out=(B, T, 3 * C), inp=inp, positions=cache_lengths(rng, B, max_T, T),
                          sin_cos=rotary_sin_cos(max_T, rotary_dim).astype(np.float32),
                          B=B, T=T, C=C, NH=NH, rotary_dim=rotary_dim))


def error_bound(x, e):
    # out[2i] = x cos - y sin: two products and a difference, each correctly rounded (or one of them fused),
    # err by at most 2U(|x cos| + |y sin|) to first order; 3U leaves room for the second-order terms.
    # A copied element must be exact: its bound, 3U|x|, is below half an ulp.
    return {"out": 3 * U * _magnitudes(x)}


def _magnitudes(x) -> np.ndarray:
    """|x cos| + |y sin| for every turned element (x its own value, y its pair's), |x| for every copied one.

    The reference on |inp| with the sines made -|sin| gives that for the even elements (|x cos| - |y| (-|sin|))
    and |y cos| - |x sin| for the odd ones; with +|sin|, the reverse. Each element's larger is its sum."""
    from gpt2kit.reference.cpu import rotary_forward  # here, not at the top: a submission's process never loads it

    sizes = [x[k] for k in ("B", "T", "C", "NH", "rotary_dim")]
    half = x["rotary_dim"] // 2
    results = []
    for sign in (-1.0, 1.0):
        table = np.abs(x["sin_cos"])
        table[:, :half] *= sign
        results.append(np.empty(x["inp"].shape))
        rotary_forward(results[-1], np.abs(x["inp"]), x["positions"].astype(np.int64), table, *sizes)
    return np.maximum(*results)


SPEC = Spec(
    function="rotary_forward", module="rotary", outputs=("out",), build=build, error_bound=error_bound,
    graded=False, milestone=3,
    cases=(
        dict(B=1, T=1, C=4096, NH=16, rotary_dim=64, max_T=2048),       # GPT-J's decode step, at position 2047
        dict(B=5, T=1, C=4096, NH=16, rotary_dim=64, max_T=2048),       # rows at positions from 0 to 2047
        dict(B=2, T=33, C=512, NH=2, rotary_dim=64, max_T=2048),        # a prefill, head size 256
        dict(B=3, T=7, C=30, NH=3, rotary_dim=6, max_T=1500),           # odd sizes: head size 10, 6 turned
        dict(B=2, T=5, C=48, NH=2, rotary_dim=24, max_T=1200),          # every value of a head turned
        dict(B=2, T=3, C=64, NH=4, rotary_dim=16, max_T=2048, values="extreme"),
    ),
    quick=dict(B=4, T=64, C=4096, NH=16, rotary_dim=64, max_T=2048),
    benchmark=(dict(B=1, T=2048, C=4096, NH=16, rotary_dim=64, max_T=2048),),  # GPT-J's longest prefill
    traffic=lambda s: 8 * s["B"] * s["T"] * 3 * s["C"],
)
