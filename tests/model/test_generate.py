"""Generation on the CPU (reference backend): sampling rules, prompt fitting, the KV cache."""

import numpy as np
import pytest

from gpt2kit.generation.beam_search import BeamSearch, beam_search
from gpt2kit.gpt2.checkpoint import perturbed_parameters
from gpt2kit.generation.decoding import make_decoder
from gpt2kit.generation.generate import (GREEDY, NonFiniteLogitsError, Sampling, SamplingError, fit_prompt, generate,
                                         generate_batch, next_token)
from gpt2kit.gpt2.model import GPT2
from gpt2kit.model_runtime.causal_lm import TokenError
from gpt2kit.model_runtime.tokenizer import END_OF_TEXT
from tests.model.helpers import TINY


@pytest.fixture(scope="module")
def model():
    return GPT2(TINY, perturbed_parameters(TINY, seed=2), backend="reference")


def test_greedy_takes_the_argmax():
    logits = np.array([0.1, 3.0, -1.0, 2.9])
    assert next_token(logits, GREEDY, np.random.default_rng(0)) == 1


def test_top_k_samples_only_the_k_likeliest():
    logits = np.random.default_rng(1).normal(size=100)
    rng = np.random.default_rng(2)
    drawn = {next_token(logits, Sampling(temperature=2.0, top_k=3), rng) for _ in range(400)}
    assert drawn == set(np.argsort(logits)[-3:])


def test_top_p_keeps_the_smallest_set_reaching_p():
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    rng = np.random.default_rng(3)
    drawn = {next_token(logits, Sampling(top_p=0.75), rng) for _ in range(400)}
    assert drawn == {0, 1}  # 0.5 < 0.75 <= 0.5 + 0.3


def test_temperature_sampling_follows_the_distribution():
    logits = np.log(np.array([0.7, 0.2, 0.1]))
    rng = np.random.default_rng(4)
    counts = np.bincount([next_token(logits, Sampling(), rng) for _ in range(4000)], minlength=3)
    np.testing.assert_allclose(counts / 4000, [0.7, 0.2, 0.1], atol=0.03)


def test_same_seed_same_text(model):
    sampling = Sampling(temperature=1.0, top_k=50, seed=11)
    assert generate(model, [1, 2, 3], 12, sampling) == generate(model, [1, 2, 3], 12, sampling)


@pytest.mark.parametrize("kwargs", [
    {"temperature": -1.0}, {"temperature": float("nan")}, {"temperature": float("inf")}, {"top_k": 0},
    {"top_p": 0.0}, {"top_p": 1.5}, {"top_p": float("nan")}, {"seed": -1},
], ids=str)
def test_bad_sampling_options_raise(kwargs):
    with pytest.raises(SamplingError, match=f"{next(iter(kwargs))} must be"):
        Sampling(**kwargs)


def test_long_prompt_is_cut_from_the_left_with_a_warning():
    warnings = []
    kept = fit_prompt(list(range(100)), max_new_tokens=30, context=64, warn=warnings.append)
    assert kept == list(range(66, 100))
    assert warnings == [("prompt of 100 tokens cut to its last 34: 66 dropped from its start to leave room for "
                         "30 new tokens in the context of 64")]


def test_no_room_for_a_prompt_is_an_error():
    with pytest.raises(TokenError, match="leaves no room"):
        fit_prompt([1], max_new_tokens=64, context=64, warn=print)
    with pytest.raises(TokenError, match="empty"):
        fit_prompt([], max_new_tokens=4, context=64, warn=print)
    with pytest.raises(TokenError, match="max_new_tokens must be >= 0, got -1"):
        fit_prompt([1], max_new_tokens=-1, context=64, warn=print)


def test_zero_new_tokens_generate_nothing(model):
    streamed = []
    assert generate(model, [1, 2, 3], 0, on_token=streamed.append) == streamed == []


@pytest.mark.parametrize("seed", [0, 1, 2], ids=lambda s: f"seed{s}")
def test_kv_cache_greedy_equals_full_recompute(model, seed):
    prompt = list(np.random.default_rng(seed).integers(0, 50257, 1 + 5 * seed))
    cached = generate(model, prompt, 20, GREEDY, use_cache=True, stop_at_end_of_text=False)
    recomputed = generate(model, prompt, 20, GREEDY, use_cache=False, stop_at_end_of_text=False)
    assert cached == recomputed and len(cached) == 20


@pytest.mark.parametrize("batch_size", [1, 3])
def test_launched_decoder_logits_equal_recompute(model, batch_size):
    rng = np.random.default_rng(batch_size)
    prompt = rng.integers(0, 50257, (batch_size, 6))
    decoders = [make_decoder(model, kind, batch_size) for kind in ("recompute", "launched")]
    for logits in zip(*(d.prefill(prompt) for d in decoders)):
        np.testing.assert_allclose(*logits, rtol=0, atol=1e-12)
    for _ in range(4):
        tokens = rng.integers(0, 50257, batch_size)
        recomputed, launched = (d.step(tokens) for d in decoders)
        assert recomputed.shape == launched.shape == (batch_size, 50257)
        np.testing.assert_allclose(recomputed, launched, rtol=0, atol=1e-12)
    assert decoders[1].cache.length == 10


def test_decoder_kinds_are_checked(model):
    with pytest.raises(ValueError, match="no decoder 'fast'; the kinds are recompute, launched, graph"):
        make_decoder(model, "fast", 1)
    with pytest.raises(ValueError, match="CUDA graphs need the kernels backend, not 'reference'"):
        make_decoder(model, "graph", 1)


def test_decode_step_logits_equal_a_full_forward(model):
    prompt = [5, 10, 15, 20]
    cache = model.new_cache(1)
    model.forward(np.array([prompt], np.int32), cache)
    step = model.decode_step(np.array([99], np.int32), cache).copy()
    full = model.forward(np.array([prompt + [99]], np.int32))[0, -1]
    np.testing.assert_allclose(step[0], full, rtol=0, atol=1e-12)
    assert cache.length == 5 and int(cache.lengths[0]) == 5


def test_generation_stops_at_end_of_text(model):
    biased = GPT2(TINY, perturbed_parameters(TINY, seed=2), backend="reference")
    biased.weights.lnfb[:] = 0
    biased.weights.lnfw[:] = 0
    biased.weights.wte[50256] = 0  # every logit 0 ...
    biased.weights.lnfb[0], biased.weights.wte[50256, 0] = 1.0, 10.0  # ... but end-of-text's 10
    streamed = []
    new = generate(biased, [1, 2], 10, GREEDY, on_token=streamed.append)
    assert new == streamed == [50256]


@pytest.mark.parametrize("tokens, message", [
    (np.array([[1, 50257]]), r"token id 50257 at \(0, 1\) is outside the vocabulary"),
    (np.array([[-1]]), r"token id -1"),
    (np.zeros((1, 65), np.int32), r"65 tokens exceed the model's context of 64"),
    (np.array([1, 2, 3]), r"must be a non-empty \(B, T\) array"),
    (np.array([[0.5]]), r"must be a non-empty \(B, T\) array"),
])
def test_bad_tokens_give_one_line(model, tokens, message):
    with pytest.raises(TokenError, match=message):
        model(tokens)


@pytest.mark.parametrize("num_beams", [2, 4])
def test_beam_search_is_the_same_over_every_decoder(model, num_beams):
    """Reordering the cache's rows in place gives what recomputing the reordered sequences gives."""
    prompts = [list(range(7, 12)), list(range(300, 305))]
    search = BeamSearch(num_beams, length_penalty=1.0)
    recomputed, launched = (beam_search(model, prompts, 8, search, decoder=kind) for kind in ("recompute",
                                                                                                  "launched"))
    assert recomputed.sequences == launched.sequences
    np.testing.assert_allclose(recomputed.scores, launched.scores, rtol=0, atol=1e-5)
    assert all(len(s) == len(prompts[0]) + 8 for beams in launched.sequences for s in beams)
    assert all(beams[0][:5] == prompt for beams, prompt in zip(launched.sequences, prompts))


def test_beam_search_options_are_checked():
    with pytest.raises(ValueError, match="num_beams must be >= 1, got 0"):
        BeamSearch(0)
    with pytest.raises(ValueError, match="early_stopping must be True, False or 'never', got 'sometimes'"):
        BeamSearch(2, early_stopping="sometimes")


@pytest.mark.parametrize("use_cache", [True, False], ids=["launched", "recompute"])
@pytest.mark.parametrize("seed", [0, 1], ids=lambda s: f"seed{s}")
def test_batched_greedy_rows_equal_their_own_generation(model, use_cache, seed):
    """Prompts of different lengths (one token among them) decoded together as rows of one decoder."""
    rng = np.random.default_rng(seed)
    prompts = [list(rng.integers(0, 50257, n)) for n in (1, 6, 11)]
    streamed = []
    together = generate_batch(model, prompts, 9, GREEDY, use_cache=use_cache, stop_at_end_of_text=False,
                              on_token=lambda row, token: streamed.append((row, token)))
    alone = [generate(model, prompt, 9, GREEDY, use_cache=use_cache, stop_at_end_of_text=False) for prompt in prompts]
    assert together == alone and all(len(tokens) == 9 for tokens in together)
    assert sorted(streamed) == sorted((row, t) for row, tokens in enumerate(together) for t in tokens)


def test_a_batch_row_that_ends_takes_no_more_tokens():
    """Position 6's embedding leans towards end-of-text, so rows of different prompt lengths end at
    different steps; each row is still its own generation, and none goes on past its end."""
    params = perturbed_parameters(TINY, seed=3)
    eos = params["wte"][END_OF_TEXT].astype(np.float64)
    params["wpe"][6] += (2.0 * eos / np.linalg.norm(eos)).astype(np.float32)
    leaning = GPT2(TINY, params, backend="reference")
    rng = np.random.default_rng(0)
    prompts = [list(rng.integers(0, 50257, n)) for n in (2, 3, 5, 8, 1)]
    together = generate_batch(leaning, prompts, 8, GREEDY)
    assert together == [generate(leaning, prompt, 8, GREEDY) for prompt in prompts]
    assert len({len(tokens) for tokens in together}) > 2  # the rows ended at different steps
    for tokens in together:
        assert END_OF_TEXT not in tokens[:-1] and (len(tokens) == 8 or tokens[-1] == END_OF_TEXT)


@pytest.mark.parametrize("seed", [0, 1, 2], ids=lambda s: f"seed{s}")
def test_beam_searchs_top_indices_are_a_stable_sorts(seed):
    """The partition shortcut picks what a stable sort of the whole row picks, ties by id included."""
    from gpt2kit.generation.beam_search import _top_indices

    rng = np.random.default_rng(seed)
    for n in (1, 2, 5, 9, 64, 257):
        scores = rng.integers(-3, 3, (3, n)).astype(np.float32)  # few values: many ties
        for k in {1, max(1, n // 4), n}:
            assert np.array_equal(_top_indices(scores, k), np.argsort(-scores, axis=1, kind="stable")[:, :k])


@pytest.mark.parametrize("search", ["greedy", "sampling", "beam"])
def test_non_finite_logits_stop_generation_in_one_line(search):
    """A model whose logits come out NaN (a kernel that wrote NaN, here a NaN bias) is refused, not sampled from."""
    params = perturbed_parameters(TINY, seed=2)
    params["lnfb"][3] = np.nan
    broken = GPT2(TINY, params, backend="reference")
    with pytest.raises(NonFiniteLogitsError, match=r"^the model's logits hold NaN or infinity, so no token can be "
                                                   r"chosen: a kernel wrote non-finite values \(python -m "
                                                   r"gpt2kit.gpt2.step_check names the first\)$"):
        if search == "beam":
            beam_search(broken, [[1, 2, 3]], 4, BeamSearch(3))
        else:
            generate(broken, [1, 2, 3], 4, GREEDY if search == "greedy" else Sampling(temperature=1.0, seed=0))
