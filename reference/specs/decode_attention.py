"""decode_attention_forward(out, qkv, k_cache, v_cache, lengths, B, C, NH, max_T): the row's key and value (qkv
(B, 1, 3C)) go to cache slot lengths[b] % max_T, as kv_cache_append_forward puts them; then one query per row
attends to cache slots 0..min(lengths[b], max_T - 1); out (B, 1, C). (A local model's cache is a ring of max_T = W
slots: once full, every slot is a key, and the new one replaces the oldest.)"""

import math

import numpy as np

from gpt2kit.reference.bounds import attention_bounds
from gpt2kit.reference.numerics import softmax_rows
from gpt2kit.reference.spec import Arguments, Spec, cache_lengths, normal

UNREAD = 1e15  # the magnitude of the slots past a row's keys: read as keys, they take all of the attention


def build(case, rng):
    B, C, NH, max_T = (case.size[k] for k in ("B", "C", "NH", "max_T"))
    HS = C // NH
    scale = 100.0 if case.values == "extreme" else 1.0
    lengths = (rng.integers(max_T - 1, 3 * max_T, size=B).astype(np.int32) if case.variant == "ring"
               else cache_lengths(rng, B, max_T))
    qkv = normal(rng, B, 1, 3 * C, scale=scale)
    q_signs = np.where(qkv.reshape(B, 3, NH, 1, HS)[:, 0] < 0, -1.0, 1.0).astype(np.float32)  # (B, NH, 1, HS)
    k_cache, v_cache = (normal(rng, B, NH, max_T, HS, scale=scale) for _ in range(2))
    for b, length in enumerate(lengths):
        # slots past the new key are never read: a key there would outscore every real one, its value be far off
        k_cache[b, :, length + 1:] = UNREAD * q_signs[b]
        v_cache[b, :, length + 1:] = UNREAD
    # slot lengths[b] % max_T holds an earlier token's key and value, which the call must replace (an older one's,
    # in a full ring)
    return Arguments(dict(out=(B, 1, C), qkv=qkv, k_cache=k_cache.shape, v_cache=v_cache.shape, lengths=lengths,
                          B=B, C=C, NH=NH, max_T=max_T), initial=dict(k_cache=k_cache, v_cache=v_cache))


def error_bound(x, e):
    B, _, C = e["out"].shape
    NH, max_T, HS = x["k_cache"].shape[1:]
    from gpt2kit.reference.cpu import kv_cache_append_forward  # here: a submission's process never loads cpu.py
    k_cache, v_cache, lengths = x["k_cache"].copy(), x["v_cache"].copy(), x["lengths"].astype(int)
    # the row's key and value in their slot: the cache the query attends to
    kv_cache_append_forward(k_cache, v_cache, x["qkv"], lengths, B, 1, C, NH, max_T)
    out = np.empty((B, NH, HS))
    for b, length in enumerate(lengths):
        q = x["qkv"][b].reshape(3, NH, 1, HS)[0]
        k, v = k_cache[b, :, :length + 1], v_cache[b, :, :length + 1]
        p = softmax_rows(q @ np.swapaxes(k, -1, -2) / math.sqrt(HS))
        out[b] = attention_bounds(np.abs(q), np.abs(k), np.abs(v), p, np.ones(p.shape, dtype=bool))[1][:, 0]
    return {"out": out.reshape(B, 1, C), "k_cache": np.zeros(k_cache.shape), "v_cache": np.zeros(v_cache.shape)}


SPEC = Spec(
    function="decode_attention_forward", module="decode", outputs=("out", "k_cache", "v_cache"), build=build,
    error_bound=error_bound, updates=("k_cache", "v_cache"), graded=False,
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
