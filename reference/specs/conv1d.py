"""conv1d_forward(out, inp, weight, bias, B, T, C, OC, K, stride, padding, groups, T_out): torch's grouped conv1d
on channel-last frames, inp (B, T, C) -> out (B, T_out, OC), weight (OC, C // groups, K), zero padding on both
sides; bias may be None; T_out at most the formula (fewer drop the last frames). Wav2Vec2's feature encoder and
positional convolution (kernels/conv1d.py, which the kit provides whole)."""

import math

import numpy as np

from gpt2kit.reference.numerics import U
from gpt2kit.reference.spec import Arguments, Spec, normal

SIZES = ("B", "T", "C", "OC", "K", "stride", "padding", "groups", "T_out")
EXTREME_MEAN = 1e4  # the extreme cases' frames: every value near 1e4, as a large DC offset of audio would make them


def conv(B, T, C, OC, K, stride=1, padding=0, groups=1, drop=0, **rest) -> dict:
    """A case's sizes, T_out the formula's frames less `drop`; rest: values= or variant=."""
    T_out = (T + 2 * padding - K) // stride + 1 - drop
    return dict(B=B, T=T, C=C, OC=OC, K=K, stride=stride, padding=padding, groups=groups, T_out=T_out, **rest)


def size_values(case) -> tuple[int, ...]:
    return tuple(case.size[k] for k in SIZES)


def frames(case, rng, B, T, C):
    """inp (B, T, C): normal, or for the extreme values normal around EXTREME_MEAN."""
    inp = normal(rng, B, T, C)
    return inp + np.float32(EXTREME_MEAN) if case.values == "extreme" else inp


def build(case, rng):
    B, T, C, OC, K, stride, padding, groups, T_out = size_values(case)
    bias = None if "no-bias" in case.variant else normal(rng, OC)
    return Arguments(dict(out=(B, T_out, OC), inp=frames(case, rng, B, T, C), weight=normal(rng, OC, C // groups, K),
                          bias=bias, **dict(zip(SIZES, size_values(case)))))


def sizes_of(x) -> tuple[int, ...]:
    return tuple(x[k] for k in SIZES)


def error_bound(x, e):
    # Each output is a sum of K * C / groups float32 products and the bias, bounded as a matmul's is
    # (reference/specs/matmul.py): 4 sqrt(n) U times the sum of the terms' magnitudes (rounding errors partly
    # cancel), which is the convolution of |inp| with |weight| plus |bias|; plus U |e| for the last rounding.
    from gpt2kit.reference.cpu import conv1d_forward  # here, not at the top: a submission's process never loads it
    B, T, C, OC, K, stride, padding, groups, T_out = sizes_of(x)
    bias = x.get("bias")
    magnitude = np.zeros((B, T_out, OC))
    conv1d_forward(magnitude, np.abs(x["inp"]), np.abs(x["weight"]), None if bias is None else np.abs(bias),
                   *sizes_of(x))
    return {"out": 4 * math.sqrt(K * (C // groups) + 1) * U * magnitude + U * np.abs(e["out"])}


def flops(s: dict) -> int:
    return 2 * s["B"] * s["T_out"] * s["OC"] * (s["C"] // s["groups"]) * s["K"]


def traffic(s: dict) -> int:
    """inp, weight and bias read, out written."""
    return 4 * (s["B"] * s["T"] * s["C"] + s["OC"] * (s["C"] // s["groups"]) * s["K"] + s["OC"]
                + s["B"] * s["T_out"] * s["OC"])


# Wav2Vec2's convolutions: the feature encoder's first (audio, 16 kHz: 10 s at B=4), a later one (C = OC = 512,
# stride 2), its last (K = 2), and the positional convolution (768 channels, 16 groups, K = 128, T_out = T)
FIRST = conv(B=4, T=160_000, C=1, OC=512, K=10, stride=5, variant="no-bias")
LATER = conv(B=4, T=31_999, C=512, OC=512, K=3, stride=2, variant="no-bias")
LAST = conv(B=4, T=999, C=512, OC=512, K=2, stride=2, variant="no-bias")
POSITIONAL = conv(B=4, T=799, C=768, OC=768, K=128, padding=64, groups=16, drop=1)

CASES = (
    conv(B=2, T=37, C=5, OC=7, K=3),                                    # odd sizes, every one under a tile
    conv(B=1, T=1, C=4, OC=6, K=3, padding=1),                          # one frame: padding makes its window
    conv(B=3, T=50, C=12, OC=20, K=4, stride=3, padding=2),             # stride > 1 with padding
    conv(B=2, T=40, C=12, OC=18, K=5, padding=2, groups=3),             # groups: each output reads its 4 channels
    conv(B=2, T=33, C=16, OC=16, K=4, padding=2, groups=16, drop=1),    # depthwise; K even, padding K // 2, T_out = T
    conv(B=2, T=2003, C=1, OC=70, K=10, stride=5, variant="no-bias"),   # audio: C = 1, no bias
    conv(B=2, T=90, C=8, OC=8, K=3, stride=2, drop=5),                  # T_out below the formula
    conv(B=1, T=20, C=3, OC=5, K=2, stride=3, variant="no-bias"),       # stride > K: frames no tap reads
    conv(B=1, T=300, C=130, OC=70, K=3, stride=2),                      # several tiles, none whole, every way
    conv(B=2, T=29, C=96, OC=96, K=8, padding=4, groups=2, drop=1),     # the positional convolution, small
    conv(B=1, T=50, C=768, OC=768, K=128, padding=64, groups=16, drop=1),  # and at its channels and kernel
    conv(B=2, T=255, C=512, OC=512, K=3, stride=2, variant="no-bias"),  # a later feature-encoder convolution
    # windows as rows of a matrix (no padding, one group, C % 4 == 0): read in place an utterance at a time in
    # 128 x 128 tiles (153 of them an utterance, none whole at the edges, OC not a multiple of 4), and gathered
    # from every utterance into one matrix where an utterance's tiles are fewer than the GPU's multiprocessors:
    # 64 x 64 tiles for a tiny one (a frame dropped), and large means
    conv(B=2, T=4201, C=8, OC=1050, K=3, stride=2),
    conv(B=3, T=9, C=8, OC=10, K=2, stride=2, drop=1, variant="no-bias"),
    conv(B=2, T=41, C=8, OC=12, K=3, stride=2, values="extreme"),
    conv(B=2, T=21, C=8, OC=12, K=3, stride=2, padding=1, values="extreme"),
)

SPEC = Spec(
    function="conv1d_forward", module="conv1d", outputs=("out",), build=build, error_bound=error_bound,
    cases=CASES, quick=LAST, benchmark=(FIRST, LATER, LAST, POSITIONAL), traffic=traffic, flops=flops,
    graded=False, provided=True, handed_out=False,
)
