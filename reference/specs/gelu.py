"""gelu_forward(out, inp, N): GELU in GPT-2's tanh form, elementwise."""

import numpy as np

from gpt2kit.reference.numerics import U
from gpt2kit.reference.spec import Arguments, Spec, normal
from gpt2kit.reference.specs.residual import ELEMENTWISE_CASES, GPT2_N, signed_magnitudes


def build(case, rng):
    N = case.size["N"]
    if case.values == "extreme":  # |x| from 1e-30 to 1e6, both signs
        x = signed_magnitudes(rng, N, -30, 6)
    else:
        x = normal(rng, N, scale=3.0)
    return Arguments(dict(out=(N,), inp=x, N=N))


def error_bound(x, e):
    # A handful of roundings and tanhf's few ulp: the inner argument's error reaches
    # the output damped by tanh' <= 1, times 0.5|x|; 8U(|x| + |gelu|) covers both.
    return {"out": 8 * U * (np.abs(x["inp"]) + np.abs(e["out"]))}


SPEC = Spec(
    function="gelu_forward", module="gelu", outputs=("out",), build=build, error_bound=error_bound,
    cases=ELEMENTWISE_CASES,
    quick=dict(N=4 * 64 * 3072),
    benchmark=(dict(N=4 * GPT2_N),),  # the MLP's 4C-wide hidden layer
    traffic=lambda s: 8 * s["N"],
)
