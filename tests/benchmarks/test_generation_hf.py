"""gpt2kit.benchmarks.generation's transformers comparison on the CPU, with a tiny random GPT-2 and GPT-J:
the static-cache, torch.compile'd generate picks the same greedy tokens as the eager one,
so the two rows of `--hf` time the same text (about half a minute each: torch.compile)."""

import numpy as np
import pytest

pytest.importorskip("transformers")
pytest.importorskip("torch")

from gpt2kit.benchmarks.generation import hf_generation  # noqa: E402
from gpt2kit.gpt2.checkpoint import perturbed_parameters  # noqa: E402
from gpt2kit.gpt2.config import GPT2Config  # noqa: E402
from gpt2kit.gpt2.family import FAMILY as GPT2_FAMILY  # noqa: E402
from gpt2kit.gptj import checkpoint as gptj_checkpoint  # noqa: E402
from gpt2kit.gptj.config import GPTJConfig  # noqa: E402
from gpt2kit.gptj.family import FAMILY as GPTJ_FAMILY  # noqa: E402


def tiny_gpt2(seed):
    config = GPT2Config(vocab_size=300, padded_vocab_size=384, num_layers=2, num_heads=2, channels=64, max_T=32)
    params = perturbed_parameters(config, seed=seed)
    params["wpe"] *= 50  # GPT-2's init is so flat that every step picks the same token
    return GPT2_FAMILY, config, params


def tiny_gptj(seed):
    config = GPTJConfig(max_T=32, vocab_size=300, num_layers=2, num_heads=2, channels=128, rotary_dim=16,
                        end_of_text=299)
    params = gptj_checkpoint.random_parameters(config, seed)
    params["wte"] *= 50  # no positions to add: the tokens alone must make the steps differ
    return GPTJ_FAMILY, config, params


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.compile's own internals
@pytest.mark.parametrize("tiny", [tiny_gpt2, tiny_gptj], ids=["gpt2", "gptj"])
@pytest.mark.parametrize("seed", [3])
def test_static_compiled_generate_picks_the_eager_tokens(tiny, seed):
    family, config, params = tiny(seed)
    prompt = np.random.default_rng(seed).integers(0, config.vocab_size, 5).tolist()
    eager_rate, eager = hf_generation(family, config, params, prompt, compiled=False, device="cpu", new_tokens=12)
    compiled_rate, compiled = hf_generation(family, config, params, prompt, compiled=True, device="cpu", new_tokens=12)
    assert compiled == eager
    assert len(eager) == 12 and len(set(eager)) > 1, f"a degenerate continuation proves little: {eager}"
    assert eager_rate > 0 and compiled_rate > 0
