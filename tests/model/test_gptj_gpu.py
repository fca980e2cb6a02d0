"""GPT-J on the GPU, with the small head-size-256 model of test_gptj.py: the kit's kernels and gold
against the float64 reference (itself equal to transformers to rounding, test_gptj.py), and every
decoder and executor of gpt2kit/generation/ on it.

Logits: within LOGITS_TOLERANCE of the reference's scale, the bound a float32 GPT-2 keeps
(gpt2.logits_check); GPT-J's parts are the same host functions, plus the rotary
embedding, whose error is a few float32 roundings of each turned value. Greedy tokens and
beam sequences: equal to the reference's; beam scores to 1e-4 relative (the logits differ
by ~1e-5 of their scale, as at 124M in test_executors_gpu.py).
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs PyTorch and transformers: the README's Setup says how to add them")
transformers = pytest.importorskip("transformers", reason="needs transformers: pip install -e '.[hf]'")

from gpt2kit.generation.beam_search import BeamSearch, beam_search  # noqa: E402
from gpt2kit.generation.decoding import KINDS, make_decoder  # noqa: E402
from gpt2kit.generation.executors import make_executor  # noqa: E402
from gpt2kit.generation.generate import GREEDY, generate, generate_batch  # noqa: E402
from gpt2kit.gpt2.logits_check import LOGITS_TOLERANCE  # noqa: E402
from gpt2kit.gptj.checkpoint import read_hf  # noqa: E402
from gpt2kit.gptj.model import GPTJ  # noqa: E402
from gpt2kit.model_runtime.backends import make_backend  # noqa: E402
from gpt2kit.model_runtime.executors import EXECUTORS  # noqa: E402
from gpt2kit.model_runtime.ops import MODEL_FUNCTIONS  # noqa: E402
from gpt2kit.reference.variants import FUSED_DECODE_VARIANTS  # noqa: E402
from tests.model.helpers import variants_called  # noqa: E402
from tests.model.hf_gptj import VOCAB, hf_gptj  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.calls(*MODEL_FUNCTIONS, "rotary_forward")]
BACKENDS = {"kernels": (), "gold": (), "kernels, flash attention": ("attention_flash",),
            "kernels, fused decode": FUSED_DECODE_VARIANTS}


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    """The small GPT-J's config and weights, as transformers saved them, end-of-text leaning."""
    directory = tmp_path_factory.mktemp("gptj")
    hf_gptj(seed=11, eos_lean=1.0).save_pretrained(directory)
    return read_hf(directory)


@pytest.fixture(scope="module")
def reference(weights):
    return GPTJ(*weights, backend="reference")


def on(weights, backend: str) -> GPTJ:
    name = "gold" if backend == "gold" else "kernels"
    return GPTJ(*weights, backend=make_backend(name, variants=BACKENDS[backend]))


@pytest.mark.parametrize("backend", [pytest.param(name, marks=variants_called(*variants))
                                     for name, variants in BACKENDS.items()])
def test_logits_match_the_reference(weights, reference, backend):
    tokens = np.random.default_rng(1).integers(0, VOCAB, (2, 70)).astype(np.int32)
    want = reference(tokens)
    model = on(weights, backend)
    got = model.backend.to_host(model(tokens))
    worst = float(np.abs(got - want).max())
    assert worst <= LOGITS_TOLERANCE * np.abs(want).max(), f"max |logit error| {worst:.3g}"


@pytest.mark.parametrize("backend, decoder", [  # a CUDA graph captures the kit's kernels, not gold's CuPy
    pytest.param(backend, decoder, marks=variants_called(*variants)) for backend, variants in BACKENDS.items()
    for decoder in KINDS if decoder != "recompute" and not (decoder.startswith("graph") and backend == "gold")])
def test_greedy_past_position_1024_equals_the_reference(weights, reference, backend, decoder):
    """A prompt of 1,030 tokens and 12 greedy tokens after it, through each cached decoder."""
    prompt = list(np.random.default_rng(2).integers(0, VOCAB, 1030))
    want = generate(reference, prompt, 12, GREEDY, use_graph=False, stop_at_end_of_text=False)
    model = on(weights, backend)
    got = generate_batch(model, [prompt], 12, GREEDY, decoder=make_decoder(model, decoder, 1),
                         stop_at_end_of_text=False)
    assert got == [want]


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("search", [BeamSearch(5, 1.0, False), BeamSearch(4, 2.0, "never")],
                         ids=lambda s: f"beams{s.num_beams}")
def test_beam_search_of_every_executor_equals_the_reference(weights, reference, executor, search):
    prompt = [list(np.random.default_rng(search.num_beams).integers(0, VOCAB, 5))]
    want = beam_search(reference, prompt, 16, search)
    got = make_executor(on(weights, "kernels"), executor).beam_search(prompt, 16, search)
    assert got.sequences == want.sequences
    np.testing.assert_allclose(got.scores, want.scores, rtol=1e-4)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_greedy_of_every_executor_equals_the_reference(weights, reference, executor):
    rng = np.random.default_rng(3)
    prompts = [list(rng.integers(0, VOCAB, n)) for n in (1, 9, 40)]
    want = [generate(reference, p, 20, GREEDY, use_graph=False) for p in prompts]
    assert make_executor(on(weights, "kernels"), executor).generate(prompts, 20, GREEDY) == want


SIX_B_BYTES = 2 * 4 * 6.1e9  # transformers' model and the kit's, float32


@pytest.mark.slow
def test_gpt_j_6b_against_transformers_on_cuda():
    """The full 6B configuration, initialised by transformers on the GPU (seeded), its weights handed to the
    kit's model on the device: the logits of a 32-token prompt within 2 * LOGITS_TOLERANCE of transformers'
    scale (each float32 model within LOGITS_TOLERANCE of the exact logits), then 64 greedy tokens identical."""
    import cupy

    free, _ = cupy.cuda.Device().mem_info
    if free < SIX_B_BYTES * 1.15:
        pytest.skip(f"GPT-J 6B twice (transformers' and the kit's) needs ~{SIX_B_BYTES * 1.15 / 2**30:.0f} GiB of GPU "
                    f"memory; {free / 2**30:.0f} GiB are free")
    config = transformers.GPTJConfig()  # EleutherAI/gpt-j-6b's sizes
    torch.manual_seed(0)
    with torch.device("cuda"):
        theirs = transformers.GPTJForCausalLM(config).eval()
    ours = GPTJ(*weights_on_the_device(theirs), backend="kernels")
    prompt = [int(t) for t in np.random.default_rng(0).integers(0, 50257, 32)]
    with torch.no_grad():
        want = theirs(torch.tensor([prompt], device="cuda")).logits.float().cpu().numpy()
        their_tokens = theirs.generate(torch.tensor([prompt], device="cuda"), max_new_tokens=64, do_sample=False,
                                       pad_token_id=50256)[0, 32:].tolist()
    got = ours.backend.to_host(ours(np.array([prompt], np.int32)))
    worst, scale = float(np.abs(got - want).max()), float(np.abs(want).max())
    print(f"\nGPT-J 6B: max |logit - transformers'| {worst:.3g} of max |logit| {scale:.3g} ({worst / scale:.2e})")
    assert worst <= 2 * LOGITS_TOLERANCE * scale
    our_tokens = generate(ours, prompt, 64, GREEDY)
    print(f"GPT-J 6B: {len(our_tokens)} greedy tokens, equal to transformers': {our_tokens == their_tokens}")
    assert our_tokens == their_tokens[:len(our_tokens)]


def weights_on_the_device(model):
    """A transformers GPT-J's config and weights as the kit's parameters, on the GPU: its CUDA tensors copied
    device to device into the kit's layout (q, k and v stacked), never through the host."""
    import cupy

    from gpt2kit.gptj.checkpoint import config_from_hf, hf_layout

    state = {name.removeprefix("transformer."): tensor for name, tensor in model.state_dict().items()}
    config = config_from_hf(model.config.to_dict(), "transformers' GPTJConfig")
    params = {}
    for name, (shape, parts) in hf_layout(config).items():
        params[name] = cupy.empty(shape, np.float32)
        for index, hf_name in parts:
            params[name][index] = cupy.from_dlpack(state[hf_name].detach().contiguous())
    return config, params
