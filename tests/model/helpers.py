"""Small models for the model tests: random GPT-2 weights with every parameter non-trivial."""

import numpy as np

from gpt2.checkpoint import random_parameters
from gpt2.config import GPT2Config

TINY = GPT2Config.sized(2, 4, 64, max_T=64)  # the real vocabulary, so the tokenizer fits


def perturbed_parameters(config: GPT2Config, seed: int) -> dict:
    """GPT-2's init, plus noise on the biases and layernorm weights, which the init
    leaves at 0 and 1: a checkpoint that swapped or dropped them must show."""
    params = random_parameters(config, seed)
    rng = np.random.default_rng(seed + 1)
    for name in ("ln1w", "ln1b", "qkvb", "attprojb", "ln2w", "ln2b", "fcb", "fcprojb", "lnfw", "lnfb"):
        params[name] = params[name] + rng.normal(0, 0.1, params[name].shape).astype(np.float32)
    return params


def eos_leaning_parameters(seed: int, lean: float) -> dict:
    """TINY's weights with the final layernorm's bias pushed along end-of-text's embedding, so that
    end-of-text's logit rises by `lean`: hypotheses and rows then end at different steps."""
    params = perturbed_parameters(TINY, seed=seed)
    eos = params["wte"][50256].astype(np.float64)
    params["lnfb"] = (params["lnfb"] + lean * eos / (eos @ eos)).astype(np.float32)
    return params
