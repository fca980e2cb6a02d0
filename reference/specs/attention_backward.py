"""attention_backward(dinp, dscores, dout, inp, att, B, T, C, NH): causal multi-head attention's gradients of
q, k and v, written into dinp (B, T, 3C), from packed q|k|v inp (B, T, 3C), the output's gradient dout (B, T, C)
and the forward pass's probabilities att (B, NH, T, T), whose entries above the diagonal are never read;
dscores (B, NH, T, T) is scratch."""

import math

import numpy as np

from gpt2kit.reference.bounds import attention_backward_bounds, split_heads
from gpt2kit.reference.numerics import softmax_rows
from gpt2kit.reference.spec import Arguments, Spec, normal
from gpt2kit.reference.specs.softmax import causal, causal_pairs


def build(case, rng):
    B, T, C, NH = (case.size[k] for k in ("B", "T", "C", "NH"))
    HS = C // NH
    # extreme: scores q.k / sqrt(HS) of standard deviation ~36, so a row's probability sits on a few keys and the
    # others fall to float32's subnormal numbers, or to 0
    inp = normal(rng, B, T, 3 * C, scale=6.0 if case.values == "extreme" else 1.0)
    q, k, _ = split_heads(inp.astype(np.float64), NH, HS)
    scores = np.where(causal(T), q @ k.transpose(0, 1, 3, 2) / math.sqrt(HS), -np.inf)
    att = softmax_rows(scores).astype(np.float32)  # what the forward pass saved: rows summing to 1
    att[:, :, ~causal(T)] = np.nan  # never read: must not matter
    return Arguments(dict(dinp=(B, T, 3 * C), dscores=(B, NH, T, T), dout=normal(rng, B, T, C), inp=inp, att=att,
                          B=B, T=T, C=C, NH=NH))


def error_bound(x, e):
    # dp = dy v^T, the row sums of p * dp, ds and the three products each round as a sum of their terms' magnitudes;
    # every error is carried on as an absolute one, since dp - rowsum cancels where a row's probability sits on one
    # key (reference.bounds.attention_backward_bounds derives it step by step).
    B, T, C = x["dout"].shape
    NH = x["att"].shape[1]
    q, k, v = split_heads(x["inp"], NH, C // NH)
    (dy,) = split_heads(x["dout"], NH, C // NH)
    p = np.where(causal(T), x["att"], 0.0)
    grads = np.stack(attention_backward_bounds(q, k, v, dy, p, causal(T)))  # (3, B, NH, T, HS)
    return {"dinp": grads.transpose(1, 3, 0, 2, 4).reshape(B, T, 3 * C)}


def traffic(s):  # dout, inp and att's causal part read, dinp written
    N = s["B"] * s["T"] * s["C"]
    return 4 * (N + 3 * N + s["B"] * s["NH"] * causal_pairs(s["T"]) + 3 * N)


def flops(s):  # dy v^T, ds k, ds^T q and p^T dy, the causal half only
    return 4 * 2 * s["B"] * s["NH"] * causal_pairs(s["T"]) * (s["C"] // s["NH"])


SPEC = Spec(
    function="attention_backward", module="attention_backward", outputs=("dinp",), scratch=("dscores",),
    build=build, error_bound=error_bound,
    cases=(
        dict(B=1, T=1, C=8, NH=2),
        dict(B=2, T=7, C=12, NH=3),           # head size 4: less than a slice of the sums
        dict(B=1, T=33, C=64, NH=4),          # head size 16
        dict(B=2, T=64, C=768, NH=12),
        dict(B=1, T=17, C=512, NH=2),         # GPT-J's head size, 256
        dict(B=1, T=130, C=80, NH=2),         # three tiles of queries and keys, head size 40
        dict(B=1, T=100, C=128, NH=2, values="extreme"),
    ),
    quick=dict(B=2, T=128, C=768, NH=12),
    benchmark=(dict(B=8, T=1024, C=768, NH=12),),
    traffic=traffic, flops=flops,
    graded=False, milestone=4,
)
