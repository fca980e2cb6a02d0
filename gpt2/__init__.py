"""GPT-2 on the kit's hand-written CUDA kernels.

    from gpt2kit.gpt2 import GPT2
    model = GPT2.from_pretrained("gpt2_124M.bin", backend="kernels")
    logits = model(tokens)   # (B, T) int32 -> (B, T, V)
"""

from gpt2kit.gpt2.config import GPT2Config
from gpt2kit.gpt2.model import GPT2

__all__ = ["GPT2", "GPT2Config"]
