"""layernorm_backward(dinp, dweight, dbias, scratch, dout, inp, weight, mean, rstd, B, T, C): LayerNorm's gradients
from the forward pass's saved mean and rstd (B, T). dinp (B, T, C), dweight and dbias (C) are all added to; scratch
(B, T, 2C) holds the kernel's partial sums of dweight and dbias (the kit's kernel uses a sixteenth of it), and nobody
checks it."""

import math

import numpy as np

from gpt2kit.reference.numerics import U
from gpt2kit.reference.spec import Arguments, Spec, normal
from gpt2kit.reference.specs.layernorm import draw_rows

EPS = 1e-5  # GPT-2's, as the forward pass
def saved_statistics(x):
    """mean and rstd (B, T) as a correct forward pass saves them: computed in float64, then rounded to float32."""
    rows = x.astype(np.float64)
    mean = rows.mean(axis=-1)
    variance = ((rows - mean[..., None]) ** 2).mean(axis=-1)
    return mean.astype(np.float32), (1.0 / np.sqrt(variance + EPS)).astype(np.float32)


def build(case, rng):
    B, T, C = (case.size[k] for k in ("B", "T", "C"))
    x = draw_rows(case, rng)
    mean, rstd = saved_statistics(x)
    # the gradients gathered so far: what the call adds to
    gathered = dict(dinp=normal(rng, B, T, C), dweight=normal(rng, C), dbias=normal(rng, C))
    return Arguments(dict(dinp=(B, T, C), dweight=(C,), dbias=(C,), scratch=(B, T, 2 * C), dout=normal(rng, B, T, C),
                          inp=x, weight=normal(rng, C), mean=mean, rstd=rstd, B=B, T=T, C=C), initial=gathered)


def error_bound(x, e):
    # n = (x - mean) * rstd from the saved statistics (the reference's too) errs by <= 2U |n|. The row means
    # m1 = mean(d), d = dout * weight, and m2 = mean(d * n) sum C terms, each rounded by U (d) or 4U (d * n): the sum
    # errs by ~sqrt(C) * U of the sum of the terms' magnitudes, 4x taken (as layernorm_forward's spec), and the
    # division by one U more. dinp += rstd * ((d - m1) - n * m2) then carries d's rounding, m1's error, m2's times
    # |n|, n's times |m2|, and a U of each difference and product (4U |d| + 3U |m1| + 6U |n m2| in all), and one
    # rounding of the addition to what dinp held.
    # dweight and dbias sum B*T rows of dout * n (3U each) and dout: ~sqrt(B*T) * U of the column's sum of
    # magnitudes, 4x taken, and the addition. For terms of one size t the bound grows like 4 (B*T)^1.5 U t: it is
    # measured against the sum of magnitudes, not against the column's result (terms of random sign cancel), and
    # covers a sum taken row after row, whose B*T roundings of partial sums up to B*T * t partly cancel.
    B, T, C = x["dout"].shape
    rstd = x["rstd"][..., None]
    n = (x["inp"] - x["mean"][..., None]) * rstd
    d = x["dout"] * x["weight"]
    row_sum = 4 * math.sqrt(C) * U
    m1, m2 = np.abs(d.mean(axis=-1, keepdims=True)), np.abs((d * n).mean(axis=-1, keepdims=True))
    m1_error = (row_sum + 2 * U) * np.abs(d).mean(axis=-1, keepdims=True)
    m2_error = (row_sum + 5 * U) * np.abs(d * n).mean(axis=-1, keepdims=True)
    n = np.abs(n)
    dinp = rstd * (4 * U * np.abs(d) + 3 * U * m1 + 6 * U * n * m2 + m1_error + n * m2_error)
    column_sum = 4 * math.sqrt(B * T) * U
    dweight = (column_sum + 4 * U) * np.abs(x["dout"] * n).sum(axis=(0, 1))
    dbias = column_sum * np.abs(x["dout"]).sum(axis=(0, 1))
    return {"dinp": dinp + U * np.abs(e["dinp"]), "dweight": dweight + U * np.abs(e["dweight"]),
            "dbias": dbias + U * np.abs(e["dbias"])}


def traffic(s):
    N, C = s["B"] * s["T"] * s["C"], s["C"]
    return 4 * (4 * N + 2 * s["B"] * s["T"] + 5 * C)  # dout, inp, dinp read and written; mean, rstd; the rest


SPEC = Spec(
    function="layernorm_backward", module="layernorm_backward", outputs=("dinp", "dweight", "dbias"),
    scratch=("scratch",), updates=("dinp", "dweight", "dbias"), build=build, error_bound=error_bound,
    cases=(
        dict(B=1, T=1, C=1),
        dict(B=1, T=3, C=5),
        dict(B=2, T=7, C=33),
        dict(B=1, T=1, C=768),
        dict(B=4, T=64, C=768),       # 16 slices of rows
        dict(B=3, T=300, C=100),      # 57 slices: more than a column's 32 threads of the parameter kernel
        dict(B=3, T=11, C=1000),      # the widest build held in registers (32 a lane), the last ones partly
        dict(B=2, T=5, C=1024),       # the widest rows held in registers: every lane's 32 in use
        dict(B=2, T=50, C=1600),      # GPT-2 XL: more columns than threads, too many for registers
        dict(B=2, T=7, C=768, values="extreme"),
    ),
    quick=dict(B=4, T=64, C=768),
    benchmark=(dict(B=8, T=1024, C=768),),
    traffic=traffic,
    graded=False, milestone=4,
)
