"""residual_forward(out, inp1, inp2, N): out = inp1 + inp2, elementwise."""

import numpy as np

from gpt2kit.reference.numerics import half_ulp
from gpt2kit.reference.spec import Arguments, Spec, normal

# Elementwise cases (GELU's too): N = 1, not a multiple of 4 (the vector width), one that is, a large odd one
ELEMENTWISE_CASES = (dict(N=1), dict(N=7), dict(N=1000), dict(N=2**20 + 3), dict(N=4099, values="extreme"))
GPT2_N = 8 * 1024 * 768  # B * T * C of GPT-2 124M at B=8, T=1024


def signed_magnitudes(rng, N, low, high):
    """N float32 values of both signs, |x| log-uniform in [10**low, 10**high]."""
    return (np.sign(rng.standard_normal(N)) * 10.0 ** rng.uniform(low, high, N)).astype(np.float32)


def build(case, rng):
    N = case.size["N"]
    if case.values == "extreme":  # magnitudes from 1e-30 to 1e30, both signs
        a, b = signed_magnitudes(rng, N, -30, 30), signed_magnitudes(rng, N, -30, 30)
    else:
        a, b = normal(rng, N), normal(rng, N)
    return Arguments(dict(out=(N,), inp1=a, inp2=b, N=N))


def error_bound(x, e):
    # One float32 addition per element, correctly rounded: off by at most half an ulp.
    return {"out": half_ulp(e["out"])}


SPEC = Spec(
    function="residual_forward", module="residual", outputs=("out",), build=build, error_bound=error_bound,
    cases=ELEMENTWISE_CASES,
    quick=dict(N=4 * 64 * 768),
    benchmark=(dict(N=GPT2_N),),
    traffic=lambda s: 12 * s["N"],
)
