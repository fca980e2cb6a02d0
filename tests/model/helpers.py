"""Small models for the model tests: random GPT-2 weights with every parameter non-trivial."""

import numpy as np

from gpt2.checkpoint import perturbed_parameters  # noqa: F401 (the model tests' weights)
from gpt2.config import GPT2Config

TINY = GPT2Config.sized(2, 4, 64, max_T=64)  # the real vocabulary, so the tokenizer fits


def eos_leaning_parameters(seed: int, lean: float) -> dict:
    """TINY's weights with the final layernorm's bias pushed along end-of-text's embedding, so that
    end-of-text's logit rises by `lean`: hypotheses and rows then end at different steps."""
    params = perturbed_parameters(TINY, seed=seed)
    eos = params["wte"][50256].astype(np.float64)
    params["lnfb"] = (params["lnfb"] + lean * eos / (eos @ eos)).astype(np.float32)
    return params
