"""The executors on the GPU: the same tokens as the eager path, beam search on the device
equal to the host's (and to transformers' at 124M), and the device's sampling against
the probabilities it samples from.

Beam scores: the host computes log_softmax with NumPy's float32 sum, the device with a
float64 sum rounded once, so a log-probability may differ in its last bit (6e-8
relative) per step; over 16 steps the scores stay within 1e-6 relative. Against
transformers at 124M the logits themselves differ (cuBLAS against the kit's matmul,
~1e-5 of their scale), so scores are compared to 1e-4 relative there.
"""

import numpy as np
import pytest

from gpt2kit.generation.beam_search import BeamSearch, beam_search
from gpt2kit.gpt2.checkpoint import perturbed_parameters
from gpt2kit.gpt2.config import preset
from gpt2kit.generation.executors import StageClock, make_executor
from gpt2kit.generation.generate import GREEDY, Sampling, generate, sampling_probabilities
from gpt2kit.gpt2.model import GPT2
from gpt2kit.model_runtime.executors import EXECUTORS
from gpt2kit.model_runtime.ops import MODEL_FUNCTIONS
from gpt2kit.model_runtime.tokenizer import END_OF_TEXT
from tests.model.helpers import TINY, eos_leaning_parameters

pytestmark = pytest.mark.gpu
ON_THE_KERNELS = pytest.mark.calls(*MODEL_FUNCTIONS)  # a model on the kernels backend

SEARCHES = [BeamSearch(5, 1.0, False), BeamSearch(3, 0.5, True), BeamSearch(4, 2.0, "never"), BeamSearch(2, -1.0)]


@pytest.fixture(scope="module")
def weights():
    config = preset("gpt2")
    return config, perturbed_parameters(config, seed=7)


@pytest.fixture(scope="module")
def big(weights):
    return GPT2(*weights, backend="kernels")


def leaning_model(lean: float) -> GPT2:
    """TINY, with end-of-text's logit raised by `lean` (on the kernels backend)."""
    return GPT2(TINY, eos_leaning_parameters(seed=3, lean=lean), backend="kernels")


@ON_THE_KERNELS
@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("seed", [0, 1], ids=lambda s: f"seed{s}")
def test_batched_greedy_rows_equal_their_own_generation(big, executor, seed):
    """Prompts of different lengths (one of a single token) as the rows of one batch, on the
    kernels backend: each row's tokens are its own eager B=1 generation's."""
    rng = np.random.default_rng(seed)
    prompts = [list(rng.integers(0, 50257, n)) for n in (1, 6, 11)]
    run = make_executor(big, executor)
    streamed = []
    together = run.generate(prompts, 20, GREEDY, stop_at_end_of_text=False,
                            on_token=lambda row, token: streamed.append((row, token)))
    alone = [generate(big, prompt, 20, GREEDY, use_graph=False, stop_at_end_of_text=False) for prompt in prompts]
    assert together == alone
    assert sorted(streamed) == sorted((row, t) for row, tokens in enumerate(together) for t in tokens)
    again = run.generate(prompts[::-1], 20, GREEDY, stop_at_end_of_text=False)  # the kept graphs, other rows
    assert again == alone[::-1]


@ON_THE_KERNELS
@pytest.mark.parametrize("executor", EXECUTORS)
def test_rows_that_end_stop_where_the_eager_path_stops(executor):
    model = leaning_model(1.3)
    rng = np.random.default_rng(0)
    prompts = [list(rng.integers(0, 50257, n)) for n in (2, 3, 5, 8, 1)]
    together = make_executor(model, executor).generate(prompts, 40, GREEDY)
    assert together == [generate(model, prompt, 40, GREEDY, use_graph=False) for prompt in prompts]
    assert any(tokens[-1] == END_OF_TEXT and len(tokens) < 40 for tokens in together)


@ON_THE_KERNELS
@pytest.mark.parametrize("executor", ["ptgraph", "grape"])
@pytest.mark.parametrize("lean", [0.0, 1.5], ids=lambda v: f"lean{v}")
@pytest.mark.parametrize("search", SEARCHES, ids=str)
def test_beam_search_equals_the_eager_host_search(executor, lean, search):
    model = leaning_model(lean)
    rng = np.random.default_rng(search.num_beams)
    prompts = [list(rng.integers(0, 50257, 5)) for _ in range(2)]
    eager = beam_search(model, prompts, 16, search, decoder="launched")
    run = make_executor(model, executor)
    for _ in range(2):  # the second time replays what the first captured
        found = run.beam_search(prompts, 16, search)
        assert found.sequences == eager.sequences
        np.testing.assert_allclose(found.scores, eager.scores, rtol=1e-6, atol=0)


@ON_THE_KERNELS
def test_grape_beam_search_at_124M_equals_transformers(weights, big, tmp_path):
    torch = pytest.importorskip("torch", reason="needs PyTorch: the README's Setup says how to add it")
    transformers = pytest.importorskip("transformers", reason="needs transformers: pip install -e '.[hf]'")
    from gpt2kit.gpt2.checkpoint import write_hf

    write_hf(tmp_path, *weights)
    theirs_model = transformers.GPT2LMHeadModel.from_pretrained(tmp_path).cuda().eval()
    prompt = [list(np.random.default_rng(11).integers(0, 50257, 5))]
    ours = make_executor(big, "grape").beam_search(prompt, 16, BeamSearch(5))
    with torch.no_grad():
        theirs = theirs_model.generate(torch.tensor(prompt, device="cuda"), num_beams=5, num_return_sequences=5,
                                       max_new_tokens=16, do_sample=False, return_dict_in_generate=True,
                                       output_scores=True, pad_token_id=END_OF_TEXT)
    assert ours.sequences[0] == theirs.sequences.tolist()
    np.testing.assert_allclose(ours.scores[0], theirs.sequences_scores.cpu().numpy(), rtol=1e-4)


@ON_THE_KERNELS
def test_grape_sampling_repeats_with_its_seed_and_keeps_top_k(big):
    run = make_executor(big, "grape")
    prompts = [[464, 2068, 7586], [15496]]
    sampling = Sampling(temperature=0.9, top_k=40, seed=5)
    first = run.generate(prompts, 24, sampling, stop_at_end_of_text=False)
    assert first == run.generate(prompts, 24, sampling, stop_at_end_of_text=False)
    assert first != run.generate(prompts, 24, Sampling(temperature=0.9, top_k=40, seed=6), stop_at_end_of_text=False)
    # each token is among the 40 likeliest after the tokens before it
    for prompt, tokens in zip(prompts, first):
        sequence = np.array([prompt + tokens], np.int32)
        logits = big.backend.to_host(big(sequence))[0, len(prompt) - 1:-1]
        for row, token in zip(logits, tokens):
            assert row[token] >= np.sort(row)[-40]


@ON_THE_KERNELS
def test_stage_clock_splits_a_beam_search_into_its_stages(big):
    prompt = [list(np.random.default_rng(2).integers(0, 50257, 5))]
    for executor in EXECUTORS:
        clock = StageClock()
        make_executor(big, executor).beam_search(prompt, 8, BeamSearch(3), clock=clock)
        times = clock.milliseconds()
        assert set(times) == {"InputPrep", "Model", "BeamSearch"} and all(t > 0 for t in times.values()), times


# ------------------------------------------------------------------ the sampling kernel alone

def draw(logits: np.ndarray, rows: int, sampling: Sampling, seed: int) -> np.ndarray:
    """`rows` tokens drawn by the device from the same logits (each row its own random stream)."""
    import cupy

    from gpt2kit.reference.registry import host_function

    V = logits.size
    tokens = cupy.full(rows, -1, np.int32)
    sequences = cupy.full((rows, 1), -1, np.int32)
    device_logits = cupy.asarray(np.tile(logits.astype(np.float32), (rows, 1)))
    before = device_logits.copy()
    host_function("sample_forward")(tokens, sequences, device_logits, cupy.zeros(rows, np.int32), rows, V, V, 1,
                                    sampling.temperature, sampling.top_k, sampling.top_p,
                                    cupy.full(1, seed, np.uint64))
    assert bool((device_logits == before).all()), "the sampling kernel changed its logits"
    assert bool((sequences[:, 0] == tokens).all())
    drawn = tokens.get()
    assert ((drawn >= 0) & (drawn < V)).all(), f"token ids outside the vocabulary: {set(drawn[(drawn < 0) | (drawn >= V)])}"
    return drawn


@pytest.mark.parametrize("sampling", [
    Sampling(temperature=1.0), Sampling(temperature=0.7, top_k=4), Sampling(top_p=0.8),
    Sampling(temperature=1.3, top_k=6, top_p=0.9), Sampling(temperature=1.0, top_k=1)], ids=str)
@pytest.mark.parametrize("seed", [0, 1], ids=lambda s: f"seed{s}")
def test_device_sampling_follows_the_cut_distribution(sampling, seed):
    """200,000 draws over 11 tokens: none outside the kept set, and frequencies within a
    chi-square bound (p = 1e-6 for 10 degrees of freedom: 50.7) of the probabilities."""
    logits = np.random.default_rng(seed).normal(0, 1.5, 11)
    expected = sampling_probabilities(logits, sampling)  # the host's distribution
    drawn = draw(logits, 200_000, sampling, seed=100 + seed)
    counts = np.bincount(drawn, minlength=logits.size)
    assert counts[expected == 0].sum() == 0, f"drawn outside the kept set: {counts} for {expected}"
    kept = expected > 0
    chi_square = (((counts[kept] - 200_000 * expected[kept]) ** 2) / (200_000 * expected[kept])).sum()
    assert chi_square < 50.7, f"frequencies {counts / 200_000} against {expected}"
    assert np.array_equal(drawn, draw(logits, 200_000, sampling, seed=100 + seed)), "same seed, other draws"


def test_device_greedy_takes_the_first_largest_even_at_extreme_logits():
    logits = np.array([3e4, -1e4, 3e4, 2.9e4] + [0.0] * 60, np.float32)
    assert set(draw(logits, 64, Sampling(temperature=0.0), seed=0)) == {0}
    hot = draw(logits, 4096, Sampling(temperature=1.0), seed=3)  # exp of 1e4-scale gaps: only the ties
    assert set(hot) <= {0, 2} and len(set(hot)) == 2
