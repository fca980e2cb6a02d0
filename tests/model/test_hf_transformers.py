"""The NumPy reference GPT-2, and its beam search, against Hugging Face transformers.

Same random weights on both sides, both in float64 on the CPU, so they must agree
to rounding (1e-9 of the logits' scale). This is what proves the checkpoint layout,
the Conv1D transposes, the GELU form, the layernorm eps, the attention scaling and
the tied LM head.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs PyTorch and transformers: the README's Setup says how to add them")
transformers = pytest.importorskip("transformers", reason="needs transformers: pip install -e '.[hf]'")

from gpt2kit.generation.beam_search import BeamSearch, beam_search  # noqa: E402
from gpt2kit.gpt2.checkpoint import read_hf, write_hf  # noqa: E402
from gpt2kit.gpt2.checkpoint import perturbed_parameters
from gpt2kit.gpt2.model import GPT2  # noqa: E402
from tests.model.helpers import TINY, eos_leaning_parameters  # noqa: E402

SEEDS = [0, 1]


def hf_model(seed: int, n_layer=2, n_head=4, n_embd=64, vocab_size=50257, n_positions=64):
    """A randomly initialised GPT2LMHeadModel with noisy biases and layernorm weights."""
    torch.manual_seed(seed)
    config = transformers.GPT2Config(n_layer=n_layer, n_head=n_head, n_embd=n_embd, vocab_size=vocab_size,
                                     n_positions=n_positions)
    model = transformers.GPT2LMHeadModel(config)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("bias") or ".ln_" in name:
                parameter.add_(0.1 * torch.randn_like(parameter))
    return model.eval()


def hf_logits(model, tokens: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model.double()(torch.tensor(tokens, dtype=torch.long)).logits.numpy()


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"seed{s}")
def test_reference_matches_transformers_on_its_own_save(tmp_path, seed):
    model = hf_model(seed)
    model.save_pretrained(tmp_path)  # transformers writes the directory
    config, params = read_hf(tmp_path)
    tokens = np.random.default_rng(seed).integers(0, 50257, (3, 37)).astype(np.int32)
    ours = GPT2(config, params, backend="reference")(tokens)
    theirs = hf_logits(model, tokens)
    assert ours.shape == theirs.shape == (3, 37, 50257)
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-9 * np.abs(theirs).max())


def test_transformers_reads_what_write_hf_writes(tmp_path):
    params = perturbed_parameters(TINY, seed=9)
    write_hf(tmp_path, TINY, params, max_shard_bytes=3_000_000)
    model = transformers.GPT2LMHeadModel.from_pretrained(tmp_path).eval()
    tokens = np.random.default_rng(9).integers(0, 50257, (2, 20)).astype(np.int32)
    theirs = hf_logits(model, tokens)
    ours = GPT2(TINY, params, backend="reference")(tokens)
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-9 * np.abs(theirs).max())


@pytest.mark.parametrize("lean", [0.0, 1.1, 1.5], ids=lambda v: f"lean{v}")
@pytest.mark.parametrize("num_beams, length_penalty, early_stopping", [
    (3, 1.0, False), (5, 1.0, False), (4, 0.0, True), (3, 1.0, True), (5, 0.5, True), (4, 2.0, "never"),
    (2, -1.0, False)])
def test_beam_search_equals_transformers(tmp_path, lean, num_beams, length_penalty, early_stopping):
    """Sequences and scores of every returned hypothesis, on the reference backend (float64
    logits; the search itself in float32, as transformers runs it)."""
    params = eos_leaning_parameters(seed=3, lean=lean)
    write_hf(tmp_path, TINY, params)
    theirs_model = transformers.GPT2LMHeadModel.from_pretrained(tmp_path).double().eval()
    prompt = [list(np.random.default_rng(num_beams).integers(0, 50257, 5))]
    search = BeamSearch(num_beams, length_penalty, early_stopping)
    ours = beam_search(GPT2(TINY, params, backend="reference"), prompt, 12, search)
    with torch.no_grad():
        theirs = theirs_model.generate(torch.tensor(prompt), num_beams=num_beams, num_return_sequences=num_beams,
                                       max_new_tokens=12, length_penalty=length_penalty, early_stopping=early_stopping,
                                       do_sample=False, return_dict_in_generate=True, output_scores=True,
                                       pad_token_id=50256)
    width = theirs.sequences.shape[1]  # transformers pads the shorter ones with end-of-text
    assert [s + [50256] * (width - len(s)) for s in ours.sequences[0]] == theirs.sequences.tolist()
    np.testing.assert_allclose(ours.scores[0], theirs.sequences_scores.numpy(), rtol=1e-5, atol=1e-6)
