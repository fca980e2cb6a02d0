"""kv_cache_append_forward(k_cache, v_cache, qkv, lengths, B, T, C, NH, max_T): cache slots
(lengths[b] + t) % max_T (B, NH, max_T, HS) get the keys and values of qkv (B, T, 3C); of more than
max_T new tokens only the last max_T (the ring of a local model's cache)."""

import numpy as np

from gpt2kit.reference.spec import Arguments, Spec, cache_lengths, exact, normal


def build(case, rng):
    B, T, C, NH, max_T = (case.size[k] for k in ("B", "T", "C", "NH", "max_T"))
    ring = case.variant == "ring"  # lengths past max_T: the slots wrap around
    lengths = rng.integers(0, 3 * max_T, size=B).astype(np.int32) if ring else cache_lengths(rng, B, max_T, T)
    caches = {}
    for name in ("k_cache", "v_cache"):
        cache = normal(rng, B, NH, max_T, C // NH)  # earlier tokens' entries: must survive
        for b, start in enumerate(lengths):
            cache[b, :, (start + np.arange(max(0, T - max_T), T)) % max_T] = np.nan  # the slots the call must write
        caches[name] = cache
    return Arguments(dict(k_cache=caches["k_cache"].shape, v_cache=caches["v_cache"].shape,
                          qkv=normal(rng, B, T, 3 * C), lengths=lengths, B=B, T=T, C=C, NH=NH, max_T=max_T),
                     initial=caches)


SPEC = Spec(
    function="kv_cache_append_forward", module="decode", outputs=("k_cache", "v_cache"), build=build,
    error_bound=exact, graded=False,  # a copy
    cases=(
        dict(B=1, T=1, C=768, NH=12, max_T=1024),
        dict(B=2, T=3, C=1024, NH=4, max_T=1500),     # head size 256
        dict(B=3, T=5, C=96, NH=2, max_T=17),
        dict(B=2, T=1, C=16, NH=2, max_T=8),
        dict(B=3, T=1, C=16, NH=2, max_T=4, variant="ring"),
        dict(B=3, T=3, C=96, NH=2, max_T=5, variant="ring"),
        dict(B=2, T=11, C=16, NH=2, max_T=4, variant="ring"),   # more new tokens than slots: the last 4 kept
    ),
)
