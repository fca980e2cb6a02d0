"""Error bounds shared by several specs: the softmax's probabilities and attention's outputs.

Each bound is an estimate of the float32 rounding error of a correct implementation,
in units of U times the size of the quantities that were rounded.
"""

import math

import numpy as np

from reference.numerics import TINY, U


def exponent_error(score_error_scale, visible):
    """Allowed error of a softmax row's exponents s - max (or s - log-sum-exp), per row (..., Tq, 1).

    Rounding s and max errs by ~U * |s|, expf by 2 ulp, the sum of n terms by ~sqrt(n) * U.
    score_error_scale is the row's largest |s| (or, for attention, the magnitude its dot
    products were rounded at); visible marks the keys a row sees."""
    row_scale = np.where(visible, score_error_scale, 0).max(axis=-1, keepdims=True)
    n = visible.sum(axis=-1, keepdims=True)
    return U * (8 * row_scale + 4 * np.sqrt(n) + 8)


def probability_bound(p, score_error_scale, visible):
    """Allowed error of softmax probabilities p (..., Tq, Tk) = exp(s - max) / sum: an absolute
    error d in the exponent gives p a relative error d (exponent_error)."""
    return p * exponent_error(score_error_scale, visible) + TINY


def score_error_scale(q_abs, k_abs):
    """The magnitude at which attention's scores q.k / sqrt(HS) (..., Tq, Tk) are rounded: dot
    products of HS terms err by ~sqrt(HS) * U * |q|.|k| / sqrt(HS), and the scaling by one U more."""
    HS = q_abs.shape[-1]
    return (q_abs @ np.swapaxes(k_abs, -1, -2)) * (math.sqrt(HS) + 1) / math.sqrt(HS)


def output_bound(p, p_bound, v_abs, visible):
    """Bound on attention's outputs p @ v (..., Tq, HS): p's error times |v|, plus the output's own sum
    of n terms."""
    n = visible.sum(axis=-1, keepdims=True)
    return p_bound @ v_abs + U * (4 * np.sqrt(n) + 4) * (p @ v_abs)


def attention_bounds(q_abs, k_abs, v_abs, p, visible):
    """Bounds on probabilities p (..., Tq, Tk) and outputs p @ v (..., Tq, HS). The scores' rounding
    (score_error_scale) enters the softmax like a rounding of the score itself."""
    p_bound = probability_bound(p, score_error_scale(q_abs, k_abs), visible)
    return p_bound, output_bound(p, p_bound, v_abs, visible)
