"""The fused decode step on the CPU (reference backend with its fused functions): the model's
wiring of layernorm_matmul, layernorm_matmul_gelu and matmul_residual computes the same step as
the eleven calls a layer it replaces. The kernels themselves are judged by their specs."""

import dataclasses

import numpy as np
import pytest

from gpt2kit.model_runtime.backends import BackendError, make_backend, uses_fused_decode
from gpt2kit.gpt2.checkpoint import perturbed_parameters
from gpt2kit.gpt2.model import GPT2
from gpt2kit.reference.variants import FUSED_DECODE_VARIANTS, VARIANTS
from tests.model.helpers import TINY


@pytest.fixture(scope="module")
def params():
    return perturbed_parameters(TINY, seed=11)


def decode_steps(model: GPT2, prompt: np.ndarray, tokens: np.ndarray) -> tuple[list, list]:
    """Each step's logits, and the step names the model ran (one step's)."""
    cache = model.new_cache(prompt.shape[0])
    model.forward(prompt, cache)
    steps = []
    model.observer = lambda step, layer, kernel, args: (steps.append(step), kernel(*args))
    logits = [model.decode_step(column, cache).copy() for column in tokens.T]
    model.observer = None
    return logits, steps[:len(steps) // tokens.shape[1]]


@pytest.mark.parametrize("seed", [0, 1], ids=lambda s: f"seed{s}")
def test_the_fused_step_computes_the_plain_step(params, seed):
    rng = np.random.default_rng(seed)
    prompt = rng.integers(0, TINY.vocab_size, (3, 5)).astype(np.int32)
    tokens = rng.integers(0, TINY.vocab_size, (3, 4)).astype(np.int32)
    plain = GPT2(TINY, params, backend="reference")
    fused = GPT2(TINY, params, backend=dataclasses.replace(make_backend("reference"), fused_decode=True))
    plain_logits, plain_steps = decode_steps(plain, prompt, tokens)
    fused_logits, fused_steps = decode_steps(fused, prompt, tokens)
    for a, b in zip(plain_logits, fused_logits):
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-12)  # float64 both ways: only the order of additions
    # a layer: ln1+qkv, attention (which appends the step's key and value), attproj+residual2, ln2+fc+gelu,
    # fcproj+residual3 (plain: 10)
    assert fused_steps[1:6] == ["ln1+qkv", "attention", "attproj+residual2", "ln2+fc+gelu", "fcproj+residual3"]
    assert "kv_append" not in plain_steps
    assert (len(plain_steps), len(fused_steps)) == (3 + 10 * TINY.num_layers, 2 + 5 * TINY.num_layers)
    assert fused_steps[-1] == "lnf+lm_head" and plain_steps[-2:] == ["lnf", "lm_head"]


@pytest.mark.skipif(not set(FUSED_DECODE_VARIANTS) <= set(VARIANTS), reason="this kit has no milestone-3 variants")
def test_only_all_three_variants_make_the_step_fused():
    assert uses_fused_decode(FUSED_DECODE_VARIANTS)
    assert not uses_fused_decode(FUSED_DECODE_VARIANTS[:2])
    assert not uses_fused_decode(("attention_flash",))


@pytest.mark.skipif(not set(FUSED_DECODE_VARIANTS) <= set(VARIANTS), reason="this kit has no milestone-3 variants")
@pytest.mark.parametrize("left_out", range(len(FUSED_DECODE_VARIANTS)), ids=lambda i: f"without_{FUSED_DECODE_VARIANTS[i]}")
def test_some_of_the_fused_matmuls_without_the_others_are_refused_in_one_line(left_out):
    named = FUSED_DECODE_VARIANTS[:left_out] + FUSED_DECODE_VARIANTS[left_out + 1:]
    with pytest.raises(BackendError) as refused:  # before any GPU is asked for: the same line on every machine
        make_backend("kernels", variants=("attention_flash", *named))
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"variants {', '.join(named)}: ")
    assert f"name {FUSED_DECODE_VARIANTS[left_out]} too" in message
    with pytest.raises(BackendError, match=f"name {' and '.join(named)} too"):
        make_backend("kernels", variants=(FUSED_DECODE_VARIANTS[left_out],))
