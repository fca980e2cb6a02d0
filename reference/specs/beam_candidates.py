"""beam_candidates_forward(candidate_scores, candidate_tokens, logits, beam_scores, done, rows, V, stride, count):
beam search's scores of each beam's continuations. For each of `rows` beams (a row of logits (rows, stride), its
first V real), the `count` best log_softmax(logits[row, :V])[token] + beam_scores[row], best first, as the float32
numbers the host ranks (lowest token on ties): their scores to candidate_scores (rows, count), their tokens to
candidate_tokens (rows, count). Nothing is written once done[0] is set. The kit provides it whole:
kernels/beam_search.py."""

import numpy as np

from gpt2kit.reference.numerics import U
from gpt2kit.reference.spec import Arguments, Spec, normal

NEGATIVE = np.float32(-1e9)  # the score of a beam that must not go on, as every beam but the first at the first step


def build(case, rng):
    rows, V, stride, count = (case.size[k] for k in ("rows", "V", "stride", "count"))
    if case.values == "extreme":  # logits over +-1e4: exp overflows unless the row's max is subtracted first
        real = rng.uniform(-1e4, 1e4, (rows, V)).astype(np.float32)
    elif case.variant == "ties":  # small integers: logits that are equal give scores that are equal, bit for bit
        real = rng.integers(-10, 11, (rows, V)).astype(np.float32)
    else:
        real = normal(rng, rows, V)
    logits = np.full((rows, stride), real.max() + 10, np.float32)  # the padding beats every real logit: a kernel
    logits[:, :V] = real                                          # reading past V picks it
    beam_scores = -rng.exponential(5.0, rows).astype(np.float32)  # a running beam's sum of log-probabilities
    if case.values != "extreme":
        beam_scores[1::2] = NEGATIVE
    done = np.array([case.variant == "done"], np.int32)
    if done[0]:  # what the outputs held before: it must stay, so nothing is marked
        initial = dict(candidate_scores=normal(rng, rows, count),
                       candidate_tokens=rng.integers(0, V, (rows, count)).astype(np.int32))
    else:  # the scores are NaN until written; -1 marks the tokens to write
        initial = dict(candidate_tokens=np.full((rows, count), -1, np.int32))
    return Arguments(dict(candidate_scores=(rows, count), candidate_tokens=(rows, count), logits=logits,
                          beam_scores=beam_scores, done=done, rows=rows, V=V, stride=stride, count=count),
                     initial=initial)


def error_bound(x, e):
    # The kernel's score is ((x - m) - L) + b: m the row's max, L = logf of the sum of expf(x - m) (in double),
    # b the beam's score. Each float32 operation rounds by U of its result, expf and logf err by 2 and 1 ulps (4U
    # and 2U of their results). With d = x - m:
    #   d rounds by U|d|;
    #   each term of the sum errs by 4U of itself (expf) and by U|d| (d's rounding), so the sum by 4U + U mean|d|
    #   of itself, mean|d| the softmax-weighted mean of |d| (the sums' own rounding, each term to a multiple of
    #   CHUNK 2^-63 in fixed point and the chunks' V 2^-53 in double, is far below).
    #   The kernel sums each chunk of the row from the chunk's own max c, expf(x - c), then rescales by
    #   exp(c - m) in double: x - c rounds by U|x - c| <= U|d|, since x <= c <= m, and the rescaling adds 2^-52;
    #   the sum's conversion to float32 and logf add U and 2U|L|: L errs by U(5 + mean|d|) + 2U|L|;
    #   d - L and + b round by U|d - L| and U|d - L + b|;
    # together 3U|d| + 4U|L| + U|b| + U(5 + mean|d|) to first order. The reference's exact score rounded to float32
    # adds U|d - L + b|: 5U(|d| + |L| + |b|) + U(8 + mean|d|) holds both with room for second-order terms. A beam
    # at -1e9 is within it too: float32 holds no log-probability beside -1e9 (its spacing there is 64), so every
    # candidate of it scores -1e9.
    # Tokens are exact. Scores that are equal (logits that are equal, or a beam at -1e9) come out equal, bit for
    # bit, and so in token order; scores that are not must not come within the bound of each other among the best
    # `count` and at the cut, where float32 could rank them either way. The best few of V normal logits lie about
    # 1e-2 apart and the bound is about 1e-6, so random rows essentially never do.
    rows, V = x["rows"], x["V"]
    if x["done"][0]:  # nothing is computed: the outputs keep what they held, bit for bit
        return {name: np.zeros(np.shape(expected)) for name, expected in e.items()}
    logits = x["logits"].reshape(rows, -1)[:, :V]
    gaps = logits.max(axis=1, keepdims=True) - logits  # |d|
    weights = np.exp(-gaps)
    log_sum = np.log(weights.sum(axis=1, keepdims=True))  # L >= 0: the largest term is 1
    mean_gap = (weights * gaps).sum(axis=1, keepdims=True) / weights.sum(axis=1, keepdims=True)
    tokens = e["candidate_tokens"].astype(np.int64)
    gap = np.take_along_axis(gaps, tokens, axis=1)
    beam = np.abs(x["beam_scores"]).reshape(rows, 1)
    return {"candidate_scores": 5 * U * (gap + log_sum + beam) + U * (8 + mean_gap),
            "candidate_tokens": np.zeros(tokens.shape)}


SPEC = Spec(
    function="beam_candidates_forward", module="beam_search", outputs=("candidate_scores", "candidate_tokens"),
    build=build, error_bound=error_bound, graded=False, provided=True,
    cases=(
        dict(rows=5, count=10, V=50257, stride=50304),                  # GPT-2's vocabulary (rows padded), beam 5
        dict(rows=1, count=2, V=11, stride=16),                          # one beam, its 2 best of 11
        dict(rows=6, count=32, V=1000, stride=1024),                     # the most candidates: 2 * MAX_BEAMS
        dict(rows=3, count=20, V=300, stride=300, variant="ties"),       # equal logits: the lowest token first
        dict(rows=3, count=12, V=4000, stride=4096, values="extreme"),
        dict(rows=3, count=8, V=500, stride=512, variant="done"),        # the search is over: nothing changes
    ),
)
