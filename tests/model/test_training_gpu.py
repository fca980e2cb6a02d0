"""A GPT-2 training step on the GPU (the kit's kernels, and gold) against the float64
reference backend on the same weights and data.

* Every call of a training step (forward, loss, backward) within its fp32 rounding
  bound against gold's on the same inputs: the step check, which names the first call
  that leaves its bound.
* The loss and every parameter's gradient of a whole step against float64: float32
  rounding compounds through the layers, so whole tensors are compared, to 1e-4 of
  their largest element (float32's 6e-8 grown over two layers' chains of sums of up
  to 4C terms, with ample room).
* Ten AdamW steps on one batch: the losses track the float64 run's, to 1e-3, while
  they fall. Looser than one step's: Adam's first update is lr * sign(gradient), so an
  element whose gradient is at float32's noise level may step the other way."""

import numpy as np
import pytest

from gpt2kit.gpt2 import step_check
from gpt2kit.gpt2.checkpoint import perturbed_parameters
from gpt2kit.gpt2.model import GPT2
from gpt2kit.model_runtime.backends import kernel_ops, make_backend
from gpt2kit.model_runtime.ops import MODEL_FUNCTIONS, TRAINING_FUNCTIONS
from gpt2kit.reference.precision import FP32
from tests.model.helpers import TINY
from tests.model.test_training import batch
from gpt2kit.training.step import AdamW, GraphTrainingStep, TrainingStep

pytestmark = [pytest.mark.gpu, pytest.mark.calls(*MODEL_FUNCTIONS, *TRAINING_FUNCTIONS)]

GRADIENT_TOLERANCE = 1e-4
B, T = 3, 37  # T not a multiple of any tile or warp


@pytest.fixture(scope="module")
def params():
    return perturbed_parameters(TINY, seed=11)


@pytest.fixture(scope="module")
def reference_step(params):
    step = TrainingStep(GPT2(TINY, params, backend="reference"), B, T)
    loss = step.compute_gradients(*batch(11, B, T))
    return loss, step.grads


def test_every_call_of_a_training_step_is_within_its_bound_against_gold(params):
    model = GPT2(TINY, params, backend="gold")
    checker = step_check.run_training(model, *batch(11, B, T), kernel_ops(), FP32)
    functions = {s.function for s in checker.steps}
    assert set(TRAINING_FUNCTIONS) - {"adamw_update"} <= functions  # the update is not part of the gradients
    assert checker.first_failure() is None, checker.first_failure()


@pytest.mark.parametrize("backend", ["kernels", "gold"])
def test_loss_and_gradients_match_the_float64_reference(params, reference_step, backend):
    want_loss, want = reference_step
    step = TrainingStep(GPT2(TINY, params, backend=make_backend(backend)), B, T)
    loss = step.compute_gradients(*batch(11, B, T))
    assert abs(loss - want_loss) <= 1e-5 * abs(want_loss)
    for name, grad in step.grads.items():
        error = np.abs(step.model.backend.to_host(grad) - want[name]).max()
        assert error <= GRADIENT_TOLERANCE * np.abs(want[name]).max(), f"{name}: {error:.3g}"


def test_ten_adamw_steps_track_the_float64_reference(params):
    options = AdamW(learning_rate=1e-2, weight_decay=0.1)
    inputs, targets = batch(12, B, T)
    ours = TrainingStep(GPT2(TINY, params, backend="kernels"), B, T, options)
    theirs = TrainingStep(GPT2(TINY, params, backend="reference"), B, T, options)
    losses = [(ours(inputs, targets), theirs(inputs, targets)) for _ in range(10)]
    mine, reference = np.array(losses).T
    assert reference[-1] < reference[0] - 1
    np.testing.assert_allclose(mine, reference, rtol=1e-3)


def test_graphed_steps_equal_launched_ones(params):
    """The same three steps, launched and replayed from the two captured graphs: the same losses and weights."""
    launched = TrainingStep(GPT2(TINY, params, backend="kernels"), B, T)
    graphed = GraphTrainingStep(GPT2(TINY, params, backend="kernels"), B, T)
    for number in range(3):
        inputs, targets = batch(20 + number, B, T)  # a new batch each step: the graphs read the step's own buffers
        assert graphed(inputs, targets) == pytest.approx(launched(inputs, targets), rel=1e-6)
    assert graphed.graphs.forward_graph is not None and graphed.graphs.backward_graph is not None
    for name, weights in launched.model.parameters.items():
        np.testing.assert_allclose(graphed.model.parameters[name].get(), weights.get(), rtol=1e-5, atol=1e-7,
                                   err_msg=name)
