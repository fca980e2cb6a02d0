"""Float64 helpers shared by the oracle (cpu.py) and the error bounds (specs/, bounds.py).

U and TINY measure float32: the error of a correct float32 kernel is stated in them.
"""

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
