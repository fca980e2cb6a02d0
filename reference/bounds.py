"""Error bounds shared by several specs: the softmax's probabilities and attention's outputs.

Each bound is an estimate of the float32 rounding error of a correct implementation,
in units of U times the size of the quantities that were rounded.
"""

import math

import numpy as np

from gpt2kit.reference.numerics import TINY, U


def split_heads(x, NH, HS):
    """(B, T, n * NH * HS) -> (n, B, NH, T, HS): its n parts (q, k and v; or dout alone) split into heads."""
    B, T, _ = x.shape
    return x.reshape(B, T, -1, NH, HS).transpose(2, 0, 3, 1, 4)


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


def sum_error(n):
    """Allowed error of a float32 sum of n products, as a share of the sum of their magnitudes: ~sqrt(n) U for
    the additions (random roundings add up like a random walk), a few U for the products and the result."""
    return U * (4 * np.sqrt(n) + 4)


def output_bound(p, p_bound, v_abs, visible):
    """Bound on attention's outputs p @ v (..., Tq, HS): p's error times |v|, plus the output's own sum
    of n terms."""
    n = visible.sum(axis=-1, keepdims=True)
    return p_bound @ v_abs + sum_error(n) * (p @ v_abs)


def attention_bounds(q_abs, k_abs, v_abs, p, visible):
    """Bounds on probabilities p (..., Tq, Tk) and outputs p @ v (..., Tq, HS). The scores' rounding
    (score_error_scale) enters the softmax like a rounding of the score itself."""
    p_bound = probability_bound(p, score_error_scale(q_abs, k_abs), visible)
    return p_bound, output_bound(p, p_bound, v_abs, visible)


def attention_backward_bounds(q, k, v, dy, p, visible):
    """Bounds on causal attention's gradients dq, dk and dv (..., T, HS), from q, k, v and the output's gradient
    dy (..., T, HS) and the saved probabilities p (..., T, T), 0 where a query does not see a key (visible).

    dp = dy v^T errs as a sum of HS products. The row sum D = sum p * dp carries p times dp's errors and its own
    sum's rounding; ds = scale * p * (dp - D) carries scale * p times both, plus a few roundings of its own (4U
    |ds|: the difference, the two products, the scale). The bound is absolute where it matters: where a row's
    probability sits on one key, D cancels dp there, and ds is only as accurate as dp and D were, not relative
    to their small difference. dq = ds k sums over the keys a query sees, dk = ds^T q and dv = p^T dy over the
    queries that see a key: each carries its factor's error times the other factor's magnitude, plus its own
    sum's rounding. TINY covers values below float32's normal range, which lose their relative accuracy (or are
    flushed to 0): each probability, dp, ds and output may be off by that much more, and so may the scaled
    probability scale * p, which a kernel may form before the difference: p below TINY / scale is lost there."""
    def transposed(m):
        return np.swapaxes(m, -1, -2)

    scale = 1 / math.sqrt(q.shape[-1])
    keys_seen = visible.sum(axis=-1, keepdims=True)                # (T, 1): a query's keys
    queries_seeing = transposed(visible.sum(axis=-2, keepdims=True))  # (T, 1): a key's queries
    q_abs, k_abs, dy_abs = np.abs(q), np.abs(k), np.abs(dy)
    flushed = TINY * visible  # how far a probability below float32's normal range may be from the one used

    dp = dy @ transposed(v)
    dp_error = sum_error(q.shape[-1]) * (dy_abs @ transposed(np.abs(v))) + TINY
    row_sum = (p * dp).sum(axis=-1, keepdims=True)
    row_sum_error = (p * dp_error + (sum_error(keys_seen) * p + flushed) * np.abs(dp)).sum(axis=-1, keepdims=True)
    difference = np.abs(dp - row_sum)
    ds_abs = scale * p * difference
    ds_error = np.where(visible, scale * p * (dp_error + row_sum_error) + TINY * difference + 4 * U * ds_abs
                        + TINY, 0.0)

    dq = ds_error @ k_abs + sum_error(keys_seen) * (ds_abs @ k_abs)
    dk = transposed(ds_error) @ q_abs + sum_error(queries_seeing) * (transposed(ds_abs) @ q_abs)
    dv = (sum_error(queries_seeing) * transposed(p) + transposed(flushed)) @ dy_abs
    return dq + TINY, dk + TINY, dv + TINY
