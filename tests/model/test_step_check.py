"""The step check's judging under each precision profile, on the CPU: the model runs
gold's float32 code on NumPy arrays, as the step check runs gold on the GPU, and the
candidate is the float64 reference rounded to float32 (right to the last bit), with
or without an honest TF32 matmul in its place."""

import types

import numpy as np
import pytest

from gpt2kit.gpt2 import step_check
from gpt2kit.model_runtime.backends import Backend
from gpt2kit.gpt2.checkpoint import perturbed_parameters
from gpt2kit.gpt2.model import GPT2
from gpt2kit.model_runtime.ops import MODEL_FUNCTIONS, TRAINING_FUNCTIONS
from gpt2kit.reference import cpu, gold
from gpt2kit.reference.precision import COURSE, FP32, TF32
from gpt2kit.reference.registry import SPECS
from tests.model.helpers import TINY
from tests.reference.test_precision import tf32_matmul

TOKENS = np.random.default_rng(3).integers(0, TINY.vocab_size, (2, 7)).astype(np.int32)


def rounded_reference(name):
    """Host function `name` computed by reference.cpu in float64, its outputs rounded to float32."""
    def call(*args):
        copies = [a.astype(np.float64) if isinstance(a, np.ndarray) and a.dtype == np.float32 else a for a in args]
        getattr(cpu, name)(*copies)
        outputs, scratch = step_check.written_positions(name)
        for i in outputs + scratch:
            if args[i] is not None:  # an output left out (matmul_backward's dbias without a bias)
                args[i][...] = copies[i]
    return call


def float32_candidate(**replaced):
    return types.SimpleNamespace(**{name: replaced.get(name) or rounded_reference(name)
                                    for name in MODEL_FUNCTIONS + TRAINING_FUNCTIONS})


def tf32_matmul_forward():
    return tf32_matmul("nearest")


@pytest.fixture(scope="module")
def model():
    gold_on_numpy = Backend("gold on NumPy", np, np.float32, types.SimpleNamespace(
        **{name: getattr(gold, name) for name in MODEL_FUNCTIONS + TRAINING_FUNCTIONS}))
    return GPT2(TINY, perturbed_parameters(TINY, seed=5), backend=gold_on_numpy)


@pytest.mark.parametrize("profile", [COURSE, FP32, TF32], ids=lambda p: p.name)
def test_correctly_rounded_float32_passes_every_profile(model, profile):
    checker = step_check.run(model, TOKENS, float32_candidate(), profile)
    assert len(checker.steps) == 1 + 2 * 15 + 3 + 1 and checker.first_failure() is None, checker.first_failure()
    assert {s.judged_by for s in checker.steps} == {profile.name}


def test_a_tf32_matmul_fails_fp32_at_the_first_matmul_and_passes_tf32(model):
    candidate = float32_candidate(matmul_forward=tf32_matmul_forward())
    failure = step_check.run(model, TOKENS, candidate, FP32).first_failure()
    assert (failure.where, failure.function) == ("layer 0 qkv", "matmul_forward") and failure.max_error > 1
    under_tf32 = step_check.run(model, TOKENS, candidate, TF32)
    assert under_tf32.first_failure() is None, under_tf32.first_failure()
    worst = max(s.max_error for s in under_tf32.steps if s.function == "matmul_forward")
    assert 0.01 < worst <= 1  # TF32's error is visible against its bound, and within it


def test_a_wrong_kernel_fails_under_tf32_too(model):
    def gelu_off_by_a_little(out, inp, N):
        gold.gelu_forward(out, inp, N)
        out.reshape(-1)[0] += 1e-3

    candidate = float32_candidate(matmul_forward=tf32_matmul_forward(), gelu_forward=gelu_off_by_a_little)
    failure = step_check.run(model, TOKENS, candidate, TF32).first_failure()
    assert (failure.where, failure.function) == ("layer 0 gelu", "gelu_forward")


def test_variants_in_a_model_are_named_and_one_per_host_function():
    from gpt2kit.model_runtime.backends import BackendError, kernel_ops
    from gpt2kit.reference.variants import VARIANTS, VariantError

    with pytest.raises(VariantError, match=f"no variant 'matmul_fp16'; the variants are {', '.join(VARIANTS)}$"):
        kernel_ops(variants=("matmul_fp16",))
    if "matmul_tf32" not in VARIANTS:
        pytest.skip("this kit has no milestone-2 variants")
    with pytest.raises(BackendError, match="variants matmul_tf32, matmul_cublas: at most one per host function"):
        kernel_ops(variants=("matmul_tf32", "matmul_cublas"))


@pytest.mark.calls(*MODEL_FUNCTIONS)  # the backend refuses a starter kit's stubs
@pytest.mark.calls("matmul_forward", module="matmul_tf32")
def test_a_variant_stands_in_for_its_host_function():
    from gpt2kit.model_runtime.backends import kernel_ops

    assert kernel_ops(variants=("matmul_tf32",)).matmul_forward.__module__ == "gpt2kit.kernels.matmul_tf32"


@pytest.mark.skipif(not set(TRAINING_FUNCTIONS) <= set(SPECS), reason="milestone 4's specs are not in this kit")
def test_a_training_step_passes_call_by_call_and_a_wrong_backward_is_named(model):
    """The forward pass, the loss and the backward pass, every call judged; gradients added to start from gold's
    content. A GELU backward without the tanh's slope is named where it first runs: the last layer's."""
    inputs, targets = TOKENS[:, :-1], TOKENS[:, 1:]
    checker = step_check.run_training(model, inputs, targets, float32_candidate(), FP32)
    assert checker.first_failure() is None, checker.first_failure()
    assert {"cross_entropy_forward_backward", "encoder_backward", "layernorm_backward"} <= {
        s.function for s in checker.steps}

    def gelu_backward_without_tanh_slope(dinp, inp, dout, N):
        t = np.tanh(np.float32(np.sqrt(2 / np.pi)) * (inp + np.float32(0.044715) * inp**3))
        dinp[...] = (np.float32(0.5) * (1 + t) * dout).reshape(dinp.shape)

    candidate = float32_candidate(gelu_backward=gelu_backward_without_tanh_slope)
    failure = step_check.run_training(model, inputs, targets, candidate, FP32).first_failure()
    assert (failure.where, failure.function) == (f"layer {TINY.num_layers - 1} gelu", "gelu_backward")
