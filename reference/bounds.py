"""Error bounds shared by several specs: the softmax's probabilities and attention's outputs.

Each bound is an estimate of the float32 rounding error of a correct implementation,
in units of U times the size of the quantities that were rounded.
"""

import math

import numpy as np

from reference.numerics import TINY, U


def probability_bound(p, score_error_scale, visible):
    """Allowed error of softmax probabilities p (..., Tq, Tk).

    p = exp(s - max) / sum. An absolute error d in the exponent gives p a relative
    error d; rounding s and max errs by ~U * |s|, expf by 2 ulp, the sum of n terms
    by ~sqrt(n) * U. score_error_scale is the row's largest |s| (or, for attention,
    the magnitude its dot products were rounded at); visible marks the keys a row sees."""
    row_scale = np.where(visible, score_error_scale, 0).max(axis=-1, keepdims=True)
    n = visible.sum(axis=-1, keepdims=True)
    return p * U * (8 * row_scale + 4 * np.sqrt(n) + 8) + TINY


def attention_bounds(q_abs, k_abs, v_abs, p, visible):
    """Bounds on probabilities p (..., Tq, Tk) and outputs p @ v (..., Tq, HS).

    Scores are dot products of HS terms: they err by ~sqrt(HS) * U * scale * |q|.|k|,
    which enters the softmax like a rounding of the score itself. The output carries
    p's error times |v| plus its own sum of n terms."""
    HS = q_abs.shape[-1]
    score_scale = (q_abs @ np.swapaxes(k_abs, -1, -2)) * (math.sqrt(HS) + 1) / math.sqrt(HS)
    p_bound = probability_bound(p, score_scale, visible)
    n = visible.sum(axis=-1, keepdims=True)
    return p_bound, p_bound @ v_abs + U * (4 * np.sqrt(n) + 4) * (p @ v_abs)
