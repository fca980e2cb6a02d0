"""weight_norm_backward(dg, dv, dweight, g, v, OC, C, K): weight_norm_forward's gradients from dweight (OC, C, K), added
to dg (K) and dv (OC, C, K): dg += along = sum(dweight * v) / ||v||, dv += g / ||v|| * (dweight - v * along / ||v||),
per tap k."""

import math

import numpy as np

from gpt2kit.reference.numerics import TINY, U
from gpt2kit.reference.spec import Arguments, Spec, normal
from gpt2kit.reference.specs.weight_norm import CASES, WAV2VEC2, draw_directions, draw_lengths, norm_relative_error


def build(case, rng):
    OC, C, K = (case.size[k] for k in ("OC", "C", "K"))
    v = draw_directions(case, rng)
    dweight = normal(rng, OC, C, K)
    if case.values == "extreme":
        dweight *= np.float32(1e3)
    # the gradients gathered so far: what the call adds to
    return Arguments(dict(dg=(K,), dv=(OC, C, K), dweight=dweight, g=draw_lengths(case, rng), v=v, OC=OC, C=C, K=K),
                     initial=dict(dg=normal(rng, K), dv=normal(rng, OC, C, K)))


def error_bound(x, e):
    # along = D / norm with D = sum(dweight * v) over a tap's rows: D may cancel, so its error counts against the sum
    # of |dweight * v| (~sqrt(rows) * U of it, 4x taken, and each product's U); the norm's error and the division's
    # rounding relative to along. dv's term g / norm * (dweight - v * along / norm): the scale's and the projection's
    # errors (the norm's, a rounding each, along's), the product v * projection's and the difference's roundings,
    # and the product with the scale. Each gradient's addition to what it held rounds by U of the result.
    OC, C, K = x["v"].shape
    rows = OC * C
    v, dweight, g = x["v"].reshape(rows, K), x["dweight"].reshape(rows, K), x["g"].reshape(K)
    norm = np.sqrt((v**2).sum(axis=0))
    along = (dweight * v).sum(axis=0) / norm
    relative = norm_relative_error(rows) + U
    along_error = (4 * math.sqrt(rows) + 1) * U * np.abs(dweight * v).sum(axis=0) / norm + relative * np.abs(along)
    projection, projection_error = along / norm, along_error / norm + relative * np.abs(along / norm)
    inner = np.abs(dweight - v * projection)
    inner_error = np.abs(v) * projection_error + U * np.abs(v * projection) + U * inner
    scale = np.abs(g) / norm
    dv = scale * inner_error + (relative + 2 * U) * scale * inner
    return {"dg": along_error + U * np.abs(e["dg"]) + TINY,
            "dv": dv.reshape(OC, C, K) + U * np.abs(e["dv"]) + TINY}


def traffic(s):
    N = s["OC"] * s["C"] * s["K"]
    return 4 * (4 * N + 3 * s["K"])  # dweight, v, dv read and written; g, dg read and written


SPEC = Spec(
    function="weight_norm_backward", module="weight_norm", outputs=("dg", "dv"), updates=("dg", "dv"), build=build,
    error_bound=error_bound, cases=CASES,
    quick=WAV2VEC2,
    benchmark=(WAV2VEC2,),
    traffic=traffic,
    graded=False, provided=True, handed_out=False,
)
