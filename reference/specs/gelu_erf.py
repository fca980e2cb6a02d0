"""gelu_erf_forward(out, inp, N): the exact GELU x * Phi(x), elementwise (Wav2Vec2's activation)."""

import numpy as np

from gpt2kit.reference.numerics import TINY, U
from gpt2kit.reference.spec import Arguments, Spec, normal
from gpt2kit.reference.specs.residual import ELEMENTWISE_CASES, signed_magnitudes

WAV2VEC2_FEED_FORWARD_N = 8 * 800 * 3072  # B * T * I of Wav2Vec2 base's feed-forward: 8 utterances of 16 s


def draw_inputs(case, rng):
    """inp (N,); extreme: |x| from 1e-30 to 1e6, both signs: tiny inputs, Phi saturated at 1, and Phi's far left
    tail down to below float32's range."""
    N = case.size["N"]
    return signed_magnitudes(rng, N, -30, 6) if case.values == "extreme" else normal(rng, N, scale=3.0)


def build(case, rng):
    N = case.size["N"]
    return Arguments(dict(out=(N,), inp=draw_inputs(case, rng), N=N))


def cdf_relative_error(x):
    """Allowed relative error of a float32 Phi(x) = 0.5 erfc(-x / sqrt 2), in units of U: the argument's two
    roundings (2U of it) move erfc by |x| phi(x) / Phi(x) relative to Phi per unit of relative error, which is at most
    |x| (max(-x, 0) + 1) (the Mills ratio's bound: phi / Phi < -x + 1 / -x in the left tail, below 1 elsewhere); and
    erfcf's 4 ulp (8U)."""
    return 2 * np.abs(x) * (np.maximum(-x, 0) + 1) + 8


def error_bound(x, e):
    # Phi's error (cdf_relative_error) and the product's rounding, relative to out. Below float32's normal range
    # (x below about -13) Phi itself may be flushed to 0 before x multiplies it, losing up to |x| TINY, and the
    # product may be flushed too: TINY (1 + |x|) absolutely.
    return {"out": U * (cdf_relative_error(x["inp"]) + 2) * np.abs(e["out"]) + TINY * (1 + np.abs(x["inp"]))}


SPEC = Spec(
    function="gelu_erf_forward", module="gelu_erf", outputs=("out",), build=build, error_bound=error_bound,
    cases=ELEMENTWISE_CASES,
    quick=dict(N=4 * 64 * 3072),
    benchmark=(dict(N=WAV2VEC2_FEED_FORWARD_N),),
    traffic=lambda s: 8 * s["N"],
    graded=False, provided=True, handed_out=False,
)
