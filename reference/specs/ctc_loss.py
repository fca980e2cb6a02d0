"""ctc_loss_forward_backward(dlogits, losses, logits, targets, input_lengths, target_lengths, B, T, V, S): torch's
ctc_loss (blank 0, the log-softmax over V inside) of each utterance, losses (B,) = -log p(targets[b, :U_b] |
logits[b, :T_b]), with T_b = input_lengths[b] in 1..T and U_b = target_lengths[b] in 0..S (int32), and dlogits
(B, T, V) the gradient of their sum (written; 0 at frames t >= T_b, whose logits are never read)."""

import math

import numpy as np

from gpt2kit.reference.numerics import TINY, U
from gpt2kit.reference.spec import Arguments, Spec, normal
from gpt2kit.reference.specs.bidirectional_attention import draw_lengths

CASES = (
    dict(B=1, T=1, V=2, S=1),            # one frame, one label: a single alignment
    dict(B=3, T=7, V=3, S=4),            # two labels only: repeats, whose blank cannot be skipped
    dict(B=4, T=50, V=32, S=25),         # Wav2Vec2's classes; labels filling half the frames, and none
    dict(B=3, T=130, V=29, S=60),        # more states than a warp, and frames than a block has threads
    dict(B=3, T=40, V=32, S=20, values="extreme"),
)
WAV2VEC2 = dict(B=8, T=800, V=32, S=200)  # 16 s of speech: 800 frames, up to 200 characters


def draw_label_counts(rng, lengths, S: int) -> np.ndarray:
    """Each utterance's label count: the first as many as fit its frames whatever the repeats (ceil(T_b / 2), at most
    S), the third (of four or more) none, the others anywhere up to that."""
    most = np.minimum((lengths + 1) // 2, S)
    counts = rng.integers(0, most + 1)
    counts[0] = most[0]
    if counts.size >= 4:
        counts[2] = 0
    return counts.astype(np.int32)


def build(case, rng):
    B, T, V, S = (case.size[k] for k in ("B", "T", "V", "S"))
    lengths = draw_lengths(rng, B, T)
    counts = draw_label_counts(rng, lengths, S)
    targets = rng.integers(1, V, size=(B, S)).astype(np.int32)
    targets[np.arange(S) >= counts[:, None]] = 0  # past an utterance's labels: never read as one
    # extreme: logits of standard deviation 30, so most classes' probabilities fall below float32's range
    logits = normal(rng, B, T, V, scale=30.0 if case.values == "extreme" else 3.0)
    logits[np.arange(T) >= lengths[:, None]] = np.nan  # padded frames: must not matter
    return Arguments(dict(dlogits=(B, T, V), losses=(B,), logits=logits, targets=targets, input_lengths=lengths,
                          target_lengths=counts, B=B, T=T, V=V, S=S))


def error_bound(x, e):
    # Each frame of the recursions adds an emission lp to a log_add of the previous frame's states: the sum rounds by
    # U of |alpha| + |lp|, log_add's log1p and exp by a few ulps, and lp itself (x - max - log(sum)) by U of |x|,
    # |max| and |lp|. The largest state of a frame is within log L of the prefix's log-likelihood, which is at most
    # |loss| + log L from 0, and the smaller states' errors weigh only as much as their share. So each frame adds
    # at most U (8 (|loss| + log L) + 8 max |lp| + 4 max |x| + 16), and T_b frames add T_b times that (a linear
    # bound; errors of random sign add up far less). The loss carries that and its own rounding. An occupancy
    # exp(alpha + beta - lp - log-likelihood) carries the three sums' errors in its exponent, 3E, as a relative
    # error exp(3E) - 1; the softmax's probabilities p err by 4U (|x| + |lp| + 2) relative. TINY covers the
    # flushing of values below float32's normal range.
    logits, lengths, counts = x["logits"], x["input_lengths"].astype(int), x["target_lengths"].astype(int)
    B, T, V = logits.shape
    real = np.arange(T)[None, :] < lengths[:, None]  # (B, T)
    scores = np.where(real[..., None], logits, 0.0)
    lp = scores - scores.max(axis=-1, keepdims=True)
    lp -= np.log(np.exp(lp).sum(axis=-1, keepdims=True))
    p = np.exp(lp)
    occupancy = np.clip(p - e["dlogits"], 0.0, None)  # the occupancies emitting each class (dlogits = p - them)
    loss_bound, dlogits_bound = np.zeros(B), np.zeros((B, T, V))
    for b in range(B):
        frames, L = lengths[b], 2 * counts[b] + 1
        largest_lp, largest_x = np.abs(lp[b, :frames]).max(), np.abs(scores[b, :frames]).max()
        step = U * (8 * (abs(e["losses"][b]) + math.log(L)) + 8 * largest_lp + 4 * largest_x + 16)
        exponent = frames * step
        loss_bound[b] = exponent + U * abs(e["losses"][b])
        p_error = 4 * U * (np.abs(scores[b, :frames]) + np.abs(lp[b, :frames]) + 2) * p[b, :frames]
        dlogits_bound[b, :frames] = (p_error + np.expm1(3 * exponent) * occupancy[b, :frames] + U * np.abs(
            e["dlogits"][b, :frames]) + TINY)
    return {"losses": loss_bound, "dlogits": dlogits_bound}


def traffic(s):  # logits read, dlogits written (the scratch's traffic left out)
    return 4 * 2 * s["B"] * s["T"] * s["V"]


SPEC = Spec(
    function="ctc_loss_forward_backward", module="ctc_loss", outputs=("dlogits", "losses"), build=build,
    error_bound=error_bound, cases=CASES,
    quick=dict(B=4, T=200, V=32, S=60),
    benchmark=(WAV2VEC2,),
    traffic=traffic,
    graded=False, provided=True, handed_out=False,
)
