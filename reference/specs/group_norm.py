"""group_norm_forward(out, mean, rstd, inp, weight, bias, frames, B, T, C, G): GroupNorm of channel-last frames
(B, T, C), each (b, group of C / G consecutive channels) normalised, at every frame, by the mean and biased variance
(eps 1e-5) of its values in the first frames[b] frames (int32, 1..T; T is torch's GroupNorm); mean and rstd (B, G) are
outputs too."""

import math

import numpy as np

from gpt2kit.reference.numerics import U
from gpt2kit.reference.spec import Arguments, Spec, normal
from gpt2kit.reference.specs.bidirectional_attention import draw_lengths

WAV2VEC2 = dict(B=4, T=16000, C=512, G=512)  # the first feature-encoder layer's output: 512 channels, a group each,
                                             # 16,000 frames of 5 samples (5 s of audio at 16 kHz)
CASES = (
    dict(B=1, T=1, C=1, G=1),
    dict(B=1, T=1, C=6, G=3),            # T = 1: a group is its channels of one frame
    dict(B=2, T=7, C=12, G=4),           # groups of 3 channels, fewer than a tile's 32
    dict(B=2, T=300, C=40, G=40),        # a group per channel (Wav2Vec2's), two tiles of frames, the last short
    dict(B=3, T=513, C=96, G=8),         # groups of 12 channels across tiles; a last tile of one frame
    dict(B=1, T=1000, C=512, G=1),       # one group of every channel: 2,048 tile results combined
    dict(B=2, T=3000, C=512, G=512),
    dict(B=2, T=100, C=48, G=6, values="extreme"),
)


def draw_inputs(case, rng) -> np.ndarray:
    """A case's inp (B, T, C): each channel of each utterance with a mean and spread of its own, so its groups' channels
    differ; extreme: every group's values near a mean of its own of 1e3 to 1e4, spread 0.1 (a variance taken as
    sum(x^2) - mean^2 keeps nothing)."""
    B, T, C, G = (case.size[k] for k in ("B", "T", "C", "G"))
    if case.values == "extreme":
        means = np.repeat(10.0 ** rng.uniform(3, 4, (B, 1, G)), C // G, axis=-1)
        x = means + 0.1 * rng.standard_normal((B, T, C))
    else:
        x = rng.standard_normal((B, 1, C)) + rng.uniform(0.5, 2, (B, 1, C)) * rng.standard_normal((B, T, C))
    return x.astype(np.float32)


def build(case, rng):
    B, T, C, G = (case.size[k] for k in ("B", "T", "C", "G"))
    return Arguments(dict(out=(B, T, C), mean=(B, G), rstd=(B, G), inp=draw_inputs(case, rng),
                          weight=normal(rng, C), bias=normal(rng, C), frames=draw_lengths(rng, B, T), B=B, T=T, C=C,
                          G=G))


def error_bound(x, e):
    # As layernorm_forward's, with a group's T * C / G values for a row's C: the mean and the variance are sums of that
    # many float32 terms of size about |mean| + std, which err by ~sqrt(count) * U of it (4x taken). An error d in the
    # mean shifts every output by d * rstd * |w|, and the variance about a mean off by d by d^2: rstd's relative error
    # is the sum's, rsqrtf's 2 ulp and (d * rstd)^2, which matters where the mean is large next to the spread and the
    # sum is plain (not pairwise, as NumPy's over several axes), and it scales n.
    B, T, C = x["inp"].shape
    G = e["mean"].shape[1]
    rel = 4 * math.sqrt(T * C // G) * U
    groups = x["inp"].reshape(B, T, G, C // G)
    mean, rstd = e["mean"].reshape(B, 1, G, 1), e["rstd"].reshape(B, 1, G, 1)
    counted = (np.arange(T) < x["frames"].reshape(B, 1)).reshape(B, T, 1, 1)  # the frames the statistics count
    values = counted.sum(axis=1, keepdims=True) * (C // G)
    std = np.sqrt(((groups - mean) ** 2 * counted).sum(axis=(1, 3), keepdims=True) / values)
    mean_error = rel * (np.abs(mean) + std)
    rstd_error = rel + 4 * U + (mean_error * rstd) ** 2  # relative
    n_error = np.abs(groups - mean) * rstd * rstd_error + mean_error * rstd
    out = np.abs(x["weight"]) * n_error.reshape(B, T, C) + 2 * U * np.abs(e["out"])
    return {"out": out, "mean": (mean_error + U * np.abs(mean)).reshape(B, G),
            "rstd": (e["rstd"].reshape(B, 1, G, 1) * rstd_error).reshape(B, G)}


def traffic(s):
    N = s["B"] * s["T"] * s["C"]
    return 4 * (2 * N + 2 * s["C"] + 2 * s["B"] * s["G"])  # inp read, out written; weight, bias; mean, rstd


SPEC = Spec(
    function="group_norm_forward", module="group_norm", outputs=("out", "mean", "rstd"), build=build,
    error_bound=error_bound, cases=CASES,
    quick=dict(B=1, T=16000, C=512, G=512),
    benchmark=(WAV2VEC2,),
    traffic=traffic,
    graded=False, provided=True, handed_out=False,
)
