"""conv1d_backward(dinp, dweight, dbias, dout, inp, weight, B, T, C, OC, K, stride, padding, groups, T_out): the
gradients of conv1d_forward (reference/specs/conv1d.py): dinp written (None: not wanted, as for the audio),
dweight += and dbias += (None: no bias)."""

import math

import numpy as np

from gpt2kit.reference.numerics import U
from gpt2kit.reference.spec import Arguments, Spec, normal
from gpt2kit.reference.specs.conv1d import (CASES, FIRST, LAST, LATER, POSITIONAL, SIZES, conv, frames, size_values,
                                            sizes_of)


def build(case, rng):
    B, T, C, OC, K, stride, padding, groups, T_out = size_values(case)
    no_bias, no_dinp = "no-bias" in case.variant, "no-dinp" in case.variant
    dout, inp, weight = normal(rng, B, T_out, OC), frames(case, rng, B, T, C), normal(rng, OC, C // groups, K)
    # the gradients gathered so far: what the call adds to
    initial = dict(dweight=normal(rng, OC, C // groups, K)) | ({} if no_bias else dict(dbias=normal(rng, OC)))
    return Arguments(dict(dinp=None if no_dinp else (B, T, C), dweight=(OC, C // groups, K),
                          dbias=None if no_bias else (OC,), dout=dout, inp=inp, weight=weight,
                          **dict(zip(SIZES, size_values(case)))), initial=initial)


def error_bound(x, e):
    # Each output is a sum of float32 products, bounded as a matmul's is (reference/specs/matmul.py): 4 sqrt(n) U
    # times the sum of the terms' magnitudes (the same gradients of |dout|, |inp| and |weight|), plus U |e| for the
    # last rounding, which for dweight and dbias is the addition onto the gradient they held. dinp sums the n =
    # ceil(K / stride) * OC / groups taps and channels that read a frame; dweight and dbias sum the n = B*T_out
    # rows, so their bound grows as (B*T_out)^1.5 U times a typical term (in whatever fixed order, split or not).
    from gpt2kit.reference.cpu import conv1d_backward  # here, not at the top: a submission's process never loads it
    B, T, C, OC, K, stride, padding, groups, T_out = sizes_of(x)
    dinp, dweight = np.zeros((B, T, C)), np.zeros((OC, C // groups, K))
    conv1d_backward(dinp, dweight, None, np.abs(x["dout"]), np.abs(x["inp"]), np.abs(x["weight"]), *sizes_of(x))
    rows = B * T_out
    magnitudes = {"dinp": (dinp, -(-K // stride) * (OC // groups)), "dweight": (dweight, rows),
                  "dbias": (np.abs(x["dout"]).reshape(rows, OC).sum(axis=0), rows)}
    return {name: 4 * math.sqrt(n) * U * magnitude + U * np.abs(e[name])
            for name, (magnitude, n) in magnitudes.items() if name in e}  # no dinp, no dbias when left out


def flops(s: dict) -> int:
    rows, per_row = s["B"] * s["T_out"], s["OC"] * (s["C"] // s["groups"]) * s["K"]
    return 2 * 2 * rows * per_row + rows * s["OC"]  # dinp and dweight the forward's size, and dbias's sum


def traffic(s: dict) -> int:
    """dout, inp and weight read, dinp written, dweight and dbias read and written."""
    weights = s["OC"] * (s["C"] // s["groups"]) * s["K"]
    return 4 * (s["B"] * s["T_out"] * s["OC"] + 2 * s["B"] * s["T"] * s["C"] + 3 * weights + 2 * s["OC"])


SPEC = Spec(
    function="conv1d_backward", module="conv1d", outputs=("dinp", "dweight", "dbias"), build=build,
    error_bound=error_bound, updates=("dweight", "dbias"),
    cases=(*CASES,
           conv(B=2, T=2003, C=1, OC=70, K=10, stride=5, variant="no-bias-no-dinp"),  # the audio's: dweight only
           conv(B=2, T=37, C=6, OC=9, K=3, padding=1, groups=3, variant="no-dinp")),
    quick=LAST,
    benchmark=(dict(FIRST, variant="no-bias-no-dinp"), LATER, LAST, POSITIONAL),
    traffic=traffic, flops=flops,
    graded=False, provided=True, handed_out=False,
)
