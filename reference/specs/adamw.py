"""adamw_update(params, grads, m, v, N, learning_rate, beta1, beta2, eps, weight_decay, step): one step of
torch.optim.AdamW (step counts from 1); m and v updated in place, then params."""

import numpy as np

from gpt2kit.reference.numerics import TINY, U
from gpt2kit.reference.spec import Arguments, Spec, normal
from gpt2kit.reference.specs.residual import signed_magnitudes

# torch.optim.AdamW's defaults, with GPT-2's weight decay
LEARNING_RATE, BETA1, BETA2, EPS, WEIGHT_DECAY = 1e-3, 0.9, 0.999, 1e-8, 0.1
GPT2_PARAMETERS = 124_475_904  # GPT-2 124M, its vocabulary padded to 50304 rows


def build(case, rng):
    N = case.size["N"]
    if case.values == "extreme":  # gradients from 1e-30 to 1e15: their squares from below float32's range to 1e30
        grads, params = signed_magnitudes(rng, N, -30, 15), signed_magnitudes(rng, N, -30, 30)
        m = signed_magnitudes(rng, N, -30, 14)
        v = np.square(signed_magnitudes(rng, N, -15, 15).astype(np.float64)).astype(np.float32)
    else:
        grads, params, m = normal(rng, N), normal(rng, N), normal(rng, N, scale=0.01)
        v = np.square(normal(rng, N))  # like the squares of earlier gradients
    weight_decay = 0.0 if case.variant == "no-weight-decay" else WEIGHT_DECAY
    return Arguments(dict(params=(N,), grads=grads, m=(N,), v=(N,), N=N, learning_rate=LEARNING_RATE, beta1=BETA1,
                          beta2=BETA2, eps=EPS, weight_decay=weight_decay, step=case.size["step"]),
                     initial=dict(params=params, m=m, v=v))


def error_bound(x, e):
    # Leading order, in units of U; every scalar reaches float32 rounded once (the host forms 1 - beta and the
    # bias corrections in double). The old m and params are no inputs: the expected outputs bound them.
    # m = beta1 m_old + (1 - beta1) g: two products, each with its scalar's rounding, and a sum: 2U of
    # |beta1 m_old| + (1 - beta1)|g|, and U of |m|; and |beta1 m_old| <= |m| + (1 - beta1)|g|.
    # v: the same, with one product more, but its terms are positive: 5U of v.
    # m_hat, v_hat: 2U more each (the bias correction and the division). The square root halves v_hat's relative
    # error and adds its own, so d = sqrt(v_hat) + eps errs by 7U of sqrt(v_hat) and 2U of eps: v's relative
    # error reaches the step halved. r = m_hat / d carries m_hat's and d's relative errors (and a trace more for
    # second-order terms), and one rounding.
    # params: 3U of |params_old| (the decay as a factor or as a term), lr times r's error, 3U of lr * r, and U of
    # the result. A result below float32's normal range errs by up to U * TINY absolutely; through the square
    # root v's becomes sqrt(U * TINY / bias_correction2) in d, far below U * eps.
    step = x["step"]
    bias_correction1, bias_correction2 = 1 - BETA1**step, 1 - BETA2**step
    g, m, v, params = np.abs(x["grads"]), np.abs(e["m"]), e["v"], np.abs(e["params"])
    floor = 4 * U * TINY
    m_error = 3 * U * (m + 2 * (1 - BETA1) * g) + floor
    v_error = 5 * U * v + floor
    m_hat = m / bias_correction1
    m_hat_error = m_error / bias_correction1 + 2 * U * m_hat
    root = np.sqrt(v / bias_correction2)
    d = root + EPS
    d_error = 7 * U * root + 2 * U * EPS + np.sqrt(floor / bias_correction2)
    r = m_hat / d
    r_error = (m_hat_error + r * d_error) / d * (1 + 16 * U) + U * r
    update = LEARNING_RATE * r
    old_params = (params + update) / (1 - LEARNING_RATE * WEIGHT_DECAY)
    params_error = U * params + 3 * U * old_params + LEARNING_RATE * r_error + 3 * U * update + floor
    return {"params": params_error, "m": m_error, "v": v_error}


SPEC = Spec(
    function="adamw_update", module="adamw", outputs=("params", "m", "v"), build=build, error_bound=error_bound,
    updates=("params", "m", "v"),
    cases=(
        dict(N=1, step=1),
        dict(N=7, step=3),
        dict(N=1000, step=10),
        dict(N=2**20 + 3, step=100),
        dict(N=4099, step=1, values="extreme"),      # step 1: the largest bias corrections (1 / 0.1, 1 / 0.001)
        dict(N=4099, step=10_000, values="extreme"),  # beta1^step below double's range: no correction of m
        dict(N=1000, step=2, variant="no-weight-decay"),
        dict(N=2**20 + 3, step=7, variant="no-weight-decay"),
    ),
    quick=dict(N=2**22, step=10),
    benchmark=(dict(N=GPT2_PARAMETERS, step=10),),
    traffic=lambda s: 28 * s["N"],  # params, grads, m, v read; params, m, v written
    graded=False, milestone=4,
)
