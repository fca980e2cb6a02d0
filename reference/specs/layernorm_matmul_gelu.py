"""layernorm_matmul_gelu_forward(out, inp, ln_weight, ln_bias, weight, bias, B, T, C, OC):
out = gelu(layernorm(inp) @ weight^T + bias), GELU in gelu_forward's tanh form. The decode
step's ln2 + fc + GELU."""

import numpy as np

from gpt2kit.reference.numerics import U
from gpt2kit.reference.spec import Spec
from gpt2kit.reference.specs.layernorm_matmul import BENCHMARK, CASES, build, normalised_with_bound, traffic
from gpt2kit.reference.specs.matmul import flops, rounding_error

GELU_SLOPE = 1.13  # the largest |gelu'(z)|, at z ~ 2.4: how much an error in z can grow


def error_bound(x, e):
    # z = layernorm(inp) @ weight^T + bias errs as layernorm_matmul's does; GELU carries that
    # error times its slope and adds its own few roundings (gelu's spec: 8U(|z| + |gelu(z)|)).
    normalised, normalised_error = normalised_with_bound(x)
    bias = x.get("bias")
    z = normalised.reshape(-1, x["C"]) @ x["weight"].T + (bias if bias is not None else 0.0)
    z_error = rounding_error(normalised, x["weight"], bias, normalised_error).reshape(z.shape) + U * np.abs(z)
    out = GELU_SLOPE * z_error + 8 * U * (np.abs(z) + np.abs(e["out"].reshape(z.shape)))
    return {"out": out.reshape(e["out"].shape)}


SPEC = Spec(
    function="layernorm_matmul_gelu_forward", module="fused_gemv", outputs=("out",), build=build,
    error_bound=error_bound, graded=False, milestone=3, cases=CASES, quick=dict(B=8, T=1, C=768, OC=3072),
    benchmark=BENCHMARK, traffic=traffic, flops=flops,
)
