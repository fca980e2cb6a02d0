"""softmax_forward(out, inp, scale, N, T): row (n, t) of out is the softmax of
scale * inp[n, t, :t+1], then zeros; entries above the diagonal are never read; out may be inp."""

import numpy as np

from gpt2kit.reference.bounds import probability_bound
from gpt2kit.reference.spec import Arguments, Spec, normal

SCALE = 0.125


def causal(T):
    return np.tril(np.ones((T, T), dtype=bool))


def build(case, rng):
    N, T = case.size["N"], case.size["T"]
    scores = normal(rng, N, T, T, scale=1e4 if case.values == "extreme" else 3.0)
    scores[:, ~causal(T)] = np.nan  # never read: must not matter
    same = {"out": "inp"} if case.variant == "in-place" else {}
    return Arguments(dict(out=(N, T, T), inp=scores, scale=SCALE, N=N, T=T), same_array=same)


def error_bound(x, e):
    T = x["inp"].shape[-1]
    scores = np.abs(SCALE * np.nan_to_num(x["inp"], nan=0.0))
    return {"out": probability_bound(e["out"], scores, causal(T))}


def causal_pairs(T):
    return T * (T + 1) // 2


SPEC = Spec(
    function="softmax_forward", module="attention", outputs=("out",), build=build, error_bound=error_bound,
    cases=(
        dict(N=1, T=1),
        dict(N=3, T=7),
        dict(N=2, T=100, variant="in-place"),
        dict(N=12, T=1024),
        dict(N=4, T=100, values="extreme"),
    ),
    quick=dict(N=24, T=128),
    benchmark=(dict(N=8 * 12, T=1024),),  # GPT-2 124M's attention at B=8: 12 heads each
    traffic=lambda s: 4 * s["N"] * (causal_pairs(s["T"]) + s["T"] ** 2),
)
