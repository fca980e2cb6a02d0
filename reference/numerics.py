"""Float64 helpers shared by the oracle (cpu.py), the error bounds (specs/, bounds.py) and the
comparisons that judge against them (judging.py, precision.py, gpt2.step_check).

U and TINY measure float32: the error of a correct float32 kernel is stated in them.
"""

import math
import sys

import numpy as np

U = 2.0**-24            # float32 unit roundoff: a correctly rounded operation errs by <= U * |result|
TINY = 2.0**-126        # smallest normal float32: below it only absolute accuracy is possible


def half_ulp(exact):
    """Half the float32 spacing at each value: the error of one correctly rounded operation."""
    return 0.5 * np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)


def softmax_rows(scores: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, in float64; -inf scores get probability 0."""
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return weights / weights.sum(axis=-1, keepdims=True)


def window_mask(T: int, window: int) -> np.ndarray:
    """(T, T): whether query t sees key t2 in attention over a window, that is 0 <= t - t2 < window
    (window >= T: causal attention)."""
    offset = np.arange(T).reshape(T, 1) - np.arange(T)
    return (offset >= 0) & (offset < window)


_erfc = np.frompyfunc(math.erfc, 1, 1)  # NumPy has no erf; math's is accurate to float64


def normal_cdf(x):
    """The standard normal distribution function Phi(x) in float64, through erfc: 1 + erf(x / sqrt 2) would lose
    the far left tail to cancellation."""
    return 0.5 * _erfc(-np.asarray(x, dtype=np.float64) / np.sqrt(2.0)).astype(np.float64)


def element_errors(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """|got - want| per element in float64; a NaN or infinite difference (NaN or inf in got) is infinite.
    One array made, and worked on in place: outputs run to 50257 x 768 elements."""
    error = np.subtract(got, want, dtype=np.float64)
    np.abs(error, out=error)
    error[np.isnan(error)] = np.inf  # an absolute value is never -inf: NaN is the only non-finite one left
    return error


def worst_fraction(error: np.ndarray, allowed) -> float:
    """The largest error / allowed; an exact element is 0 even under a zero bound. A NaN ratio (an infinite
    error under an infinite bound) is infinite, an infinite one the largest float."""
    with np.errstate(divide="ignore", invalid="ignore"):
        worst = float(np.divide(error, allowed).max(initial=0.0, where=error != 0))
    return math.inf if math.isnan(worst) else min(worst, sys.float_info.max)


def rms(error: np.ndarray) -> float:
    """The root mean square of `error` (0 for none)."""
    return float(np.sqrt(np.mean(np.square(error)))) if error.size else 0.0


def rotary_sin_cos(max_T: int, rotary_dim: int) -> np.ndarray:
    """The table rotary_forward reads (max_T, rotary_dim), in float64: row p holds sin(p * theta_i) for
    i < rotary_dim / 2, then cos(p * theta_i), with theta_i = 10000^(-2i / rotary_dim) (GPT-J's angles)."""
    theta = 10000.0 ** (-np.arange(0, rotary_dim, 2) / rotary_dim)
    angles = np.arange(max_T)[:, None] * theta
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=1)


def draw_fractions(seed, counters):
    """The random number in [0, 1) of each 64-bit counter (a uint64 NumPy or CuPy array) under `seed` (uint64):
    splitmix64(seed ^ splitmix64(counter)) / 2^64, to 53 bits (below 1, where the float nearest a number just under
    2^64 is 2^64). The sampling kernel's counter for row b is b << 32 | its position: a stream the oracles and the
    kernel share, so their draws can be compared token for token."""
    return (splitmix64(seed ^ splitmix64(counters)) >> np.uint64(11)).astype(np.float64) * 2.0**-53


def splitmix64(x):
    """SplitMix64's output of each 64-bit counter of x (uint64: sums and products wrap at 2^64)."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))
