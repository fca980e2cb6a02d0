"""Wav2Vec2ForCTC on the GPU: the kit's kernels (and gold) against the float64 reference backend on the same weights
and batch, the base size against transformers, and the CTC kernel on an utterance no alignment fits.

Whole tensors are compared to a share of their largest element, as GPT-2's training step is (test_training_gpu.py):
float32 rounding compounds through the feature encoder's seven convolutions and the layers, so per-element bounds
are the kernel tests' business. At the tiny size 1e-4 (the logits, the loss, every gradient); at the base size,
twelve layers and 768 channels deep, 1e-3 for the gradients."""

import numpy as np
import pytest

from gpt2kit.model_runtime.ops import MODEL_FUNCTIONS, SPEECH_FUNCTIONS, TRAINING_FUNCTIONS
from tests.model.test_wav2vec2_packing import AUDIO_LENGTHS, LABEL_LENGTHS, TINY, batch
from gpt2kit.wav2vec2.checkpoint import perturbed_parameters
from gpt2kit.wav2vec2.model import Wav2Vec2ForCTC

pytestmark = [pytest.mark.gpu, pytest.mark.calls(*MODEL_FUNCTIONS, *TRAINING_FUNCTIONS, *SPEECH_FUNCTIONS)]

TOLERANCE = 1e-4


def training_pass(model, audio, audio_lengths, labels, label_lengths, rows=None):
    """(logits, summed loss, every parameter's gradient) of one forward, loss and backward pass, on the host; rows:
    the transformer's over that many packed rows."""
    a, d = model.new_activations(*audio.shape, rows=rows), model.new_gradients(*audio.shape, rows=rows)
    grads = model.zero_grads()
    logits = model.backend.to_host(model.forward(audio, audio_lengths, a))
    loss = model.loss(labels, label_lengths, a, d)
    model.backward(a, d, grads)
    return logits, loss, {name: model.backend.to_host(grad) for name, grad in grads.items()}


def assert_close(got, want, tolerance, what):
    scale = np.abs(want).max()
    error = np.abs(got - want).max()
    assert error <= tolerance * scale, f"{what}: {error:.3g}, {error / scale:.2e} of its largest element {scale:.3g}"


@pytest.fixture(scope="module")
def reference_pass():
    params = perturbed_parameters(TINY, seed=5)
    return params, training_pass(Wav2Vec2ForCTC(TINY, params, backend="reference"), *inputs())


def inputs():
    audio, labels = batch(5)
    return audio, AUDIO_LENGTHS, labels, LABEL_LENGTHS


@pytest.mark.parametrize("packed", [False, True], ids=["frames", "packed"])
@pytest.mark.parametrize("backend", ["kernels", "gold"])
def test_logits_loss_and_gradients_match_the_float64_reference(reference_pass, backend, packed):
    """Packed, the transformer runs over the 20 valid frames alone (of 27): the padded frames' logits are zero."""
    params, (want_logits, want_loss, want_grads) = reference_pass
    valid = np.arange(want_logits.shape[1]) < TINY.frames(AUDIO_LENGTHS)[:, None]
    rows = int(valid.sum()) if packed else None
    logits, loss, grads = training_pass(Wav2Vec2ForCTC(TINY, params, backend=backend), *inputs(), rows=rows)
    assert_close(logits[valid], want_logits[valid], TOLERANCE, "logits")
    if packed:
        assert (logits[~valid] == 0).all()
    else:
        assert_close(logits, want_logits, TOLERANCE, "logits")
    assert abs(loss - want_loss) <= TOLERANCE * abs(want_loss), (loss, want_loss)
    for name, want in want_grads.items():
        assert_close(grads[name], want, TOLERANCE, name)


def test_an_utterance_no_alignment_fits_has_an_infinite_loss_and_nan_gradient_as_torch():
    import cupy

    from gpt2kit.kernels.ctc_loss import ctc_loss_forward_backward

    B, T, V, S = 2, 5, 4, 4
    logits = cupy.asarray(np.random.default_rng(3).standard_normal((B, T, V), dtype=np.float32))
    targets = cupy.asarray(np.array([[1, 1, 1, 2], [1, 2, 0, 0]], np.int32))  # 4 labels, 2 repeats: 6 frames needed
    frames, counts = cupy.asarray(np.array([5, 3], np.int32)), cupy.asarray(np.array([4, 2], np.int32))
    dlogits, losses = cupy.full((B, T, V), 7.0, np.float32), cupy.empty(B, np.float32)
    ctc_loss_forward_backward(dlogits, losses, logits, targets, frames, counts, B, T, V, S)
    losses, dlogits = losses.get(), dlogits.get()
    assert losses[0] == np.inf and np.isfinite(losses[1])
    assert np.isnan(dlogits[0]).all() and np.isfinite(dlogits[1]).all()
    assert (dlogits[1, 3:] == 0).all()  # the second utterance's padded frames


def test_base_size_matches_transformers():
    """Wav2Vec2 base (94M parameters) on the kit's kernels against transformers' in float64 on the same GPU: two
    utterances of 1 s and 0.6 s."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.model.test_wav2vec2 import hf_twin
    from gpt2kit.wav2vec2.checkpoint import from_hf_state_dict
    from gpt2kit.wav2vec2.config import PRESETS

    base = PRESETS["base"]
    hf_model = hf_twin(7, base)
    params = from_hf_state_dict(base, hf_model.state_dict())
    hf_model = hf_model.cuda()
    rng = np.random.default_rng(7)
    audio_lengths = np.array([16000, 9600])
    audio = np.where(np.arange(16000) < audio_lengths[:, None], rng.normal(size=(2, 16000)), 0.0)
    label_lengths = np.array([12, 7])
    labels = np.where(np.arange(12) < label_lengths[:, None], rng.integers(1, base.vocab_size, size=(2, 12)), 0)
    model = Wav2Vec2ForCTC(base, params, backend="kernels")
    logits, loss, grads = training_pass(model, audio.astype(np.float32), audio_lengths, labels, label_lengths)

    mask = torch.tensor(np.arange(16000) < audio_lengths[:, None], dtype=torch.long, device="cuda")
    out = hf_model(torch.tensor(audio.astype(np.float32), dtype=torch.float64, device="cuda"), attention_mask=mask)
    frames = hf_model._get_feat_extract_output_lengths(mask.sum(-1))
    theirs = torch.nn.functional.ctc_loss(
        torch.log_softmax(out.logits, dim=-1).transpose(0, 1), torch.tensor(labels[labels > 0], device="cuda"),
        frames, torch.tensor(label_lengths, device="cuda"), blank=0, reduction="sum", zero_infinity=False)
    theirs.backward()
    assert_close(logits, out.logits.detach().cpu().numpy(), TOLERANCE, "logits")
    assert abs(loss - theirs.item()) <= TOLERANCE * abs(theirs.item()), (loss, theirs.item())
    expected = from_hf_state_dict(base, {name: p.grad.cpu() for name, p in hf_model.named_parameters()}, np.float64)
    for name, want in expected.items():
        assert_close(grads[name], want, 10 * TOLERANCE, name)


def test_the_three_executors_train_alike_on_batches_of_several_lengths():
    """Four steps of each executor from the same weights on the same batches (1-3 s, padded to half seconds): the
    same losses as the baseline's; ptgraph with a graph pair per padded length, grape with one per padded length
    and packed rows, over the memory of the longest: each pair's arrays the first elements of the longest's, every
    capture's scratch from one pool."""
    from gpt2kit.model_runtime.executors import EXECUTORS
    from gpt2kit.wav2vec2.training import SpeechBatches, make_speech_step

    losses, steps = {}, {}
    for executor in EXECUTORS:
        batches = SpeechBatches(TINY, B=3, seed=4, shortest=1.0, longest=3.0, bucket=0.5)
        model = Wav2Vec2ForCTC(TINY, perturbed_parameters(TINY, seed=6), backend="kernels")
        steps[executor] = step = make_speech_step(model, executor, 3, batches.max_samples, batches.max_labels)
        shapes, losses[executor] = [], []
        for audio, audio_lengths, *rest in [next(batches) for _ in range(4)]:
            T = TINY.frames(audio.shape[1])
            shapes.append((audio.shape[1], Wav2Vec2ForCTC.packed_rows(TINY.frames(audio_lengths), T), 3 * T))
            losses[executor].append(step(audio, audio_lengths, *rest))
    assert len({S for S, _, _ in shapes}) >= 2, shapes  # the seed draws batches of more than one padded length
    assert any(M < frames for _, M, frames in shapes), shapes  # and one whose packing leaves out padding
    assert sorted(steps["ptgraph"].pairs) == sorted({S for S, _, _ in shapes})
    assert sorted(steps["grape"].pairs) == sorted({(S, M) for S, M, _ in shapes})
    grape = steps["grape"]
    longest_audio = grape.longest[0].audio
    for pair in grape.pairs.values():
        assert pair.a.audio.data.ptr == longest_audio.data.ptr
        assert pair.forward_graph.pool is pair.backward_graph.pool is grape.pool
    np.testing.assert_allclose(losses["ptgraph"], losses["baseline"], rtol=1e-5)
    np.testing.assert_allclose(losses["grape"], losses["baseline"], rtol=1e-5)
