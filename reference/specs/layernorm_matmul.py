"""layernorm_matmul_forward(out, inp, ln_weight, ln_bias, weight, bias, B, T, C, OC):
out = layernorm(inp) @ weight^T + bias, the layernorm as layernorm_forward's (no mean or
rstd kept); weight (OC, C), bias may be None. The decode step's ln1 + qkv and lnf + LM head."""

import math

import numpy as np

from gpt2kit.reference.numerics import U
from gpt2kit.reference.spec import Arguments, Spec, normal
from gpt2kit.reference.specs import layernorm
from gpt2kit.reference.specs.matmul import flops, rounding_error

LAYERNORM_EPS = 1e-5  # layernorm_forward's

# The decode step's shapes: rows up to a batch of 32, chunks of the kernel's 8 rows and beyond,
# C not a multiple of the float4 width, a row too wide for 8 rows of shared memory (C=1600), GPT-J's
# beam of 5 rows (C=4096), whose 80 KB of shared memory are past a launch's default. The kernel is compiled
# for the batch rounded up to 1, 2, 4 or 8 rows, with a float4 prologue from 4: beam 5's rows and a
# chunk of 4 with 3 rows in it are cases of their own.
CASES = (
    dict(B=1, T=1, C=768, OC=2304),
    dict(B=8, T=1, C=768, OC=3072),
    dict(B=5, T=1, C=768, OC=2304),
    dict(B=3, T=1, C=132, OC=70),
    dict(B=3, T=3, C=37, OC=45),
    dict(B=1, T=13, C=130, OC=257, variant="no-bias"),
    dict(B=2, T=5, C=64, OC=96),
    dict(B=32, T=1, C=768, OC=768),
    dict(B=1, T=9, C=1600, OC=33),
    dict(B=5, T=1, C=4096, OC=72),
    dict(B=2, T=1, C=768, OC=50304),
    dict(B=2, T=3, C=64, OC=40, values="extreme"),
)
BENCHMARK = (dict(B=1, T=1, C=768, OC=2304), dict(B=1, T=1, C=768, OC=3072), dict(B=1, T=1, C=768, OC=50304),
             dict(B=8, T=1, C=768, OC=2304))


def traffic(s: dict) -> int:
    """inp and out once, the weight and bias, the layernorm's weight and bias."""
    return 4 * (s["B"] * s["T"] * (s["C"] + s["OC"]) + s["OC"] * (s["C"] + 1) + 2 * s["C"])


def build(case, rng):
    B, T, C, OC = (case.size[k] for k in ("B", "T", "C", "OC"))
    ln = layernorm.build(case, rng).values  # inp with large means when extreme, and the layernorm's weights
    bias = None if case.variant == "no-bias" else normal(rng, OC)
    return Arguments(dict(out=(B, T, OC), inp=ln["inp"], ln_weight=ln["weight"], ln_bias=ln["bias"],
                          weight=normal(rng, OC, C, scale=1 / math.sqrt(C)), bias=bias, B=B, T=T, C=C, OC=OC))


def normalised_with_bound(x):
    """The exact layernorm of x["inp"] (float64) and how far a float32 layernorm may be from it. Computed
    here, not by reference.cpu: the grader's workers load the specs and never the oracle."""
    inp = x["inp"].reshape(x["B"], x["T"], x["C"])
    mean = inp.mean(axis=-1)
    rstd = 1 / np.sqrt(((inp - mean[..., None]) ** 2).mean(axis=-1) + LAYERNORM_EPS)
    normalised = (inp - mean[..., None]) * rstd[..., None] * x["ln_weight"] + x["ln_bias"]
    bound = layernorm.error_bound(dict(inp=inp, weight=x["ln_weight"], bias=x["ln_bias"]),
                                  dict(out=normalised, mean=mean, rstd=rstd))
    return normalised, bound["out"]


def error_bound(x, e):
    normalised, normalised_error = normalised_with_bound(x)
    return {"out": rounding_error(normalised, x["weight"], x.get("bias"), normalised_error) + U * np.abs(e["out"])}


SPEC = Spec(
    function="layernorm_matmul_forward", module="fused_gemv", outputs=("out",), build=build,
    error_bound=error_bound, graded=False, milestone=3, cases=CASES, quick=dict(B=8, T=1, C=768, OC=2304),
    benchmark=BENCHMARK, traffic=traffic, flops=flops,
)
