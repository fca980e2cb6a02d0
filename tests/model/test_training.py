"""A GPT-2 training step on the reference backend against transformers' GPT2LMHeadModel and
torch.optim.AdamW, both in float64 on the CPU: the same random weights and data on both sides.

The loss and every parameter's gradient must agree to rounding (1e-9 of each tensor's
largest gradient: float64 on both sides, summed in different orders), and so must the
losses of ten AdamW steps, where every update feeds the next step's forward pass."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs PyTorch and transformers: the README's Setup says how to add them")
transformers = pytest.importorskip("transformers", reason="needs transformers: pip install -e '.[hf]'")

from gpt2kit.gpt2.checkpoint import from_hf_tensors, perturbed_parameters, write_hf  # noqa: E402
from gpt2kit.gpt2.model import GPT2  # noqa: E402
from tests.model.helpers import TINY  # noqa: E402
from gpt2kit.training.step import AdamW, TrainingError, TrainingStep  # noqa: E402

SEEDS = [0, 1]
TOLERANCE = 1e-9  # float64 on both sides: rounding only, relative to each tensor's largest element


def batch(seed: int, B: int, T: int) -> tuple[np.ndarray, np.ndarray]:
    """Inputs and targets (B, T): a random text and the same text one token on; one id repeated, as text has."""
    text = np.random.default_rng(seed).integers(0, TINY.vocab_size, B * T + 1)
    text[::5] = text[0]
    return text[:-1].reshape(B, T).astype(np.int32), text[1:].reshape(B, T).astype(np.int32)


def hf_twin(tmp_path, params):
    """transformers' GPT-2 holding `params`, in float64."""
    write_hf(tmp_path, TINY, params)
    return transformers.GPT2LMHeadModel.from_pretrained(tmp_path).double()


def hf_loss(model, inputs, targets):
    logits = model(torch.tensor(inputs, dtype=torch.long)).logits
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                             torch.tensor(targets, dtype=torch.long).reshape(-1))


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"seed{s}")
def test_loss_and_every_gradient_equal_pytorch_autograd(tmp_path, seed):
    params = perturbed_parameters(TINY, seed=seed)
    inputs, targets = batch(seed, B=2, T=9)
    step = TrainingStep(GPT2(TINY, params, backend="reference"), B=2, T=9)
    loss = step.compute_gradients(inputs, targets)

    model = hf_twin(tmp_path, params)
    theirs = hf_loss(model, inputs, targets)
    theirs.backward()
    assert abs(loss - theirs.item()) <= TOLERANCE * abs(theirs.item())
    grads = from_hf_tensors(TINY, {name.removeprefix("transformer."): p.grad.numpy()
                                   for name, p in model.named_parameters()})
    assert set(grads) == set(step.grads)
    for name, want in grads.items():
        got = step.grads[name]
        scale = np.abs(want).max()
        assert scale > 0, f"{name}: transformers' gradient is all zero"
        assert np.abs(got - want).max() <= TOLERANCE * scale, f"{name}: {np.abs(got - want).max() / scale:.2e}"


def test_ten_adamw_steps_track_pytorch(tmp_path):
    params = perturbed_parameters(TINY, seed=3)
    options = AdamW(learning_rate=1e-2, weight_decay=0.1)  # large enough that every step moves the loss
    step = TrainingStep(GPT2(TINY, params, backend="reference"), B=3, T=5, optimizer=options)
    model = hf_twin(tmp_path, params)
    optimizer = torch.optim.AdamW(model.parameters(), lr=options.learning_rate, betas=(options.beta1, options.beta2),
                                  eps=options.eps, weight_decay=options.weight_decay)
    inputs, targets = batch(3, B=3, T=5)
    ours, theirs = [], []
    for _ in range(10):
        ours.append(step(inputs, targets))
        optimizer.zero_grad()
        loss = hf_loss(model, inputs, targets)
        loss.backward()
        optimizer.step()
        theirs.append(loss.item())
    assert ours[-1] < ours[0] - 1  # it learns the batch
    np.testing.assert_allclose(ours, theirs, rtol=TOLERANCE, atol=0)


def test_a_step_refuses_a_batch_of_another_shape():
    step = TrainingStep(GPT2(TINY, perturbed_parameters(TINY, seed=0), backend="reference"), B=2, T=4)
    inputs, targets = batch(0, B=2, T=5)
    with pytest.raises(TrainingError, match=r"inputs \(2, 5\) and targets \(2, 5\) must both be \(2, 4\)"):
        step(inputs, targets)


def test_a_step_refuses_flash_attention_before_allocating():
    model = GPT2(TINY, perturbed_parameters(TINY, seed=0), backend="reference")
    model.flash_attention = True
    with pytest.raises(TrainingError, match="flash and local attention do not keep"):
        TrainingStep(model, B=1, T=4)
