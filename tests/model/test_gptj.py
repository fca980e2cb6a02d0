"""The NumPy reference GPT-J, its KV cache, greedy decoding and beam search, against transformers' GPTJForCausalLM.

Same random weights on both sides (transformers initialises them and saves the
directory; the kit reads it), both in float64 on the CPU. transformers computes its
table of rotary angles in float32 even in a float64 model (an angle near position
1,000 is off by ~1e-5); these tests give it the kit's float64 table, so that what is
compared is the model and not that rounding. Some transformers versions also compute
GPT-J's attention scores in float32 (query and key cast down): 1e-6 of the logits'
scale covers that rounding (~3e-8 seen), and a wrong layout, rotary pairing, bias or
block order errs by 1e-2 or more. The configuration has GPT-J's head size, 256, with 64 values
turned, and a context past 1,024 positions.
"""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs PyTorch and transformers: the README's Setup says how to add them")
transformers = pytest.importorskip("transformers", reason="needs transformers: pip install -e '.[hf]'")

from gpt2kit.generation.beam_search import BeamSearch, beam_search  # noqa: E402
from gpt2kit.generation.decoding import make_decoder  # noqa: E402
from gpt2kit.generation.generate import GREEDY, generate  # noqa: E402
from gpt2kit.gptj.checkpoint import load, read_hf  # noqa: E402
from gpt2kit.model_runtime.backends import make_backend  # noqa: E402
from gpt2kit.model_runtime.checkpoint_files import CheckpointError  # noqa: E402
from gpt2kit.model_runtime.families import check_fits_in_memory, family_of, load_model  # noqa: E402
from gpt2kit.model_runtime.tokenizer import get_tokenizer  # noqa: E402
from tests.model.hf_gptj import CONTEXT, EOS, VOCAB, exact, hf_gptj, ours_and_theirs  # noqa: E402

ROOT = Path(__file__).parents[2]
TOLERANCE = 1e-6  # of the logits' scale (see the module docstring)


def hf_logits(model, tokens) -> np.ndarray:
    with torch.no_grad():
        return model(torch.tensor(np.asarray(tokens), dtype=torch.long)).logits.numpy()


@pytest.mark.parametrize("seed", [0, 1], ids=lambda s: f"seed{s}")
def test_logits_match_transformers(tmp_path, seed):
    ours, theirs = ours_and_theirs(tmp_path, seed)
    tokens = np.random.default_rng(seed).integers(0, VOCAB, (3, 37)).astype(np.int32)
    want = hf_logits(theirs, tokens)
    got = ours(tokens)
    assert got.shape == want.shape == (3, 37, VOCAB)
    np.testing.assert_allclose(got, want, rtol=0, atol=TOLERANCE * np.abs(want).max())


def test_kv_cache_steps_past_position_1024_equal_recomputation_and_transformers(tmp_path):
    """A prompt of 1,029 tokens, then steps at positions 1,029 to 1,032: each step's logits from the cache
    equal those of the whole sequence run again, by the kit and by transformers."""
    ours, theirs = ours_and_theirs(tmp_path, seed=2, n_layer=1)
    rng = np.random.default_rng(2)
    sequence = list(rng.integers(0, VOCAB, 1029))
    decoder = make_decoder(ours, "launched", batch_size=1)
    logits = decoder.prefill([sequence])[0]
    for _ in range(4):
        recomputed = ours(np.array([sequence], np.int32))[0, -1]
        want = hf_logits(theirs, [sequence])[0, -1]
        scale = np.abs(want).max()
        np.testing.assert_allclose(logits, recomputed, rtol=0, atol=1e-9 * scale)  # the kit against itself
        np.testing.assert_allclose(logits, want, rtol=0, atol=TOLERANCE * scale)
        sequence.append(int(rng.integers(0, VOCAB)))
        logits = decoder.step([sequence[-1]])[0]


@pytest.mark.parametrize("seed", [3, 4], ids=lambda s: f"seed{s}")
def test_greedy_tokens_equal_transformers_generate(tmp_path, seed):
    ours, theirs = ours_and_theirs(tmp_path, seed, eos_lean=1.0)
    prompt = [int(t) for t in np.random.default_rng(seed).integers(0, VOCAB, 9)]
    with torch.no_grad():
        want = theirs.generate(torch.tensor([prompt]), max_new_tokens=24, do_sample=False,
                               pad_token_id=EOS)[0, len(prompt):].tolist()
    got = generate(ours, prompt, 24, GREEDY)
    assert got == want[:len(got)] and (len(got) == len(want) or want[len(got):] == [EOS] * (len(want) - len(got)))


@pytest.mark.parametrize("num_beams, length_penalty, early_stopping, lean", [
    (3, 1.0, False, 0.0), (5, 1.0, False, 1.5), (4, 0.0, True, 1.1), (4, 2.0, "never", 1.5)])
def test_beam_search_equals_transformers(tmp_path, num_beams, length_penalty, early_stopping, lean):
    """Sequences and scores of every returned hypothesis (scores to 1e-5: the search runs in float32 on both
    sides, as transformers runs it)."""
    ours, theirs = ours_and_theirs(tmp_path, seed=5, eos_lean=lean, n_layer=1)
    prompt = [list(np.random.default_rng(num_beams).integers(0, VOCAB, 5))]
    search = BeamSearch(num_beams, length_penalty, early_stopping)
    found = beam_search(ours, prompt, 10, search)
    with torch.no_grad():
        want = theirs.generate(torch.tensor(prompt), num_beams=num_beams, num_return_sequences=num_beams,
                               max_new_tokens=10, length_penalty=length_penalty, early_stopping=early_stopping,
                               do_sample=False, return_dict_in_generate=True, output_scores=True, pad_token_id=EOS)
    width = want.sequences.shape[1]  # transformers pads the shorter ones with end-of-text
    assert [s + [EOS] * (width - len(s)) for s in found.sequences[0]] == want.sequences.tolist()
    np.testing.assert_allclose(found.scores[0], want.sequences_scores.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("layout", ["safetensors shards", "pytorch_model.bin"])
def test_every_layout_transformers_writes_reads_the_same(tmp_path, layout):
    model = hf_gptj(seed=6, n_layer=1)
    if layout == "pytorch_model.bin":  # as EleutherAI/gpt-j-6b ships it (transformers 5 writes safetensors only)
        model.config.save_pretrained(tmp_path)
        torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")
    else:
        model.save_pretrained(tmp_path, max_shard_size="2MB")
    assert any(tmp_path.glob("*.bin" if layout == "pytorch_model.bin" else "*.safetensors.index.json"))
    config, params = read_hf(tmp_path)
    assert config.rotary_dim == 64 and config.end_of_text == EOS and config.max_T == CONTEXT
    state = model.state_dict()
    np.testing.assert_array_equal(params["qkvw"][0, 512:1024], state["transformer.h.0.attn.k_proj.weight"].numpy())
    np.testing.assert_array_equal(params["lm_headb"], state["lm_head.bias"].numpy())


def test_a_gpt2_directory_is_not_gptj(tmp_path):
    transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2)).save_pretrained(tmp_path)
    with pytest.raises(CheckpointError, match=r"config.json: model_type is 'gpt2', not 'gptj'$"):
        read_hf(tmp_path)


def test_the_kits_command_completes_text_with_a_gptj_directory(tmp_path):
    """`python -m gpt2kit --model DIR` on a GPT-J directory (GPT-J's vocabulary of 50,400, GPT-2's BPE): the
    greedy completion is the text of transformers' greedy tokens."""
    hf_gptj(seed=7, n_layer=1, n_embd=64, rotary_dim=16, vocab_size=50400, eos=50256).save_pretrained(tmp_path)
    theirs = exact(transformers.GPTJForCausalLM.from_pretrained(tmp_path).eval())
    tokenizer = get_tokenizer()
    prompt = "Hello, my name is"
    with torch.no_grad():
        tokens = theirs.generate(torch.tensor([tokenizer.encode(prompt)]), max_new_tokens=8, do_sample=False,
                                 pad_token_id=50256)[0].tolist()
    done = subprocess.run([sys.executable, "-m", "gpt2kit", prompt, "--model", str(tmp_path), "--backend", "reference",
                           "--temperature", "0", "--max-new-tokens", "8"], capture_output=True, text=True, cwd=ROOT,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == tokenizer.decode(tokens) + "\n"


def test_a_gptj_directory_and_a_gpt2_directory_are_told_apart(tmp_path):
    hf_gptj(seed=8, n_layer=1, n_embd=64, rotary_dim=16).save_pretrained(tmp_path / "j")
    transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2)).save_pretrained(tmp_path / "2")
    assert (family_of(str(tmp_path / "j")).key, family_of(str(tmp_path / "2")).key) == ("gptj", "gpt2")


def test_an_unknown_gptj_size_is_one_line():
    with pytest.raises(CheckpointError, match=r"^unknown GPT-J size 'gpt-j-1b' \(known: gpt-j-6b\)$"):
        load("random:gpt-j-1b")


def test_a_random_gptj_too_big_for_this_machine_is_refused_before_it_loads(monkeypatch):
    pages = {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": 24 * 2**30 // 4096}  # a machine of 24 GiB
    monkeypatch.setattr("os.sysconf", lambda name: pages[name])
    with pytest.raises(CheckpointError, match=r"^random:gpt-j-6b: GPT-J's 6.1B parameters take 68 GiB on the "
                                              r"reference backend .* more than this machine's 24 GiB: run it on a GPU$"):
        load_model("random:gpt-j-6b", make_backend("reference"))
    check_fits_in_memory("random:gpt2-xl", family_of("random:gpt2-xl"))  # 1.6B parameters, 17 GiB: it fits
