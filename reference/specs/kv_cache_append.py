"""kv_cache_append_forward(k_cache, v_cache, qkv, lengths, B, T, C, NH, max_T): cache rows
lengths[b] + t (B, NH, max_T, HS) get the keys and values of qkv (B, T, 3C)."""

import numpy as np

from reference.spec import Arguments, Spec, cache_lengths, normal


def build(case, rng):
    B, T, C, NH, max_T = (case.size[k] for k in ("B", "T", "C", "NH", "max_T"))
    lengths = cache_lengths(rng, B, max_T, T)
    caches = {}
    for name in ("k_cache", "v_cache"):
        cache = normal(rng, B, NH, max_T, C // NH)  # earlier tokens' entries: must survive
        for b, start in enumerate(lengths):
            cache[b, :, start:start + T] = np.nan   # the rows the call must write
        caches[name] = cache
    return Arguments(dict(k_cache=caches["k_cache"].shape, v_cache=caches["v_cache"].shape,
                          qkv=normal(rng, B, T, 3 * C), lengths=lengths, B=B, T=T, C=C, NH=NH, max_T=max_T),
                     initial=caches)


def error_bound(x, e):
    return {name: np.zeros_like(expected) for name, expected in e.items()}  # a copy: exact


SPEC = Spec(
    function="kv_cache_append_forward", module="decode", outputs=("k_cache", "v_cache"), build=build,
    error_bound=error_bound, graded=False,
    cases=(
        dict(B=1, T=1, C=768, NH=12, max_T=1024),
        dict(B=3, T=5, C=96, NH=2, max_T=17),
        dict(B=2, T=1, C=16, NH=2, max_T=8),
    ),
)
