"""residual_backward(dinp1, dinp2, dout, N): dinp1 += dout and dinp2 += dout, elementwise."""

from gpt2kit.reference.numerics import half_ulp
from gpt2kit.reference.spec import Arguments, Spec, normal
from gpt2kit.reference.specs.residual import ELEMENTWISE_CASES, GPT2_N, signed_magnitudes


def build(case, rng):
    N = case.size["N"]
    if case.values == "extreme":  # magnitudes from 1e-30 to 1e30, both signs
        dinp1, dinp2, dout = (signed_magnitudes(rng, N, -30, 30) for _ in range(3))
    else:
        dinp1, dinp2, dout = normal(rng, N), normal(rng, N), normal(rng, N)
    # the gradients gathered so far: what the call adds to
    return Arguments(dict(dinp1=(N,), dinp2=(N,), dout=dout, N=N), initial=dict(dinp1=dinp1, dinp2=dinp2))


def error_bound(x, e):
    # One float32 addition per element, correctly rounded: off by at most half an ulp.
    return {"dinp1": half_ulp(e["dinp1"]), "dinp2": half_ulp(e["dinp2"])}


SPEC = Spec(
    function="residual_backward", module="residual_backward", outputs=("dinp1", "dinp2"), build=build,
    error_bound=error_bound, cases=ELEMENTWISE_CASES, updates=("dinp1", "dinp2"),
    quick=dict(N=4 * 64 * 768),
    benchmark=(dict(N=GPT2_N),),
    traffic=lambda s: 20 * s["N"],
    graded=False, milestone=4,
)
