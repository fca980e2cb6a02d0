"""GPT-J's sizes and the layout of its parameters (as transformers' GPTJConfig and GPTJForCausalLM define them).

Parameters are stacked over layers like GPT-2's (gpt2/config.py), linear weights as
(out, in). q, k and v projections, three matrices in transformers, are one qkvw
(3C, C), so that one matmul writes the packed q|k|v rows the attention kernels read.
The projections inside attention have no bias; the MLP's and the LM head's do. The
LM head is its own matrix, not the token table (untied).
"""

from __future__ import annotations

import dataclasses
import math

from gpt2kit.kernel_runtime import KitError


class ConfigError(KitError):
    """Sizes that describe no GPT-J."""


@dataclasses.dataclass(frozen=True)
class GPTJConfig:
    max_T: int = 2048             # the context: positions the rotary table covers
    vocab_size: int = 50400       # V: the LM head's rows (GPT-2's 50,257 tokens, padded by transformers to 50,400)
    num_layers: int = 28          # L
    num_heads: int = 16           # NH
    channels: int = 4096          # C; head size C / NH = 256
    rotary_dim: int = 64          # the values of each query and key head that are turned
    end_of_text: int = 50256      # the token that ends a text: generation stops there

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"GPTJConfig.{field.name} must be a positive integer, got {value!r}")
        if self.channels % self.num_heads:
            raise ConfigError(f"channels={self.channels} is not a multiple of num_heads={self.num_heads}")
        if self.rotary_dim % 2 or self.rotary_dim > self.channels // self.num_heads:
            raise ConfigError(f"rotary_dim={self.rotary_dim} must be even and at most the head size "
                              f"{self.channels // self.num_heads}")

    @property
    def padded_vocab_size(self) -> int:
        """The logits' row stride: GPT-J's vocabulary is padded already."""
        return self.vocab_size

    def parameter_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every parameter tensor, in checkpoint order."""
        L, C, V = self.num_layers, self.channels, self.vocab_size
        return {
            "wte": (V, C),
            "ln1w": (L, C), "ln1b": (L, C),
            "qkvw": (L, 3 * C, C), "attprojw": (L, C, C),
            "fcw": (L, 4 * C, C), "fcb": (L, 4 * C),
            "fcprojw": (L, C, 4 * C), "fcprojb": (L, C),
            "lnfw": (C,), "lnfb": (C,),
            "lm_headw": (V, C), "lm_headb": (V,),
        }

    def num_parameters(self) -> int:
        return sum(math.prod(shape) for shape in self.parameter_shapes().values())


PRESETS = {
    "gpt-j-6b": GPTJConfig(),
}
