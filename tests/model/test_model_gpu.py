"""The model on the GPU: whole-model logits (within gpt2.logits_check's allowance for
their precision profile), the step-by-step check, the KV cache."""

import shutil
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from gpt2kit.gpt2 import step_check
from gpt2kit.gpt2.checkpoint import perturbed_parameters
from gpt2kit.gpt2.config import preset
from gpt2kit.model_runtime.backends import kernel_ops, make_backend, uses_flash
from gpt2kit.generation.generate import GREEDY, generate
from gpt2kit.generation.beam_search import BeamSearch, beam_search
from gpt2kit.generation.decoding import make_decoder
from gpt2kit.gpt2.model import GPT2
from gpt2kit.model_runtime.ops import MODEL_FUNCTIONS
from gpt2kit.gpt2.logits_check import LOGITS_TOLERANCE, allowed_logit_error, tf32_reference_backend
from gpt2kit.reference.precision import COURSE, FP32, TF32
from gpt2kit.reference.variants import FUSED_DECODE_VARIANTS
from tests.model.helpers import variants_called

pytestmark = [pytest.mark.gpu, pytest.mark.calls(*MODEL_FUNCTIONS)]  # the kit's kernels, or beside them


@pytest.fixture(scope="module")
def weights():
    config = preset("gpt2")
    return config, perturbed_parameters(config, seed=7)


@pytest.fixture(scope="module")
def tokens():
    return np.random.default_rng(7).integers(0, 50257, (4, 64)).astype(np.int32)


@pytest.fixture(scope="module")
def reference_logits(weights, tokens):
    return GPT2(*weights, backend="reference")(tokens)


BACKEND_VARIANTS = {"kernels+flash": ("attention_flash",), "kernels+fused": FUSED_DECODE_VARIANTS}


def backend_named(name: str):
    """"kernels", "gold", "kernels+flash" (the kit's kernels with flash attention, the attention_flash variant)
    or "kernels+fused" (decode steps on the fused matmuls of fused_gemv.py)."""
    variants = BACKEND_VARIANTS.get(name)
    return make_backend("kernels", variants=variants) if variants else make_backend(name)


def backends(*names: str) -> list:
    """The backends `names` as parameters, each marked with the variants it runs."""
    return [pytest.param(name, marks=variants_called(*BACKEND_VARIANTS.get(name, ()))) for name in names]


@pytest.mark.parametrize("backend", backends("kernels", "gold", "kernels+flash"))
def test_124M_logits_match_the_reference(weights, tokens, reference_logits, backend):
    model = GPT2(*weights, backend=backend_named(backend))
    logits = model.backend.to_host(model(tokens))
    error, allowed = np.abs(logits - reference_logits).max(), allowed_logit_error(weights, tokens, reference_logits, FP32)
    assert error <= allowed, f"max logit error {error:.3g} (allowed {allowed:.3g})"
    assert hasattr(model.activations(), "att") != model.flash_attention  # flash keeps no T x T probabilities


def test_step_check_passes_with_the_kits_kernels(weights, tokens):
    model = GPT2(*weights, backend="gold")
    checker = step_check.run(model, tokens, kernel_ops(), COURSE)  # the rounding bounds: the test below
    assert len(checker.steps) == 1 + 12 * 15 + 3 + 1  # encoder, 12 layers x 15 outputs, lnf's 3, logits
    assert checker.first_failure() is None, checker.first_failure()


@pytest.mark.calls("matmul_forward", module="matmul_tf32")
def test_124M_logits_with_the_tf32_matmul_match_the_reference_within_tf32_s_error(weights, tokens,
                                                                                 reference_logits):
    emulated = GPT2(*weights, backend=tf32_reference_backend())(tokens)
    model = GPT2(*weights, backend=make_backend("kernels", variants=("matmul_tf32",)))
    logits = model.backend.to_host(model(tokens))
    scale = np.abs(reference_logits).max()
    assert np.abs(emulated - reference_logits).max() > LOGITS_TOLERANCE * scale  # past fp32's allowance: TF32 shows
    error, allowed = np.abs(logits - reference_logits).max(), allowed_logit_error(weights, tokens, reference_logits, TF32)
    print(f"\nTF32 logits: max error {error:.3g}, allowed {allowed:.3g} (scale {scale:.3g})")
    assert error <= allowed, f"max logit error {error:.3g}"


@pytest.mark.parametrize("variants, profile", [
    pytest.param(variants, profile, marks=variants_called(*variants), id=name)
    for name, variants, profile in (("fp32", (), FP32), ("tf32", ("matmul_tf32",), TF32),
                                    ("flash", ("attention_flash",), FP32))])
def test_step_check_passes_under_the_rounding_bounds_of_the_profile(weights, tokens, variants, profile):
    model = GPT2(*weights, backend="gold")
    model.flash_attention = uses_flash(variants)  # gold then calls its flash_attention_forward for the check
    checker = step_check.run(model, tokens, kernel_ops(variants=variants), profile)
    assert checker.first_failure() is None, checker.first_failure()


@pytest.mark.calls("matmul_forward", module="matmul_tf32")
def test_step_check_under_fp32_rejects_the_tf32_matmul(weights, tokens):
    model = GPT2(*weights, backend="gold")
    failure = step_check.run(model, tokens, kernel_ops(variants=("matmul_tf32",)), FP32).first_failure()
    assert failure is not None and (failure.where, failure.function) == ("layer 0 qkv", "matmul_forward")


def test_step_check_names_the_first_wrong_step(weights, tokens):
    model = GPT2(*weights, backend="gold")
    solution = kernel_ops()

    def matmul_without_bias(out, inp, weight, bias, B, T, C, OC):
        solution.matmul_forward(out, inp, weight, None, B, T, C, OC)

    candidate = vars(solution) | {"matmul_forward": matmul_without_bias}
    checker = step_check.run(model, tokens, types.SimpleNamespace(**candidate), FP32)
    failure = checker.first_failure()
    assert failure is not None and failure.where == "layer 0 qkv" and failure.function == "matmul_forward"
    # check-and-swap: the steps after a failure see gold's inputs, so the attention right after passes
    following = checker.steps[checker.steps.index(failure) + 1]
    assert following.where == "layer 0 attention" and following.passed


@pytest.mark.parametrize("backend", backends("kernels", "gold", "kernels+flash", "kernels+fused"))
def test_kv_cache_greedy_tokens_equal_full_recompute(weights, backend):
    model = GPT2(*weights, backend=backend_named(backend))
    prompt = list(np.random.default_rng(3).integers(0, 50257, 8))
    recomputed = generate(model, prompt, 24, GREEDY, use_cache=False, stop_at_end_of_text=False)
    launched = generate(model, prompt, 24, GREEDY, use_graph=False, stop_at_end_of_text=False)
    graphed = generate(model, prompt, 24, GREEDY, stop_at_end_of_text=False)
    assert launched == recomputed
    assert graphed == recomputed


def test_graph_replay_logits_equal_launched_step(weights):
    model = GPT2(*weights, backend="kernels")
    prompt = np.random.default_rng(4).integers(0, 50257, (1, 12)).astype(np.int32)
    logits = {}
    for kind in ("launched", "graph"):
        decoder = make_decoder(model, kind, batch_size=1)
        decoder.prefill(prompt)
        logits[kind] = [decoder.step([t]) for t in (11, 12, 13, 14)]
        assert decoder.cache.length == 16 and int(decoder.cache.lengths[0]) == 16
    for launched, graphed in zip(logits["launched"], logits["graph"]):
        np.testing.assert_array_equal(launched, graphed)  # the same kernels on the same data


@pytest.mark.parametrize("kind", ["graph", "graph_per_length"])
@pytest.mark.parametrize("seed", [0, 1], ids=lambda s: f"seed{s}")
def test_a_graph_owns_its_buffers_through_other_work(weights, seed, kind):
    """Between replays, forward passes of other shapes free and reallocate the model's own
    activations, and bystander arrays of the step's sizes take whatever CuPy's pool holds
    free: the replays must neither write into them nor change their own logits."""
    model = GPT2(*weights, backend="kernels")
    rng = np.random.default_rng(seed)
    prompt = rng.integers(0, 50257, (1, 9)).astype(np.int32)
    steps = [int(t) for t in rng.integers(0, 50257, 5)]
    undisturbed = make_decoder(model, "launched", batch_size=1)
    undisturbed.prefill(prompt)
    expected = [undisturbed.step([t]) for t in steps]
    del undisturbed

    decoder = make_decoder(model, kind, batch_size=1)
    decoder.prefill(prompt)
    np.testing.assert_array_equal(decoder.step([steps[0]]), expected[0])  # launched, then captured
    decoder.capture(range(prompt.shape[1] + 1, prompt.shape[1] + len(steps)))  # graph_per_length: ahead of use
    for number in range(1, len(steps)):
        model.forward(rng.integers(0, 50257, (1 + number, 2 + number)).astype(np.int32))
        bystanders = model.new_activations(1, 1)  # the sizes of the step's buffers: the pool's free ones first
        arrays = [a for value in vars(bystanders).values() for a in (value if isinstance(value, list) else [value])]
        for array in arrays:
            array.fill(7.0)
        np.testing.assert_array_equal(decoder.step([steps[number]]), expected[number])
        assert all(bool((array == 7.0).all()) for array in arrays), "a replay wrote into another array"


@pytest.mark.parametrize("backend", backends("kernels", "kernels+fused"))
def test_decode_step_logits_match_the_reference(weights, backend):
    prompt = np.random.default_rng(5).integers(0, 50257, (2, 10)).astype(np.int32)
    results = []
    for name in (backend, "reference"):
        model = GPT2(*weights, backend=backend_named(name))
        cache = model.new_cache(2)
        model.forward(prompt, cache)
        step = model.decode_step(np.array([17, 4242], np.int32), cache)
        results.append(model.backend.to_host(step))
    scale = np.abs(results[1]).max()
    assert np.abs(results[0] - results[1]).max() <= LOGITS_TOLERANCE * scale


def test_beam_search_on_a_graph_equals_launched_steps(weights):
    """The graph's replays follow the in-place reordering of the cache's rows."""
    model = GPT2(*weights, backend="kernels")
    prompt = [list(np.random.default_rng(6).integers(0, 50257, 5))]
    search = BeamSearch(5, length_penalty=1.0)
    launched, graphed = (beam_search(model, prompt, 16, search, decoder=kind) for kind in ("launched", "graph"))
    assert launched.sequences == graphed.sequences
    np.testing.assert_array_equal(launched.scores, graphed.scores)


UNWRITTEN_CACHE = """
import sys
from gpt2kit.gpt2.checkpoint import perturbed_parameters
from gpt2kit.generation.executors import make_executor
from gpt2kit.generation.generate import GREEDY, generate
from gpt2kit.gpt2.model import GPT2
from gpt2kit.kernel_runtime import KitError
from tests.model.helpers import TINY
model = GPT2(TINY, perturbed_parameters(TINY, seed=5), backend="kernels", kernels=sys.argv[1])
said = []
print(generate(model, [464, 3290], 8, GREEDY, warn=said.append))
print(generate(model, [464, 3290], 8, GREEDY, use_cache=False))
print(said)
try:
    make_executor(model, "grape").generate([[464, 3290]], 8, GREEDY)
except KitError as err:
    print(err)
"""


def test_kernels_without_the_kv_cache_written_generate_as_recomputation_does(tmp_path):
    """A student's kernels whose decode.py is still the handout's stubs: generation recomputes (the same
    tokens as --no-cache, no NaN) and says why in one line; grape, which needs the cache, stops in one line."""
    from gpt2kit.grading.handout import strip_solutions

    root = Path(__file__).parents[2]
    kernels = tmp_path / "kernels"
    shutil.copytree(root / "kernels", kernels, ignore=shutil.ignore_patterns("__pycache__"))
    (kernels / "decode.py").write_text(strip_solutions((root / "kernels/decode.py").read_text())[0])
    done = subprocess.run([sys.executable, "-c", UNWRITTEN_CACHE, str(kernels)], capture_output=True, text=True,
                          cwd=root, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    cached, recomputed, said, grape = done.stdout.splitlines()
    assert cached == recomputed
    stubs = ("encoder_at_positions_forward, kv_cache_append_forward, decode_attention_forward: not written yet "
             "(kernels/decode.py)")
    assert said == str([f"{stubs}; generating without the KV cache (each step recomputes the whole sequence)"])
    assert grape.startswith(f"{stubs}: the launched decoder needs the KV cache")
