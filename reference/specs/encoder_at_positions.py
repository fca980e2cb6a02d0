"""encoder_at_positions_forward(out, inp, positions, wte, wpe, B, T, C):
out[b, t] = wte[inp[b, t]] + wpe[positions[b] + t] (the KV-cache decoder's encoder)."""

import numpy as np

from gpt2kit.reference.numerics import half_ulp
from gpt2kit.reference.spec import Arguments, Spec, cache_lengths, normal


def build(case, rng):
    B, T, C, V, max_T = (case.size[k] for k in ("B", "T", "C", "V", "max_T"))
    return Arguments(dict(out=(B, T, C), inp=rng.integers(0, V, (B, T), dtype=np.int32),
                          positions=cache_lengths(rng, B, max_T, T), wte=normal(rng, V, C), wpe=normal(rng, max_T, C),
                          B=B, T=T, C=C))


def error_bound(x, e):
    # One float32 addition per element, correctly rounded: off by at most half an ulp.
    return {"out": half_ulp(e["out"])}


SPEC = Spec(
    function="encoder_at_positions_forward", module="decode", outputs=("out",), build=build,
    error_bound=error_bound, graded=False,
    cases=(
        dict(B=1, T=1, C=768, V=50257, max_T=1024),
        dict(B=3, T=2, C=37, V=100, max_T=20),
    ),
)
