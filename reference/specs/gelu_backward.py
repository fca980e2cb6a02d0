"""gelu_backward(dinp, inp, dout, N): dinp = gelu'(inp) * dout in GPT-2's tanh form, written; dinp may be dout."""

import numpy as np

from gpt2kit.reference.numerics import U
from gpt2kit.reference.spec import Arguments, Spec, normal
from gpt2kit.reference.specs.residual import ELEMENTWISE_CASES, GPT2_N, signed_magnitudes

GELU_SCALE = np.sqrt(2.0 / np.pi)


def build(case, rng):
    N = case.size["N"]
    if case.values == "extreme":  # |x| from 1e-30 to 100: tiny inputs, and tanh saturated on both sides
        x = signed_magnitudes(rng, N, -30, 2)
    else:
        x = normal(rng, N, scale=3.0)
    same = {"dinp": "dout"} if case.variant == "in-place" else {}
    return Arguments(dict(dinp=(N,), inp=x, dout=normal(rng, N), N=N), same_array=same)


def error_bound(x, e):
    # The slope is 0.5(1 + t) + P(x)(1 - t^2), t = tanh(u), P(x) = 0.5 x sqrt(2/pi)(1 + 3 * 0.044715 x^2).
    # t carries a few ulp of tanhf and the rounding of u (<= 4U |u| relative to u, damped by 1 - t^2), so
    # 1 - t*t errs by <= (1 - t^2)(1 + 8|u|) U + 9U t^2: absolute, not relative, where tanh saturates, which
    # |P(x)| then scales. The rest is a few roundings of each term and one of the product with dout.
    inp, dout = x["inp"], np.abs(x["dout"])
    u = GELU_SCALE * (inp + 0.044715 * inp**3)
    t = np.tanh(u)
    P = np.abs(0.5 * inp * GELU_SCALE * (1 + 3 * 0.044715 * inp**2))
    one_minus = (1 - t) * (1 + t)
    slope_error = U * (8 * 0.5 * (1 + np.abs(t)) + 8 * P * one_minus * (1 + np.abs(u)) + 10 * P * t**2)
    return {"dinp": dout * slope_error + U * np.abs(e["dinp"])}


SPEC = Spec(
    function="gelu_backward", module="gelu_backward", outputs=("dinp",), build=build, error_bound=error_bound,
    cases=ELEMENTWISE_CASES + (dict(N=1001, variant="in-place"),),
    quick=dict(N=4 * 64 * 3072),
    benchmark=(dict(N=4 * GPT2_N),),  # the MLP's 4C-wide hidden layer
    traffic=lambda s: 12 * s["N"],
    graded=False, milestone=4,
)
