"""flash_attention_forward(out, lse, inp, B, T, C, NH): causal multi-head attention of packed
q|k|v (B, T, 3C) without the T x T probabilities; lse (B, NH, T) gets each softmax's log-sum-exp.
Milestone 3: kernels/flash_attention.py."""

import math

import numpy as np

from gpt2kit.reference.bounds import exponent_error, output_bound, probability_bound, score_error_scale
from gpt2kit.reference.numerics import TINY, U, window_mask
from gpt2kit.reference.spec import Arguments, Spec, normal
from gpt2kit.reference.specs.attention import BENCHMARK, CASES, QUICK, flops


def build(case, rng):
    B, T, C, NH = (case.size[k] for k in ("B", "T", "C", "NH"))
    scale = 100.0 if case.values == "extreme" else 1.0  # extreme: scores of order 1e4
    return Arguments(dict(out=(B, T, C), lse=(B, NH, T), inp=normal(rng, B, T, 3 * C, scale=scale),
                          B=B, T=T, C=C, NH=NH))


def error_bound(x, e):
    return windowed_error_bound(x, e, window=x["T"])


def windowed_error_bound(x, e, window):
    """attention's bounds on out, plus the online softmax's rescales; lse errs like a probability's exponent.

    An online softmax multiplies what it has summed by exp(m - m') each time the
    running maximum grows: a rounding of ~U each time, counted as a sum's 4 sqrt(n)
    more (on random scores the maximum grows about log(n) times). lse = max + log(sum):
    the scores' error (as in the probabilities' bound) plus U |lse| for the addition."""
    B, T, C3 = x["inp"].shape
    NH = e["lse"].shape[1]
    HS = C3 // 3 // NH
    q, k, v = x["inp"].reshape(B, T, 3, NH, HS).transpose(2, 0, 3, 1, 4)
    visible = window_mask(T, window)
    scores = np.where(visible, q @ np.swapaxes(k, -1, -2) / math.sqrt(HS), -np.inf)
    p = np.exp(scores - e["lse"][..., None])
    v_abs = np.abs(v)
    rounding_scale = score_error_scale(np.abs(q), np.abs(k))
    n = visible.sum(axis=-1, keepdims=True)
    out_bound = (output_bound(p, probability_bound(p, rounding_scale, visible), v_abs, visible)
                 + U * 4 * np.sqrt(n) * (p @ v_abs))
    lse_bound = exponent_error(rounding_scale, visible)[..., 0] + U * np.abs(e["lse"]) + TINY
    return {"out": out_bound.transpose(0, 2, 1, 3).reshape(B, T, C3 // 3), "lse": lse_bound}


def traffic(s):
    N = s["B"] * s["T"] * s["C"]
    return 4 * (3 * N + N + s["B"] * s["NH"] * s["T"])


SPEC = Spec(
    function="flash_attention_forward", module="flash_attention", outputs=("out", "lse"), build=build,
    error_bound=error_bound, graded=False, milestone=3,
    cases=CASES + (dict(B=1, T=130, C=20, NH=4),),  # head size 5: no float4 rows; T past four key tiles
    quick=QUICK, benchmark=BENCHMARK, traffic=traffic, flops=flops,
)
