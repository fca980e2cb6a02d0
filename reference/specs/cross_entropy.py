"""cross_entropy_forward_backward(dlogits, losses, logits, targets, B, T, V, Vp): from logits (B, T, Vp), whose
first V columns are real, and targets (B, T) in [0, V): losses (B, T) = -log softmax(logits[b, t, :V])[target] and
dlogits (B, T, Vp) = (softmax - one_hot(target)) / (B * T), 0 in the padding columns; both written; dlogits may be
logits."""

import numpy as np

from gpt2kit.reference.bounds import exponent_error
from gpt2kit.reference.numerics import TINY, U, softmax_rows
from gpt2kit.reference.spec import Arguments, Spec, normal

GPT2 = dict(V=50257, Vp=50304)  # GPT-2's vocabulary, padded to a multiple of 128


def build(case, rng):
    B, T, V, Vp = (case.size[k] for k in ("B", "T", "V", "Vp"))
    logits = np.full((B, T, Vp), np.nan, np.float32)  # the padding: never read, so it must not matter
    if case.values == "extreme":  # exponents up to ~1e5: exp overflows unless the row's max is subtracted first
        logits[..., :V] = normal(rng, B, T, V, scale=1e4)
    else:
        logits[..., :V] = normal(rng, B, T, V, scale=3.0)
    targets = rng.integers(0, V, size=(B, T), dtype=np.int32)
    if case.values == "extreme":  # every other row's target its largest logit: a loss near 0 beside huge ones
        targets.flat[::2] = logits[..., :V].reshape(B * T, V)[::2].argmax(axis=-1)
    targets.flat[0], targets.flat[-1] = 0, V - 1  # both ends of the vocabulary
    same = {"dlogits": "logits"} if case.variant == "in-place" else {}
    return Arguments(dict(dlogits=(B, T, Vp), losses=(B, T), logits=logits, targets=targets, B=B, T=T, V=V, Vp=Vp),
                     same_array=same)


def error_bound(x, e):
    # A row's exponents x - max are <= 0, rounded by U|x - max| <= 2U max|x|; whether a probability is formed as
    # exp(x - max) / sum or as exp(x - lse), with lse = max + log(sum) rounded by U|lse|, its exponent errs by a few
    # U max|x| (the online sum's rescalings by exp(m_old - m_new) add at most 2U max|x| more). expf adds 2 ulp, the
    # division by the sum one rounding, and the sum of n positive terms ~sqrt(n) U of itself: exponent_error, the
    # softmax's own bound (reference.bounds), relative to each probability.
    # The gradient subtracts the one-hot (one rounding of |p - 1|) and divides by B * T (exact only for powers of
    # two; as a product with a rounded 1 / (B * T), two roundings; 1 / B / T, three): 4U |dlogit| more. A result
    # below float32's smallest normal number may be flushed to 0 wherever it is formed (the probability, or the
    # quotient by B * T): TINY absolute, after the division. The padding is exactly 0.
    # The loss is lse - x[target]: log(sum) carries the sum's relative error, logf 2 ulp of log(sum), and the
    # addition of max and the subtraction of x[target] one rounding each, of |lse| and of |loss|.
    B, T, V, Vp = x["B"], x["T"], x["V"], x["Vp"]
    scores = x["logits"][..., :V]
    exponent = exponent_error(np.abs(scores), np.ones(scores.shape, bool))
    dlogits = np.zeros((B, T, Vp))
    dlogits[..., :V] = softmax_rows(scores) * exponent / (B * T) + 4 * U * np.abs(e["dlogits"][..., :V]) + TINY
    target_logits = np.take_along_axis(scores, x["targets"].astype(np.int64)[..., None], axis=-1)[..., 0]
    lse, largest = e["losses"] + target_logits, scores.max(axis=-1)
    losses = exponent[..., 0] + U * (4 * np.abs(lse - largest) + np.abs(lse) + np.abs(e["losses"]))
    return {"dlogits": dlogits, "losses": losses}


SPEC = Spec(
    function="cross_entropy_forward_backward", module="cross_entropy", outputs=("dlogits", "losses"), build=build,
    error_bound=error_bound,
    cases=(
        dict(B=1, T=1, V=1, Vp=1),                       # one class: the loss and the gradient are 0
        dict(B=2, T=3, V=7, Vp=8),                       # V not a multiple of 4, B * T not a power of two
        dict(B=3, T=1, V=7, Vp=7),                       # rows not 16-byte aligned: the scalar path
        dict(B=3, T=5, V=1000, Vp=1024),                 # padding of whole groups of 4
        dict(B=2, T=4, V=1000, Vp=1000),                 # no padding
        dict(B=2, T=4, **GPT2),                          # rows longer than a block's 4 * 1024 columns
        dict(B=8, T=40, V=4999, Vp=5000),                # more rows than blocks: blocks take several
        dict(B=3, T=5, V=1000, Vp=1024, variant="in-place"),
        dict(B=1, T=3, **GPT2, variant="in-place"),
        dict(B=4, T=8, V=1000, Vp=1024, values="extreme"),
    ),
    quick=dict(B=4, T=64, **GPT2),
    benchmark=(dict(B=8, T=1024, **GPT2),),  # GPT-2 124M's training step at B=8
    traffic=lambda s: 4 * s["B"] * s["T"] * (s["V"] + s["Vp"] + 2),  # the real logits read, dlogits written
    graded=False, milestone=4,
)
