"""Wav2Vec2's sizes and the layout of its parameters (as transformers' Wav2Vec2Config and Wav2Vec2ForCTC
define them, at the base model's defaults).

The feature encoder's convolutions each have their own weight (OC, C_in, K), no bias; the
first is followed by a group norm with a group per channel (feat_extract_norm "group").
The transformer's parameters are stacked over layers like GPT-2's (gpt2/config.py), linear
weights as (out, in); q, k and v, three projections in transformers, are one qkvw (3C, C)
and qkvb (3C), so that one matmul writes the packed q|k|v rows the attention reads. The
positional convolution keeps weight norm's two halves, g (1, 1, K) and v (C, C / groups, K).
Each encoder layer is post-layernorm (do_stable_layer_norm False): ln1 after the attention's
residual add, ln2 (transformers' final_layer_norm) after the feed-forward's.
"""

from __future__ import annotations

import dataclasses
import math

from gpt2kit.kernel_runtime import KitError
from gpt2kit.reference.cpu import LAYERNORM_EPS

# the transformer layers' parameters, stacked over layers (L first); the others are one tensor each
LAYER_PARAMETERS = ("qkvw", "qkvb", "attprojw", "attprojb", "ln1w", "ln1b", "fcw", "fcb", "fcprojw", "fcprojb", "ln2w",
                    "ln2b")
# what transformers' Wav2Vec2Config may choose and this model fixes
SUPPORTED = {"feat_extract_norm": "group", "conv_bias": False, "do_stable_layer_norm": False}


class ConfigError(KitError):
    """Sizes that describe no Wav2Vec2 this model runs."""


@dataclasses.dataclass(frozen=True)
class Wav2Vec2Config:
    conv_dim: tuple[int, ...] = (512,) * 7          # the feature encoder's channels, layer by layer
    conv_kernel: tuple[int, ...] = (10, 3, 3, 3, 3, 2, 2)
    conv_stride: tuple[int, ...] = (5, 2, 2, 2, 2, 2, 2)  # 320 samples a frame: 20 ms of 16 kHz audio
    channels: int = 768             # C, transformers' hidden_size
    num_layers: int = 12            # L
    num_heads: int = 12             # NH
    intermediate_size: int = 3072   # I, the feed-forward's width
    pos_conv_kernel: int = 128      # K of the positional convolution (num_conv_pos_embeddings)
    pos_conv_groups: int = 16       # its groups (num_conv_pos_embedding_groups)
    vocab_size: int = 32            # V: the CTC head's classes, 0 the blank
    layer_norm_eps: float = 1e-5
    feat_extract_norm: str = "group"
    conv_bias: bool = False
    do_stable_layer_norm: bool = False

    def __post_init__(self):
        sizes = ("channels", "num_layers", "num_heads", "intermediate_size", "pos_conv_kernel", "pos_conv_groups",
                 "vocab_size")
        for name in sizes:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"Wav2Vec2Config.{name} must be a positive integer, got {value!r}")
        if not len(self.conv_dim) == len(self.conv_kernel) == len(self.conv_stride) >= 1:
            raise ConfigError(f"conv_dim, conv_kernel and conv_stride must be as long as each other, got "
                              f"{len(self.conv_dim)}, {len(self.conv_kernel)} and {len(self.conv_stride)}")
        if self.channels % self.num_heads or self.channels % self.pos_conv_groups:
            raise ConfigError(f"channels={self.channels} is not a multiple of num_heads={self.num_heads} and of "
                              f"pos_conv_groups={self.pos_conv_groups}")
        if abs(self.layer_norm_eps - LAYERNORM_EPS) > 1e-12:  # the layernorm kernels' own
            raise ConfigError(f"layer_norm_eps {self.layer_norm_eps!r} is not {LAYERNORM_EPS}")
        for name, value in SUPPORTED.items():
            if getattr(self, name) != value:
                raise ConfigError(f"{name}={getattr(self, name)!r}: this model runs {name}={value!r} only")

    @property
    def features(self) -> int:
        """F: the feature encoder's output channels, what the feature projection takes."""
        return self.conv_dim[-1]

    def conv_layers(self) -> list[tuple[int, int, int, int]]:
        """(C_in, OC, K, stride) of each feature-encoder convolution; audio comes in as one channel."""
        inputs = (1, *self.conv_dim[:-1])
        return list(zip(inputs, self.conv_dim, self.conv_kernel, self.conv_stride))

    def frames(self, samples):
        """The frames the feature encoder makes of `samples` (an int or an integer array), as transformers'
        _get_feat_extract_output_lengths."""
        return self.frames_per_layer(samples)[-1]

    def samples_per_frame(self) -> int:
        """The fewest samples that make one frame (400 at the base kernels and strides: 25 ms of 16 kHz audio)."""
        samples = 1
        for K, stride in zip(reversed(self.conv_kernel), reversed(self.conv_stride)):
            samples = (samples - 1) * stride + K
        return samples

    def frames_per_layer(self, samples) -> list:
        """Each feature-encoder convolution's output frames: without padding, (n - K) // stride + 1 of n."""
        frames = []
        for K, stride in zip(self.conv_kernel, self.conv_stride):
            samples = (samples - K) // stride + 1
            frames.append(samples)
        return frames

    def parameter_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every parameter tensor, in the order of transformers' model."""
        L, C, I, V, F, K = (self.num_layers, self.channels, self.intermediate_size, self.vocab_size, self.features,
                            self.pos_conv_kernel)
        convs = {f"conv{i}w": (OC, C_in, kernel) for i, (C_in, OC, kernel, _) in enumerate(self.conv_layers())}
        return {
            "conv0w": convs.pop("conv0w"), "gnw": (self.conv_dim[0],), "gnb": (self.conv_dim[0],), **convs,
            "ln_featw": (F,), "ln_featb": (F,), "projw": (C, F), "projb": (C,),
            "pos_convb": (C,), "pos_conv_g": (1, 1, K), "pos_conv_v": (C, C // self.pos_conv_groups, K),
            "ln_encw": (C,), "ln_encb": (C,),
            "qkvw": (L, 3 * C, C), "qkvb": (L, 3 * C), "attprojw": (L, C, C), "attprojb": (L, C),
            "ln1w": (L, C), "ln1b": (L, C),
            "fcw": (L, I, C), "fcb": (L, I), "fcprojw": (L, C, I), "fcprojb": (L, C),
            "ln2w": (L, C), "ln2b": (L, C),
            "lm_headw": (V, C), "lm_headb": (V,),
        }

    def num_parameters(self) -> int:
        return sum(math.prod(shape) for shape in self.parameter_shapes().values())


PRESETS = {
    "base": Wav2Vec2Config(),
    # the tests' size: the base model's kernels and strides, everything else small
    "tiny": Wav2Vec2Config(conv_dim=(16,) * 7, channels=32, num_layers=2, num_heads=4, intermediate_size=64,
                           pos_conv_kernel=16, pos_conv_groups=4, vocab_size=12),
}
