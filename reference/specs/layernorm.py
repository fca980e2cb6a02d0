"""layernorm_forward(out, mean, rstd, inp, weight, bias, B, T, C): LayerNorm of every row,
biased variance, eps 1e-5; mean and rstd (B, T) are outputs too."""

import math

import numpy as np

from gpt2kit.reference.numerics import U
from gpt2kit.reference.spec import Arguments, Spec, normal


def draw_rows(case, rng) -> np.ndarray:
    """A case's inp (B, T, C): rows of their own mean and spread; extreme: mean 1e3, std 0.1 (a naive variance, or
    a normalized value formed as x * rstd - mean * rstd, loses everything)."""
    B, T, C = (case.size[k] for k in ("B", "T", "C"))
    if case.values == "extreme":
        x = 1e3 + 0.1 * rng.standard_normal((B, T, C))
    else:
        x = rng.standard_normal((B, T, 1)) + rng.uniform(0.5, 2, (B, T, 1)) * rng.standard_normal((B, T, C))
    return x.astype(np.float32)


def build(case, rng):
    B, T, C = (case.size[k] for k in ("B", "T", "C"))
    x = draw_rows(case, rng)
    return Arguments(dict(out=(B, T, C), mean=(B, T), rstd=(B, T), inp=x, weight=normal(rng, C), bias=normal(rng, C),
                          B=B, T=T, C=C))


def error_bound(x, e):
    # The mean and the variance are sums of C float32 terms of size about |mean| + std:
    # with errors that partly cancel they err by ~sqrt(C) * U of that; REL takes 4x.
    # An error d in the mean shifts every output by d * rstd * |w|; a relative error
    # in rstd (the sum's, plus rsqrtf's 2 ulp) scales the normalised value n.
    C = x["inp"].shape[-1]
    rel = 4 * math.sqrt(C) * U
    mean, rstd = e["mean"][..., None], e["rstd"][..., None]
    std = np.sqrt(((x["inp"] - mean) ** 2).mean(axis=-1, keepdims=True))
    mean_error = rel * (np.abs(mean) + std)
    n = (x["inp"] - mean) * rstd
    w = np.abs(x["weight"])
    out = w * (mean_error * rstd + np.abs(n) * (rel + 4 * U)) + 2 * U * np.abs(e["out"])
    return {"out": out, "mean": (mean_error + U * np.abs(mean))[..., 0], "rstd": (e["rstd"] * (rel + 4 * U))}


SPEC = Spec(
    function="layernorm_forward", module="layernorm", outputs=("out", "mean", "rstd"), build=build,
    error_bound=error_bound,
    cases=(
        dict(B=1, T=1, C=768),
        dict(B=2, T=7, C=37),
        dict(B=3, T=5, C=1),
        dict(B=4, T=64, C=768),
        dict(B=1, T=1024, C=1600),
        dict(B=2, T=7, C=768, values="extreme"),
    ),
    quick=dict(B=4, T=64, C=768),
    benchmark=(dict(B=8, T=1024, C=768),),
    traffic=lambda s: 4 * (2 * s["B"] * s["T"] * s["C"] + 2 * s["C"] + 2 * s["B"] * s["T"]),
)
