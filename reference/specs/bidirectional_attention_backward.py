"""bidirectional_attention_backward(dinp, dout, inp, att, lengths, B, T, C, NH): bidirectional attention's gradients
of q, k and v, written into dinp (B, T, 3C), from packed q|k|v inp (B, T, 3C), the output's gradient dout (B, T, C),
the forward pass's probabilities att (B, NH, T, T) (0 at padded keys, as bidirectional_attention_forward writes them)
and each utterance's real frames lengths (B,) int32. Padded keys' dk and dv are 0: no query saw them."""

import math

import numpy as np

from gpt2kit.reference.bounds import attention_backward_bounds, split_heads
from gpt2kit.reference.numerics import softmax_rows
from gpt2kit.reference.spec import Arguments, Spec, normal
from gpt2kit.reference.specs.bidirectional_attention import CASES, WAV2VEC2, draw_lengths, real_keys


def build(case, rng):
    B, T, C, NH = (case.size[k] for k in ("B", "T", "C", "NH"))
    HS = C // NH
    # extreme: scores q.k / sqrt(HS) of standard deviation ~36, so a row's probability sits on a few keys and the
    # others fall to float32's subnormal numbers, or to 0
    inp = normal(rng, B, T, 3 * C, scale=6.0 if case.values == "extreme" else 1.0)
    lengths = draw_lengths(rng, B, T)
    q, k, _ = split_heads(inp.astype(np.float64), NH, HS)
    scores = np.where(real_keys(lengths, T), q @ k.transpose(0, 1, 3, 2) / math.sqrt(HS), -np.inf)
    att = softmax_rows(scores).astype(np.float32)  # what the forward pass saved: rows summing to 1, 0 at padding
    return Arguments(dict(dinp=(B, T, 3 * C), dout=normal(rng, B, T, C), inp=inp, att=att, lengths=lengths, B=B, T=T,
                          C=C, NH=NH))


def error_bound(x, e):
    # causal attention's backward bounds (reference.bounds.attention_backward_bounds) with the keys each
    # utterance's length leaves visible to every query
    B, T, C = x["dout"].shape
    NH = x["att"].shape[1]
    q, k, v = split_heads(x["inp"], NH, C // NH)
    (dy,) = split_heads(x["dout"], NH, C // NH)
    grads = np.stack(attention_backward_bounds(q, k, v, dy, x["att"], real_keys(x["lengths"], T)))
    return {"dinp": grads.transpose(1, 3, 0, 2, 4).reshape(B, T, 3 * C)}


def traffic(s):  # dout, inp and att read, dinp written; dscores written and read twice
    N, P = s["B"] * s["T"] * s["C"], s["B"] * s["NH"] * s["T"] ** 2
    return 4 * (N + 3 * N + P + 3 * N + 3 * P)


def flops(s):  # dy v^T, ds k, ds^T q and p^T dy over every pair
    return 4 * 2 * s["B"] * s["NH"] * s["T"] ** 2 * (s["C"] // s["NH"])


SPEC = Spec(
    function="bidirectional_attention_backward", module="bidirectional_attention", outputs=("dinp",), build=build,
    error_bound=error_bound,
    cases=CASES[:-1] + (dict(B=3, T=100, C=128, NH=2, values="extreme"),),
    quick=dict(B=2, T=200, C=768, NH=12),
    benchmark=(WAV2VEC2,),
    traffic=traffic, flops=flops,
    graded=False, provided=True, handed_out=False,
)
