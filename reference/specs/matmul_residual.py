"""matmul_residual_forward(out, inp, weight, bias, residual, B, T, C, OC):
out = residual + inp @ weight^T + bias; weight (OC, C), bias may be None, residual (B, T, OC).
The decode step's attention projection and MLP projection with their residual adds."""

import math

import numpy as np

from gpt2kit.reference.numerics import U
from gpt2kit.reference.spec import Arguments, Spec, normal
from gpt2kit.reference.specs.matmul import flops, rounding_error

# The decode step's shapes, at each of the row counts the kernel is compiled for (1, 2, 4 and 8: the
# batch rounded up) and at beam 5's, odd sizes, chunks of rows beyond 8, extreme values.
CASES = (
    dict(B=1, T=1, C=768, OC=768),
    dict(B=1, T=1, C=3072, OC=768),
    dict(B=2, T=1, C=768, OC=768),
    dict(B=3, T=1, C=100, OC=37),
    dict(B=5, T=1, C=3072, OC=768),
    dict(B=8, T=1, C=3072, OC=768),
    dict(B=3, T=3, C=37, OC=45),
    dict(B=1, T=13, C=130, OC=257, variant="no-bias"),
    dict(B=32, T=1, C=768, OC=768),
    dict(B=2, T=7, C=64, OC=96, values="extreme"),
)


def build(case, rng):
    B, T, C, OC = (case.size[k] for k in ("B", "T", "C", "OC"))
    scale = 1e4 if case.values == "extreme" else 1.0
    bias = None if case.variant == "no-bias" else normal(rng, OC)
    return Arguments(dict(out=(B, T, OC), inp=normal(rng, B, T, C, scale=scale),
                          weight=normal(rng, OC, C, scale=1 / math.sqrt(C)), bias=bias,
                          residual=normal(rng, B, T, OC, scale=scale), B=B, T=T, C=C, OC=OC))


def error_bound(x, e):
    # The matmul's bound, then the residual add: its rounding, and the product's before it.
    product = e["out"] - x["residual"]
    return {"out": rounding_error(x["inp"], x["weight"], x.get("bias")) + U * (np.abs(product) + np.abs(e["out"]))}


SPEC = Spec(
    function="matmul_residual_forward", module="fused_gemv", outputs=("out",), build=build,
    error_bound=error_bound, graded=False, milestone=3, cases=CASES, quick=dict(B=8, T=1, C=3072, OC=768),
    benchmark=(dict(B=1, T=1, C=768, OC=768), dict(B=1, T=1, C=3072, OC=768), dict(B=8, T=1, C=3072, OC=768)),
    traffic=lambda s: 4 * (s["B"] * s["T"] * (s["C"] + 2 * s["OC"]) + s["OC"] * (s["C"] + 1)),
    flops=flops,
)
