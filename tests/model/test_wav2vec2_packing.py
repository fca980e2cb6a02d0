"""Wav2Vec2ForCTC's buffers on the reference backend (float64, CPU, no PyTorch): the transformer packed into the
batch's valid frames (new_activations(rows=M)) against it over every frame, and a shorter batch in the memory of a
longer one (grape's steps, wav2vec2.training). The batch and its sizes are shared with test_wav2vec2.py.

Packed, the same sums are taken over fewer rows, the padded frames' zeros left out: the valid frames' logits, the
loss and every gradient agree to float64 rounding (1e-12 of each tensor's largest element)."""

import numpy as np
import pytest

from gpt2kit.wav2vec2.checkpoint import perturbed_parameters
from gpt2kit.wav2vec2.config import PRESETS
from gpt2kit.wav2vec2.model import InputError, Wav2Vec2ForCTC

TINY = PRESETS["tiny"]
SEEDS = [0, 1]
AUDIO_LENGTHS = np.array([3200, 2400, 1600])  # 9, 7 and 4 frames
LABEL_LENGTHS = np.array([5, 3, 1])  # the first with a repeated label: 6 of its 9 frames at least
PACKED_TOLERANCE = 1e-12


def batch(seed: int):
    """Audio (3, 3200) zero padded past AUDIO_LENGTHS, and labels (3, 5) in 1..V-1 padded with 0 past LABEL_LENGTHS,
    the first utterance's second label a repeat of its first."""
    rng = np.random.default_rng(seed + 100)
    S, U = AUDIO_LENGTHS.max(), LABEL_LENGTHS.max()
    audio = np.where(np.arange(S) < AUDIO_LENGTHS[:, None], rng.normal(size=(3, S)), 0.0)
    labels = np.where(np.arange(U) < LABEL_LENGTHS[:, None], rng.integers(1, TINY.vocab_size, size=(3, U)), 0)
    labels[0, 1] = labels[0, 0]
    return audio, labels


def training_pass(model, audio, audio_lengths, labels, a, d):
    """(logits, loss, gradients) of one forward, loss and backward pass over the buffers a and d."""
    logits = model.forward(audio, audio_lengths, a).copy()
    loss = model.loss(labels, LABEL_LENGTHS, a, d)
    grads = model.zero_grads()
    model.backward(a, d, grads)
    return logits, loss, grads


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"seed{s}")
def test_packed_rows_give_the_valid_frames_logits_and_the_same_loss_and_gradients(seed):
    model = Wav2Vec2ForCTC(TINY, perturbed_parameters(TINY, seed), backend="reference")
    audio, labels = batch(seed)
    valid = np.arange(TINY.frames(audio.shape[1])) < TINY.frames(AUDIO_LENGTHS)[:, None]  # 20 of 27 frames
    want_logits, want_loss, want_grads = training_pass(model, audio, AUDIO_LENGTHS, labels,
                                                       model.new_activations(*audio.shape),
                                                       model.new_gradients(*audio.shape))
    for rows in (20, 23):  # exactly the valid frames, and three rows of zeros past them
        a, d = model.new_activations(*audio.shape, rows=rows), model.new_gradients(*audio.shape, rows=rows)
        assert a.ln1[0].shape == (1, rows, TINY.channels) and d.qkv[0].shape == (1, rows, 3 * TINY.channels)
        logits, loss, grads = training_pass(model, audio, AUDIO_LENGTHS, labels, a, d)
        scale = np.abs(want_logits[valid]).max()
        assert np.abs(logits[valid] - want_logits[valid]).max() <= PACKED_TOLERANCE * scale
        assert (logits[~valid] == 0).all()
        assert abs(loss - want_loss) <= PACKED_TOLERANCE * abs(want_loss)
        for name, want in want_grads.items():
            error = np.abs(grads[name] - want).max() / np.abs(want).max()
            assert error <= PACKED_TOLERANCE, f"rows {rows}, {name}: {error:.2e}"


def test_packing_puts_each_utterance_s_frames_in_order_and_rounds_rows_to_tiles():
    frames = np.array([3, 1, 2])
    row_frames, frame_rows = Wav2Vec2ForCTC.packing(frames, 4, 8)
    assert row_frames.tolist() == [0, 1, 2, 4, 8, 9, -1, -1]  # frame b * T + t; -1: zeros
    assert frame_rows.tolist() == [0, 1, 2, -1, 3, -1, -1, -1, 4, 5, -1, -1]
    assert Wav2Vec2ForCTC.packed_rows(np.array([300, 200]), 400) == 512  # 500 valid frames: four tiles of 128
    assert Wav2Vec2ForCTC.packed_rows(np.array([300, 290]), 300) == 600  # never past B x T
    with pytest.raises(InputError, match="a batch of 6 valid frames does not fit activations packed into 5 rows"):
        Wav2Vec2ForCTC.packing(frames, 4, 5)


@pytest.mark.parametrize("packed", [False, True], ids=["frames", "packed"])
@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"seed{s}")
def test_a_shorter_batch_in_the_longest_batch_s_memory_gives_its_own_logits_loss_and_gradients(seed, packed):
    """grape's steps run each shape over the memory of the longest: activations and gradients made within a set
    for more samples (and rows) are the first elements of its arrays, and compute what a set of their own does,
    after a longer batch has left its values there."""
    model = Wav2Vec2ForCTC(TINY, perturbed_parameters(TINY, seed), backend="reference")
    audio, labels = batch(seed)
    rows, longest_rows = (20, 3 * TINY.frames(2 * audio.shape[1])) if packed else (None, None)
    longest_a = model.new_activations(3, 2 * audio.shape[1], rows=longest_rows)
    longest_d = model.new_gradients(3, 2 * audio.shape[1], rows=longest_rows)
    model.forward(np.concatenate([audio, audio], axis=1), 2 * AUDIO_LENGTHS, longest_a)
    model.loss(labels, LABEL_LENGTHS, longest_a, longest_d)
    own = (model.new_activations(*audio.shape, rows=rows), model.new_gradients(*audio.shape, rows=rows))
    carved = (model.new_activations(*audio.shape, within=longest_a, rows=rows),
              model.new_gradients(*audio.shape, within=longest_d, rows=rows))
    assert np.shares_memory(carved[0].audio, longest_a.audio) and carved[0].audio.shape == (3, audio.shape[1], 1)
    (logits, loss, grads), (logits_within, loss_within, grads_within) = (
        training_pass(model, audio, AUDIO_LENGTHS, labels, a, d) for a, d in (own, carved))
    np.testing.assert_array_equal(logits_within, logits)
    assert loss_within == loss
    for name, grad in grads.items():
        np.testing.assert_array_equal(grads_within[name], grad, err_msg=name)


def test_a_packed_set_cannot_take_the_memory_of_one_over_all_frames():
    model = Wav2Vec2ForCTC(TINY, perturbed_parameters(TINY, 0), backend="reference")
    longest = model.new_activations(3, 6400)
    with pytest.raises(InputError, match="a set packed into rows cannot take the memory of one over all frames"):
        model.new_activations(3, 3200, within=longest, rows=20)
