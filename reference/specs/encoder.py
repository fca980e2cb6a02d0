"""encoder_forward(out, inp, wte, wpe, B, T, C): out[b, t] = wte[inp[b, t]] + wpe[t]."""

import numpy as np

from gpt2kit.reference.numerics import half_ulp
from gpt2kit.reference.spec import Arguments, Spec, normal


def build(case, rng):
    B, T, C, V, max_T = (case.size[k] for k in ("B", "T", "C", "V", "max_T"))
    tokens = rng.integers(0, V, size=(B, T), dtype=np.int32)
    tokens.flat[0], tokens.flat[-1] = 0, V - 1  # both ends of the table
    return Arguments(dict(out=(B, T, C), inp=tokens, wte=normal(rng, V, C), wpe=normal(rng, max_T, C),
                          B=B, T=T, C=C))


def error_bound(x, e):
    # One float32 addition per element, correctly rounded: off by at most half an ulp.
    return {"out": half_ulp(e["out"])}


GPT2 = dict(V=50257, max_T=1024)

SPEC = Spec(
    function="encoder_forward", module="encoder", outputs=("out",), build=build, error_bound=error_bound,
    cases=(
        dict(B=1, T=1, C=8, **GPT2),
        dict(B=2, T=7, C=37, V=1000, max_T=64),
        dict(B=4, T=64, C=768, V=5000, max_T=1024),
        dict(B=1, T=1024, C=48, V=300, max_T=1024),
    ),
    quick=dict(B=4, T=64, C=768, **GPT2),
    benchmark=(dict(B=8, T=1024, C=768, **GPT2),),
    traffic=lambda s: 4 * (2 * s["B"] * s["T"] * s["C"] + s["T"] * s["C"] + s["B"] * s["T"]),
)
