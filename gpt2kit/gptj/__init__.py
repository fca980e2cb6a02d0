"""GPT-J on the kit's kernels: the same host functions as GPT-2, plus the rotary embedding.

    from gpt2kit.gptj import GPTJ
    model = GPTJ.from_pretrained("EleutherAI/gpt-j-6b", backend="kernels")   # or a directory, or "random:gpt-j-6b"
    logits = model(tokens)   # (B, T) int32 -> (B, T, 50400)

`python -m gpt2kit --model gpt-j-6b` (or any GPT-J source) completes text with it.
"""

from gpt2kit.gptj.config import GPTJConfig
from gpt2kit.gptj.model import GPTJ

__all__ = ["GPTJ", "GPTJConfig"]
