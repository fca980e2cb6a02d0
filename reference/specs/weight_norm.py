"""weight_norm_forward(weight, g, v, OC, C, K): torch's weight_norm with dim=2, Wav2Vec2's positional convolution:
weight (OC, C, K) = g[k] * v[:, :, k] / ||v[:, :, k]||, each tap's norm over its OC * C values."""

import math

import numpy as np

from gpt2kit.reference.numerics import TINY, U
from gpt2kit.reference.spec import Arguments, Spec

WAV2VEC2 = dict(OC=768, C=48, K=128)  # Wav2Vec2 base: 768 channels in 16 groups of 48, 128 taps
CASES = (
    dict(OC=1, C=1, K=1),
    dict(OC=2, C=3, K=5),
    dict(OC=4, C=5, K=33),     # a second column tile of one tap
    dict(OC=16, C=17, K=7),    # 272 rows: a second tile row of 16
    dict(OC=24, C=48, K=40),   # 1,152 rows: five slices summed per column
    dict(OC=96, C=48, K=128),  # Wav2Vec2's taps, 18 slices
    dict(OC=12, C=30, K=9, values="extreme"),
)


def draw_directions(case, rng) -> np.ndarray:
    """v (OC, C, K); extreme: each tap's column scaled by its own 1e-3 to 1e3, so one column's sum is tiny and
    another's large, and a kernel that mixes columns shows."""
    OC, C, K = (case.size[k] for k in ("OC", "C", "K"))
    v = rng.standard_normal((OC, C, K))
    if case.values == "extreme":
        v *= 10.0 ** rng.uniform(-3, 3, K)
    return v.astype(np.float32)


def draw_lengths(case, rng) -> np.ndarray:
    """g (K,): both signs; extreme: magnitudes 1e-2 to 1e2."""
    K = case.size["K"]
    g = rng.standard_normal(K)
    if case.values == "extreme":
        g *= 10.0 ** rng.uniform(-2, 2, K)
    return g.astype(np.float32)


def build(case, rng):
    OC, C, K = (case.size[k] for k in ("OC", "C", "K"))
    return Arguments(dict(weight=(OC, C, K), g=draw_lengths(case, rng), v=draw_directions(case, rng), OC=OC, C=C,
                          K=K))


def norm_relative_error(rows: int) -> float:
    """A tap's norm: its sum of `rows` squares (each rounded by U, all positive) errs by ~sqrt(rows) * U of itself
    (4x taken), the square root halves that, and adds its own rounding."""
    return 2 * math.sqrt(rows) * U + 2 * U


def error_bound(x, e):
    # weight = v * (g / norm): the norm's error, the division's and the product's rounding, relative to weight;
    # TINY where a small g times a small v leaves float32's normal range.
    OC, C, _ = x["v"].shape
    return {"weight": (norm_relative_error(OC * C) + 2 * U) * np.abs(e["weight"]) + TINY}


SPEC = Spec(
    function="weight_norm_forward", module="weight_norm", outputs=("weight",), build=build, error_bound=error_bound,
    cases=CASES,
    quick=WAV2VEC2,
    benchmark=(WAV2VEC2,),
    traffic=lambda s: 4 * (2 * s["OC"] * s["C"] * s["K"] + s["K"]),  # v read, weight written; g
    graded=False, provided=True, handed_out=False,
)
