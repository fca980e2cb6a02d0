"""attention_forward(out, qkvr, att, inp, B, T, C, NH): causal multi-head attention of packed
q|k|v (B, T, 3C); att (B, NH, T, T) gets the probabilities; qkvr is scratch."""

import numpy as np

from gpt2kit.reference.bounds import attention_bounds
from gpt2kit.reference.spec import Arguments, Spec, normal
from gpt2kit.reference.specs.softmax import causal, causal_pairs


def build(case, rng):
    B, T, C, NH = (case.size[k] for k in ("B", "T", "C", "NH"))
    scale = 100.0 if case.values == "extreme" else 1.0  # extreme: scores of order 1e4
    return Arguments(dict(out=(B, T, C), qkvr=(3 * B * T * C,), att=(B, NH, T, T),
                          inp=normal(rng, B, T, 3 * C, scale=scale), B=B, T=T, C=C, NH=NH))


def error_bound(x, e):
    B, T, C3 = x["inp"].shape
    NH = e["att"].shape[1]
    HS = C3 // 3 // NH
    q, k, v = np.abs(x["inp"]).reshape(B, T, 3, NH, HS).transpose(2, 0, 3, 1, 4)
    att, out = attention_bounds(q, k, v, e["att"], causal(T))
    return {"att": att, "out": out.transpose(0, 2, 1, 3).reshape(B, T, C3 // 3)}


def traffic(s):
    N = s["B"] * s["T"] * s["C"]
    return 4 * (3 * N + s["B"] * s["NH"] * s["T"] ** 2 + N)


def flops(s):  # q k^T and p v, the causal half only
    return 2 * 2 * s["B"] * s["NH"] * causal_pairs(s["T"]) * (s["C"] // s["NH"])


CASES = (  # flash attention's too (reference/specs/flash_attention.py)
    dict(B=1, T=1, C=64, NH=1),
    dict(B=2, T=7, C=96, NH=2),          # head size 48
    dict(B=1, T=33, C=16, NH=2),         # head size 8
    dict(B=2, T=64, C=768, NH=12),
    dict(B=1, T=1024, C=768, NH=12),
    dict(B=1, T=100, C=128, NH=2, values="extreme"),
    dict(B=2, T=70, C=512, NH=2),        # GPT-J's head size, 256
    dict(B=1, T=40, C=196, NH=2),        # head size 98: two chunks of flash attention's 64, no float4 rows
)
QUICK = dict(B=2, T=128, C=768, NH=12)
BENCHMARK = (dict(B=8, T=1024, C=768, NH=12),)

SPEC = Spec(
    function="attention_forward", module="attention", outputs=("out", "att"), scratch=("qkvr",), build=build,
    error_bound=error_bound, cases=CASES, quick=QUICK, benchmark=BENCHMARK, traffic=traffic, flops=flops,
)
