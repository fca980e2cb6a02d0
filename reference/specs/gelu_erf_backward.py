"""gelu_erf_backward(dinp, inp, dout, N): dinp = (Phi(x) + x * phi(x)) * dout for the exact GELU, written; dinp may
be dout."""

import numpy as np

from gpt2kit.reference.numerics import TINY, U, normal_cdf
from gpt2kit.reference.spec import Arguments, Spec, normal
from gpt2kit.reference.specs.gelu_erf import WAV2VEC2_FEED_FORWARD_N, cdf_relative_error, draw_inputs
from gpt2kit.reference.specs.residual import ELEMENTWISE_CASES


def build(case, rng):
    N = case.size["N"]
    same = {"dinp": "dout"} if case.variant == "in-place" else {}
    return Arguments(dict(dinp=(N,), inp=draw_inputs(case, rng), dout=normal(rng, N), N=N), same_array=same)


def error_bound(x, e):
    # The slope Phi(x) + x phi(x): Phi errs as in the forward pass (cdf_relative_error). phi = exp(-x*x / 2) /
    # sqrt(2 pi): x*x's rounding moves expf's argument by x^2 / 2 * 2U, which is x^2 U relative to phi; expf's 2 ulp
    # and three roundings (the constant, the products) add 8U. The terms may cancel (the slope is 0 near x = -0.75),
    # so their errors count against their magnitudes, not the slope's. Then the sum's and dout's product's roundings,
    # and what flushing loses where a step falls below float32's normal range (|x| above about 13): Phi up to
    # TINY, phi up to (1 + 1/sqrt(2 pi)) TINY before x multiplies it, x phi, their sum and the product with dout
    # TINY each.
    inp, dout = x["inp"], np.abs(x["dout"])
    density_term = np.abs(inp) * np.exp(-0.5 * inp**2) / np.sqrt(2 * np.pi)
    flushed = TINY * (3 + 1.4 * np.abs(inp))
    slope_error = U * (cdf_relative_error(inp) * normal_cdf(inp) + (inp**2 + 8) * density_term) + flushed
    return {"dinp": dout * slope_error + 2 * U * np.abs(e["dinp"]) + TINY}


SPEC = Spec(
    function="gelu_erf_backward", module="gelu_erf", outputs=("dinp",), build=build, error_bound=error_bound,
    cases=ELEMENTWISE_CASES + (dict(N=1001, variant="in-place"),),
    quick=dict(N=4 * 64 * 3072),
    benchmark=(dict(N=WAV2VEC2_FEED_FORWARD_N),),
    traffic=lambda s: 12 * s["N"],
    graded=False, provided=True, handed_out=False,
)
