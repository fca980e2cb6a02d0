"""GPT-2's entry in the kit's family registry (model_runtime.families)."""

from pathlib import Path

from gpt2kit.gpt2 import checkpoint
from gpt2kit.gpt2.config import SIZES
from gpt2kit.gpt2.model import GPT2
from gpt2kit.model_runtime.families import GENERATES_TEXT, Family


def names_gpt2(source: str) -> bool:
    """random (124M), a file (llm.c's checkpoints are one file), or a hub name (gpt2, 124M, openai-community/gpt2-xl,
    ...)."""
    return source == "random" or Path(source).expanduser().is_file() or checkpoint.hub_repo_id(source) is not None


FAMILY = Family(key="gpt2", name="GPT-2", does=GENERATES_TEXT, model=GPT2, load=checkpoint.load, sizes=SIZES,
                model_type="gpt2", names=names_gpt2, transformers_model=checkpoint.transformers_model)
