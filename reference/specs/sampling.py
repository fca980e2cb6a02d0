"""sample_forward(tokens, sequences, logits, lengths, B, V, stride, max_T, temperature, top_k, top_p, seed):
each row's next token from the first V of its logits (B, stride): at temperature 0 the largest (the lowest id on
ties), else one drawn from the weights exp(z - max z), z = logit / temperature, of the tokens top-k and then top-p
keep (ties at either cut all kept): the first kept token, in id order, whose running weight passes u / 2^64 of the
kept weight, u = splitmix64(seed ^ splitmix64(b << 32 | lengths[b])). It goes to tokens[b] and, when lengths[b] <
max_T, to sequences (B, max_T) at [b, lengths[b]]. The kit provides it whole: kernels/sampling.py.

The kernel's weights are float32, counted in 64-bit fixed point, and the reference's float64
(reference.cpu.sample_forward): they choose differently where a draw, or top-p's target, lands within ~1e-6
(relative) of a boundary between two tokens. Every boundary is such a chance: on normal logits over GPT-2's
vocabulary, where thousands of tokens share the weight, about one draw in 10^4 differs (6 of 96,000 on an H200).
A language model's rows (model_like) put nearly all of it on a few dozen tokens: simulated with each of the
kernel's weights off by up to 2 ulp, all these cases' 46 draws (each case's inputs and other inputs) disagree with
the reference with a probability of about 4e-6, and on an H200 none of 96,000 such draws did.
"""

import numpy as np

from gpt2kit.reference.spec import Arguments, Spec, exact, normal

MODES = {  # variant -> temperature, top_k (0: no cut), top_p (None or 1: no cut)
    "greedy": (0.0, 0, None),
    "ties": (0.0, 0, None),            # several equal largest logits: the lowest id wins
    "temperature": (0.7, 0, 1.0),
    "top-k": (1.0, 5, None),           # ties at the 5th largest: all of them kept
    "top-k-1": (0.7, 1, None),         # only the largest: greedy
    "top-p": (0.8, 0, 0.9),
    "top-k-top-p": (0.9, 10, 0.8),
}
EXTREME_TEMPERATURE = 0.3
LIKELY, ABOVE = 32, 20.0  # a row's likely tokens, and how far above the rest their logits lie
PADDING = 1e30  # past V: larger than every logit, so a kernel reading there chooses it


def build(case, rng):
    B, V, stride, max_T = (case.size[k] for k in ("B", "V", "stride", "max_T"))
    temperature, top_k, top_p = MODES[case.variant]
    logits = model_like(rng, B, V)
    if case.values == "extreme":  # z around +-33,000: exp(z) overflows unless the largest is subtracted first
        temperature = EXTREME_TEMPERATURE
        logits += rng.choice(np.float32([-1e4, 1e4]), size=(B, V))
    if case.variant == "ties":
        for row in logits:
            row[tied_ids(rng, V)] = row.max() + 1
    if case.variant == "top-k":  # the 4th to 7th largest made equal: the 5th largest has ties on both sides
        for row in logits:
            order = np.argsort(row)[::-1]
            row[order[3:7]] = row[order[3]]
    padded = np.full((B, stride), PADDING, np.float32)
    padded[:, :V] = logits
    lengths = rng.integers(0, max_T, size=B).astype(np.int32)
    if B > 1:
        lengths[-1] = max_T  # a full row: only tokens[b] is written
    sequences = rng.integers(0, V, size=(B, max_T)).astype(np.int32)  # earlier tokens: must survive
    written = np.flatnonzero(lengths < max_T)
    sequences[written, lengths[written]] = -1  # no token id: the element the call must write
    return Arguments(dict(tokens=(B,), sequences=(B, max_T), logits=padded, lengths=lengths, B=B, V=V, stride=stride,
                          max_T=max_T, temperature=temperature, top_k=top_k, top_p=top_p,
                          seed=rng.integers(0, 2**64, size=1, dtype=np.uint64)),
                     initial=dict(tokens=np.full(B, -1, np.int32), sequences=sequences))


def model_like(rng, B, V):
    """Rows of logits of the kind a language model gives: LIKELY tokens, anywhere in the vocabulary, around ABOVE,
    and the rest so far below (normal around 0) that together they weigh next to nothing."""
    logits = normal(rng, B, V, scale=2.0)
    likely = min(V, LIKELY)
    for row in logits:
        row[rng.choice(V, size=likely, replace=False)] = ABOVE + normal(rng, likely)
    return logits


def tied_ids(rng, V):
    """Ids for a row's equal largest logits (V > 8193): neighbours, ids 256 apart (one thread's stride in the
    kernel's blocks of 256), ids 8192 apart (in two blocks: a block's chunk of the row), and a few anywhere."""
    first = int(rng.integers(0, V - 8193))
    return np.unique(np.concatenate([[first + 8192, first + 256, first + 1, first],
                                     rng.choice(V, size=3, replace=False)]))


SPEC = Spec(
    function="sample_forward", module="sampling", outputs=("tokens", "sequences"), build=build,
    error_bound=exact, graded=False, provided=True,  # token ids
    cases=(
        dict(B=3, V=50257, stride=50304, max_T=1024, variant="greedy"),      # GPT-2's vocabulary, padded
        dict(B=4, V=50257, stride=50304, max_T=64, variant="ties"),
        dict(B=4, V=50257, stride=50304, max_T=64, variant="temperature"),
        dict(B=1, V=50257, stride=50304, max_T=1024, variant="top-p"),       # one prompt
        dict(B=3, V=1000, stride=1024, max_T=32, variant="top-k"),
        dict(B=3, V=1000, stride=1000, max_T=32, variant="top-k-1"),
        dict(B=5, V=2000, stride=2048, max_T=16, variant="top-k-top-p"),
        dict(B=2, V=1, stride=4, max_T=8, variant="top-k-top-p"),           # one token: top-k 10 cuts nothing
        dict(B=2, V=11, stride=16, max_T=5, variant="temperature"),
        dict(B=3, V=3000, stride=3072, max_T=32, values="extreme", variant="temperature"),
    ),
)
