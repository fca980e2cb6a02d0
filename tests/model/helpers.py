"""Small models for the model tests: random GPT-2 weights with every parameter non-trivial."""

import numpy as np
import pytest

from gpt2kit.gpt2.checkpoint import perturbed_parameters  # noqa: F401 (the model tests' weights)
from gpt2kit.gpt2.config import GPT2Config
from gpt2kit.reference.variants import DECLARED

TINY = GPT2Config.sized(2, 4, 64, max_T=64)  # the real vocabulary, so the tokenizer fits


def eos_leaning_parameters(seed: int, lean: float) -> dict:
    """TINY's weights with the final layernorm's bias pushed along end-of-text's embedding, so that
    end-of-text's logit rises by `lean`: hypotheses and rows then end at different steps."""
    params = perturbed_parameters(TINY, seed=seed)
    eos = params["wte"][50256].astype(np.float64)
    params["lnfb"] = (params["lnfb"] + lean * eos / (eos @ eos)).astype(np.float32)
    return params


def variants_called(*names: str) -> list:
    """The `calls` markers of running the variants `names` (reference.variants): each one's host function in its
    module, so that a test of them skips while one is a stub, or not in this kit (tests/conftest.py)."""
    declared = {variant.name: variant for variant in DECLARED}
    return [pytest.mark.calls(declared[name].function, module=declared[name].module) for name in names]
