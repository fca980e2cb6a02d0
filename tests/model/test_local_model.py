"""A local model on the CPU (reference backend): each token attends to its W most recent tokens,
and its KV cache is a ring of W slots per layer that decodes exactly what a full forward computes."""

import numpy as np
import pytest

from gpt2kit.gpt2.checkpoint import perturbed_parameters
from gpt2kit.generation.generate import GREEDY, generate
from gpt2kit.gpt2.model import GPT2
from tests.model.helpers import TINY

WINDOW = 4


@pytest.fixture(scope="module")
def params():
    return perturbed_parameters(TINY, seed=5)


@pytest.fixture(scope="module")
def local(params):
    return GPT2(TINY, params, backend="reference", window=WINDOW)


def test_the_cache_holds_window_slots_not_the_context(local, params):
    cache = local.new_cache(2)
    assert cache.slots == WINDOW and cache.k[0].shape == (2, TINY.num_heads, WINDOW, TINY.channels // TINY.num_heads)
    assert cache.context == TINY.max_T
    plain = GPT2(TINY, params, backend="reference").new_cache(2)
    assert plain.slots == TINY.max_T  # the ring is TINY.max_T / WINDOW = 16 times smaller


@pytest.mark.parametrize("prompt_length", [1, WINDOW - 1, 3 * WINDOW + 1])
def test_each_decode_step_equals_a_full_forward_of_the_local_model(local, prompt_length):
    """The prefill writes the ring (a prompt longer than the window keeps its last W tokens), and each
    step's logits equal the last position of a full forward over every token so far."""
    tokens = list(np.random.default_rng(prompt_length).integers(0, TINY.vocab_size, prompt_length))
    cache = local.new_cache(1)
    local.forward(np.array([tokens], np.int32), cache)
    for token in np.random.default_rng(100 + prompt_length).integers(0, TINY.vocab_size, 2 * WINDOW + 1):
        step = local.decode_step(np.array([token], np.int32), cache).copy()
        tokens.append(int(token))
        full = local.forward(np.array([tokens], np.int32))[0, -1]
        np.testing.assert_allclose(step[0], full, rtol=0, atol=1e-12)
    assert cache.length == len(tokens)


def test_greedy_generation_with_the_ring_equals_recomputation(local):
    prompt = [7, 3, 99, 12, 5, 5, 40]
    cached = generate(local, prompt, 12, GREEDY, use_graph=False, stop_at_end_of_text=False)
    assert cached == generate(local, prompt, 12, GREEDY, use_cache=False, stop_at_end_of_text=False)


def test_the_window_changes_the_model_and_a_window_past_the_context_does_not(params):
    tokens = np.random.default_rng(9).integers(0, TINY.vocab_size, (1, 12)).astype(np.int32)
    plain = GPT2(TINY, params, backend="reference")(tokens)
    assert np.abs(GPT2(TINY, params, backend="reference", window=WINDOW)(tokens) - plain)[0, WINDOW:].max() > 1e-3
    np.testing.assert_allclose(GPT2(TINY, params, backend="reference", window=TINY.max_T)(tokens), plain,
                               rtol=0, atol=1e-12)


@pytest.mark.parametrize("window", [0, -3, 2.5, True])
def test_a_window_that_is_not_a_positive_count_is_one_line(params, window):
    with pytest.raises(ValueError, match="window must be a positive number of tokens"):
        GPT2(TINY, params, backend="reference", window=window)
