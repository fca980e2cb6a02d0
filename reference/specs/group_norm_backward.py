"""group_norm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, frames, B, T, C, G): GroupNorm's gradients
from the forward pass's saved mean and rstd (B, G) of each utterance's first frames[b] frames; dinp (B, T, C) written,
dweight and dbias (C) added to. The statistics' share of dinp, a sum over every frame divided by the counted values,
goes to the counted frames only."""

import math

import numpy as np

from gpt2kit.reference.numerics import U
from gpt2kit.reference.spec import Arguments, Spec, normal
from gpt2kit.reference.specs.bidirectional_attention import draw_lengths
from gpt2kit.reference.specs.group_norm import CASES, WAV2VEC2, draw_inputs

EPS = 1e-5  # torch.nn.GroupNorm's, as the forward pass


def saved_statistics(x, G, frames):
    """mean and rstd (B, G) of each utterance's first frames[b] frames as a correct forward pass saves them: computed in
    float64, then rounded to float32."""
    B, T, C = x.shape
    groups = x.astype(np.float64).reshape(B, T, G, C // G)
    mean = np.stack([groups[b, :counted].mean(axis=(0, 2)) for b, counted in enumerate(frames)])
    variance = np.stack([((groups[b, :counted] - mean[b][None, :, None]) ** 2).mean(axis=(0, 2))
                         for b, counted in enumerate(frames)])
    return mean.astype(np.float32), (1.0 / np.sqrt(variance + EPS)).astype(np.float32)


def build(case, rng):
    B, T, C, G = (case.size[k] for k in ("B", "T", "C", "G"))
    x, frames = draw_inputs(case, rng), draw_lengths(rng, B, T)
    mean, rstd = saved_statistics(x, G, frames)
    # the parameters' gradients gathered so far: what the call adds to
    return Arguments(dict(dinp=(B, T, C), dweight=(C,), dbias=(C,), dout=normal(rng, B, T, C), inp=x,
                          weight=normal(rng, C), mean=mean, rstd=rstd, frames=frames, B=B, T=T, C=C, G=G),
                     initial=dict(dweight=normal(rng, C), dbias=normal(rng, C)))


def error_bound(x, e):
    # As layernorm_backward's, a group's T * C / G values in place of a row's C, the means dividing by the counted
    # values. n = (x - mean) * rstd from the saved statistics errs by <= 2U |n|. The group means m1 = mean(d),
    # d = dout * weight, and m2 = mean(d * n) are sums of that many terms, each rounded by U (d) or 4U (d * n) (the
    # kernel sums dout and dout * n per channel and scales by weight once: no worse), ~sqrt(count) * U of the sum of
    # magnitudes, 4x taken, and the division one U more. dinp = rstd * ((d - m1) - n * m2) carries d's rounding, m1's
    # error, m2's times |n|, n's times |m2|, a U of each difference and product, and the product with rstd.
    # dweight and dbias sum B*T frames of dout * n (3U each) and dout per channel: ~sqrt(B*T) * U of the channel's sum
    # of magnitudes, 4x taken, and the addition to what they held.
    B, T, C = x["dout"].shape
    G = x["mean"].shape[1]
    width = C // G
    rstd = x["rstd"].reshape(B, 1, G, 1)
    n = (x["inp"].reshape(B, T, G, width) - x["mean"].reshape(B, 1, G, 1)) * rstd
    d = (x["dout"] * x["weight"]).reshape(B, T, G, width)
    group_sum = 4 * math.sqrt(T * width) * U
    count = (np.minimum(x["frames"], T) * width).reshape(B, 1, 1, 1)  # the means divide every frame's sum by it

    def mean(values):
        return values.sum(axis=(1, 3), keepdims=True) / count

    m1, m2 = np.abs(mean(d)), np.abs(mean(d * n))
    m1_error = (group_sum + 2 * U) * mean(np.abs(d))
    m2_error = (group_sum + 5 * U) * mean(np.abs(d * n))
    n = np.abs(n)
    dinp = rstd * (4 * U * np.abs(d) + 3 * U * m1 + 6 * U * n * m2 + m1_error + n * m2_error)
    column_sum = 4 * math.sqrt(B * T) * U
    dweight = (column_sum + 4 * U) * np.abs(x["dout"] * n.reshape(B, T, C)).sum(axis=(0, 1))
    dbias = column_sum * np.abs(x["dout"]).sum(axis=(0, 1))
    return {"dinp": dinp.reshape(B, T, C) + 2 * U * np.abs(e["dinp"]), "dweight": dweight + U * np.abs(e["dweight"]),
            "dbias": dbias + U * np.abs(e["dbias"])}


def traffic(s):
    N = s["B"] * s["T"] * s["C"]
    return 4 * (3 * N + 5 * s["C"] + 2 * s["B"] * s["G"])  # dout, inp, dinp; weight, dweight and dbias read and
                                                           # written; mean, rstd


SPEC = Spec(
    function="group_norm_backward", module="group_norm", outputs=("dinp", "dweight", "dbias"),
    updates=("dweight", "dbias"), build=build, error_bound=error_bound, cases=CASES,
    quick=dict(B=1, T=16000, C=512, G=512),
    benchmark=(WAV2VEC2,),
    traffic=traffic,
    graded=False, provided=True, handed_out=False,
)
