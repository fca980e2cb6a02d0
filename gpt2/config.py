"""GPT-2's sizes and the layout of its parameters.

The parameter layout is llm.c's, which the kit's checkpoints use: one array per kind
of tensor, stacked over layers, linear weights as (out, in), the token table padded
to a multiple of 128 rows (the padding rows are zero and never produce a token).
"""

from __future__ import annotations

import dataclasses
import math

from gpt2kit.kernel_runtime import KitError


class ConfigError(KitError):
    """Sizes that describe no GPT-2."""


@dataclasses.dataclass(frozen=True)
class GPT2Config:
    max_T: int = 1024             # the context length: positions in wpe
    vocab_size: int = 50257       # V: real tokens
    padded_vocab_size: int = 50304  # Vp: rows of wte, V rounded up to a multiple of 128
    num_layers: int = 12          # L
    num_heads: int = 12           # NH
    channels: int = 768           # C
    end_of_text: int = 50256      # the token that ends a text: generation stops there

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"GPT2Config.{field.name} must be a positive integer, got {value!r}")
        if self.channels % self.num_heads:
            raise ConfigError(f"channels={self.channels} is not a multiple of num_heads={self.num_heads}")
        if self.padded_vocab_size < self.vocab_size:
            raise ConfigError(f"padded_vocab_size={self.padded_vocab_size} < vocab_size={self.vocab_size}")

    @classmethod
    def sized(cls, num_layers: int, num_heads: int, channels: int, *, vocab_size: int = 50257,
              max_T: int = 1024) -> "GPT2Config":
        padded = -(-vocab_size // 128) * 128
        return cls(max_T, vocab_size, padded, num_layers, num_heads, channels)

    def parameter_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every parameter tensor, in checkpoint order."""
        L, C, Vp, T = self.num_layers, self.channels, self.padded_vocab_size, self.max_T
        return {
            "wte": (Vp, C), "wpe": (T, C),
            "ln1w": (L, C), "ln1b": (L, C),
            "qkvw": (L, 3 * C, C), "qkvb": (L, 3 * C),
            "attprojw": (L, C, C), "attprojb": (L, C),
            "ln2w": (L, C), "ln2b": (L, C),
            "fcw": (L, 4 * C, C), "fcb": (L, 4 * C),
            "fcprojw": (L, C, 4 * C), "fcprojb": (L, C),
            "lnfw": (C,), "lnfb": (C,),
        }

    def num_parameters(self) -> int:
        return sum(math.prod(shape) for shape in self.parameter_shapes().values())


PRESETS = {
    "gpt2": GPT2Config.sized(12, 12, 768),
    "gpt2-medium": GPT2Config.sized(24, 16, 1024),
    "gpt2-large": GPT2Config.sized(36, 20, 1280),
    "gpt2-xl": GPT2Config.sized(48, 25, 1600),
}
PRESET_ALIASES = {"124M": "gpt2", "355M": "gpt2-medium", "774M": "gpt2-large", "1558M": "gpt2-xl"}
# a size with no published weights, to train from scratch in minutes (python -m gpt2kit.gpt2.train): 30M parameters,
# 19M of them the token table
SMALL_PRESETS = {"gpt2-mini": GPT2Config.sized(6, 6, 384)}
# every size by each of its names: what random:<size> may name
SIZES = PRESETS | SMALL_PRESETS | {alias: PRESETS[name] for alias, name in PRESET_ALIASES.items()}


def preset(name: str) -> GPT2Config:
    if name not in SIZES:
        raise ConfigError(f"unknown GPT-2 size {name!r} (known: {', '.join(SIZES)})")
    return SIZES[name]
