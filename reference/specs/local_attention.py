"""local_attention_forward(out, lse, inp, B, T, C, NH, W): multi-head attention of packed q|k|v
(B, T, 3C) in which each query attends to its W most recent keys, itself included: query t sees
keys t - W + 1 .. t (those >= 0). W >= T is causal attention; W = 1, each query only itself (out = v).
lse (B, NH, T) gets each softmax's log-sum-exp. Milestone 3: kernels/flash_attention.py."""

from gpt2kit.reference.spec import Arguments, Spec, normal
from gpt2kit.reference.specs.attention import QUICK
from gpt2kit.reference.specs.flash_attention import traffic, windowed_error_bound
from gpt2kit.reference.specs.softmax import causal_pairs


def build(case, rng):
    B, T, C, NH, W = (case.size[k] for k in ("B", "T", "C", "NH", "W"))
    scale = 100.0 if case.values == "extreme" else 1.0  # extreme: scores of order 1e4
    return Arguments(dict(out=(B, T, C), lse=(B, NH, T), inp=normal(rng, B, T, 3 * C, scale=scale),
                          B=B, T=T, C=C, NH=NH, W=W))


def error_bound(x, e):
    return windowed_error_bound(x, e, window=x["W"])


def flops(s):  # q k^T and p v over each query's window
    T, W = s["T"], min(s["W"], s["T"])
    pairs = causal_pairs(T) - causal_pairs(T - W)  # query t sees min(t + 1, W) keys
    return 2 * 2 * s["B"] * s["NH"] * pairs * (s["C"] // s["NH"])


SPEC = Spec(
    function="local_attention_forward", module="flash_attention", outputs=("out", "lse"), build=build,
    error_bound=error_bound, graded=False, milestone=3,
    cases=(
        dict(B=1, T=1, C=64, NH=1, W=128),
        dict(B=2, T=7, C=96, NH=2, W=1),          # each query only itself: out is v
        dict(B=2, T=7, C=96, NH=2, W=3),
        dict(B=1, T=33, C=16, NH=2, W=33),        # W = T: causal attention
        dict(B=1, T=90, C=512, NH=2, W=20),       # head size 256
        dict(B=1, T=130, C=20, NH=4, W=70),       # head size 5; a window across three key tiles
        dict(B=2, T=64, C=768, NH=12, W=1000),    # W > T: causal attention
        dict(B=1, T=1024, C=768, NH=12, W=128),   # the course's window at GPT-2's context
        dict(B=1, T=100, C=128, NH=2, W=16, values="extreme"),
    ),
    quick=QUICK | dict(W=128),
    benchmark=(dict(B=8, T=1024, C=768, NH=12, W=128),),
    traffic=traffic,
    flops=flops,
)
