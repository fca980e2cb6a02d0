"""matmul_forward(out, inp, weight, bias, B, T, C, OC): out = inp @ weight^T + bias,
weight (OC, C); bias may be None."""

import math

import numpy as np

from gpt2kit.reference.numerics import U
from gpt2kit.reference.spec import Arguments, Spec, normal


def build(case, rng):
    B, T, C, OC = (case.size[k] for k in ("B", "T", "C", "OC"))
    scale = 1e4 if case.values == "extreme" else 1.0
    bias = None if case.variant == "no-bias" else normal(rng, OC)
    return Arguments(dict(out=(B, T, OC), inp=normal(rng, B, T, C, scale=scale), weight=normal(rng, OC, C),
                          bias=bias, B=B, T=T, C=C, OC=OC))


def products(x):
    """sum_k |inp[., k] * weight[o, k]| for every output element."""
    OC, C = x["weight"].shape
    out_shape = x["inp"].shape[:-1] + (OC,)
    return {"out": (np.abs(x["inp"].reshape(-1, C)) @ np.abs(x["weight"]).T).reshape(out_shape)}


def rounding_error(inp, weight, bias, inp_error=None):
    """How far a float32 inp @ weight^T + bias may be from the exact one, before the output's own
    rounding: a dot product of K float32 terms errs by ~sqrt(K) * U * sum |a_k * w_k| when rounding
    errors partly cancel, so 4x that, plus the bias add; and inp_error, an error inp already carries
    (a fused kernel's prologue), through |weight|."""
    K = weight.shape[1]
    magnitude = products(dict(inp=inp, weight=weight))["out"]
    if bias is not None:
        magnitude = magnitude + np.abs(bias)
    error = 4 * math.sqrt(K) * U * magnitude
    if inp_error is not None:
        error = error + products(dict(inp=inp_error, weight=weight))["out"]
    return error


def error_bound(x, e):
    return {"out": rounding_error(x["inp"], x["weight"], x.get("bias")) + U * np.abs(e["out"])}


def flops(s: dict) -> int:
    return 2 * s["B"] * s["T"] * s["C"] * s["OC"]


SPEC = Spec(
    function="matmul_forward", module="matmul", outputs=("out",), build=build, error_bound=error_bound,
    products=products,
    cases=(
        dict(B=1, T=1, C=768, OC=2304),
        dict(B=8, T=1, C=768, OC=2304),
        dict(B=2, T=3, C=37, OC=45, variant="no-bias"),
        dict(B=1, T=9, C=130, OC=257),
        dict(B=2, T=7, C=37, OC=45),
        dict(B=1, T=33, C=130, OC=257, variant="no-bias"),
        dict(B=1, T=5, C=768, OC=50257),
        dict(B=4, T=64, C=768, OC=3072),
        dict(B=1, T=1024, C=768, OC=768),
        dict(B=2, T=7, C=64, OC=96, values="extreme"),
    ),
    quick=dict(B=4, T=64, C=768, OC=2304),
    # GPT-2 124M's matmuls at B=8, T=1024: qkv, attention projection, MLP up, LM head; then a short prompt's
    # (T = 64, 128, 256) four matmuls, whose 128 x 128 tiles are 1 to 48 (milestone 3's split-K and 3xTF32)
    benchmark=(*(dict(B=8, T=1024, C=768, OC=OC) for OC in (2304, 768, 3072, 50257)),
               *(dict(B=1, T=T, C=C, OC=OC) for T in (64, 128, 256)
                 for C, OC in ((768, 2304), (768, 768), (768, 3072), (3072, 768)))),
    traffic=lambda s: 4 * (s["B"] * s["T"] * (s["C"] + s["OC"]) + s["OC"] * (s["C"] + 1)),
    flops=flops,
)
