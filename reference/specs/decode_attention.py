"""decode_attention_forward(out, qkv, k_cache, v_cache, lengths, B, C, NH, max_T): one query
per row (qkv (B, 1, 3C)) attends to cache slots 0..min(lengths[b], max_T - 1); out (B, 1, C).
(A local model's cache is a ring of max_T = W slots: once full, every slot is a key.)"""

import math

import numpy as np

from gpt2kit.reference.bounds import attention_bounds
from gpt2kit.reference.numerics import softmax_rows
from gpt2kit.reference.spec import Arguments, Spec, cache_lengths, normal


def build(case, rng):
    B, C, NH, max_T = (case.size[k] for k in ("B", "C", "NH", "max_T"))
    scale = 100.0 if case.values == "extreme" else 1.0
    lengths = (rng.integers(max_T - 1, 3 * max_T, size=B).astype(np.int32) if case.variant == "ring"
               else cache_lengths(rng, B, max_T))
    k_cache, v_cache = (normal(rng, B, NH, max_T, C // NH, scale=scale) for _ in range(2))
    for b, length in enumerate(lengths):
        k_cache[b, :, length + 1:] = v_cache[b, :, length + 1:] = np.nan  # beyond the cache: never read
    return Arguments(dict(out=(B, 1, C), qkv=normal(rng, B, 1, 3 * C, scale=scale), k_cache=k_cache,
                          v_cache=v_cache, lengths=lengths, B=B, C=C, NH=NH, max_T=max_T))


def error_bound(x, e):
    B, _, C = e["out"].shape
    NH, max_T, HS = x["k_cache"].shape[1:]
    out = np.empty((B, NH, HS))
    for b, length in enumerate(x["lengths"].astype(int)):
        q = x["qkv"][b].reshape(3, NH, 1, HS)[0]
        k, v = x["k_cache"][b, :, :length + 1], x["v_cache"][b, :, :length + 1]
        p = softmax_rows(q @ np.swapaxes(k, -1, -2) / math.sqrt(HS))
        out[b] = attention_bounds(np.abs(q), np.abs(k), np.abs(v), p, np.ones(p.shape, dtype=bool))[1][:, 0]
    return {"out": out.reshape(B, 1, C)}


SPEC = Spec(
    function="decode_attention_forward", module="decode", outputs=("out",), build=build,
    error_bound=error_bound, graded=False,
    cases=(
        dict(B=1, C=768, NH=12, max_T=1024),
        dict(B=3, C=96, NH=2, max_T=37),
        dict(B=2, C=16, NH=2, max_T=5),
        dict(B=3, C=128, NH=2, max_T=100, values="extreme"),
        dict(B=3, C=96, NH=2, max_T=7, variant="ring"),   # lengths past the slots: all of them are keys
        # more (b, h) blocks than SMs: the host's smaller blocks (512 threads on an H200 or A40, then 256)
        dict(B=15, C=80, NH=10, max_T=40),
        dict(B=23, C=64, NH=16, max_T=33),
        dict(B=2, C=4096, NH=16, max_T=2048),  # GPT-J's: head size 256, positions past 1024
    ),
)
