"""Wav2Vec2ForCTC (gpt2kit/wav2vec2/) on the reference backend against transformers' Wav2Vec2ForCTC, both in float64
on the CPU: the same seeded weights, a batch of three utterances of different lengths (zero padded, with an attention
mask) and their labels on both sides.

The logits, the summed CTC loss and every parameter's gradient must agree to rounding (1e-9 of each tensor's largest
element). transformers' own loss takes its log-softmax in float32 (transformers.loss.loss_ctc), so the float64 loss
is the same computation, torch's ctc_loss of transformers' float64 logits, and transformers' float32 one is checked
against it to float32's precision."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs PyTorch and transformers: the README's Setup says how to add them")
transformers = pytest.importorskip("transformers", reason="needs transformers: pip install -e '.[hf]'")

from gpt2kit.wav2vec2.checkpoint import (config_from_hf, from_hf_state_dict, perturbed_parameters,  # noqa: E402
                                         transformers_config)
from gpt2kit.wav2vec2.config import PRESETS  # noqa: E402
from gpt2kit.wav2vec2.model import InputError, Wav2Vec2ForCTC  # noqa: E402
from tests.model.test_wav2vec2_packing import AUDIO_LENGTHS, LABEL_LENGTHS, SEEDS, TINY, batch  # noqa: E402

TOLERANCE = 1e-9  # float64 on both sides: rounding only, relative to each tensor's largest element


def hf_twin(seed: int, config=TINY):
    """transformers' Wav2Vec2ForCTC of `config` in float64, eval mode, every parameter drawn from N(0, 1 / fan-in)
    (the size of one output's slice of it), in float32 values so that our float32 parameters hold them exactly."""
    model = transformers.Wav2Vec2ForCTC(transformers_config(config)).double().eval()
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            values = rng.normal(size=tuple(parameter.shape)) / np.sqrt(parameter[0].numel())
            parameter.copy_(torch.tensor(values.astype(np.float32)))
    return model


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"seed{s}")
def test_logits_loss_and_every_gradient_equal_transformers_autograd(seed):
    hf_model = hf_twin(seed)
    audio, labels = batch(seed)
    model = Wav2Vec2ForCTC(TINY, from_hf_state_dict(TINY, hf_model.state_dict()), backend="reference")
    a, d, grads = model.new_activations(*audio.shape), model.new_gradients(*audio.shape), model.zero_grads()
    logits = model.forward(audio, AUDIO_LENGTHS, a)
    loss = model.loss(labels, LABEL_LENGTHS, a, d)
    model.backward(a, d, grads)

    attention_mask = torch.tensor(np.arange(audio.shape[1]) < AUDIO_LENGTHS[:, None], dtype=torch.long)
    hf_labels = torch.tensor(np.where(np.arange(labels.shape[1]) < LABEL_LENGTHS[:, None], labels, -100))
    out = hf_model(torch.tensor(audio), attention_mask=attention_mask, labels=hf_labels)
    frames = hf_model._get_feat_extract_output_lengths(attention_mask.sum(-1))
    assert frames.tolist() == TINY.frames(AUDIO_LENGTHS).tolist() == [9, 7, 4]
    theirs = torch.nn.functional.ctc_loss(  # transformers' loss_ctc, in float64
        torch.log_softmax(out.logits, dim=-1).transpose(0, 1), torch.tensor(labels[labels > 0]), frames,
        torch.tensor(LABEL_LENGTHS), blank=0, reduction="sum", zero_infinity=False)
    theirs.backward()

    want = out.logits.detach().numpy()
    assert logits.shape == want.shape == (3, 9, TINY.vocab_size)
    # the padded frames too: both models compute them alike (their queries attend to the valid frames)
    assert np.abs(logits - want).max() <= TOLERANCE * np.abs(want).max()
    assert abs(out.loss.item() - theirs.item()) <= 1e-5 * abs(theirs.item())  # transformers' float32 log-softmax
    assert abs(loss - theirs.item()) <= TOLERANCE * abs(theirs.item())
    expected = from_hf_state_dict(TINY, {name: p.grad for name, p in hf_model.named_parameters()}, np.float64)
    assert set(expected) == set(grads)
    for name, want in expected.items():
        scale = np.abs(want).max()
        assert scale > 0, f"{name}: transformers' gradient is all zero"
        error = np.abs(grads[name] - want).max()
        assert error <= TOLERANCE * scale, f"{name}: {error / scale:.2e}"


def test_base_size_has_transformers_parameter_count():
    with torch.device("meta"):  # shapes only: nothing drawn
        hf_model = transformers.Wav2Vec2ForCTC(transformers.Wav2Vec2Config(vocab_size=32))
    counts = {name: p.numel() for name, p in hf_model.named_parameters()}
    # SpecAugment's mask embedding: a training-time parameter (mask_time_prob 0.05 by default) eval mode never reads
    assert counts.pop("wav2vec2.masked_spec_embed") == 768
    assert PRESETS["base"].num_parameters() == sum(counts.values()) == 94_395_552
    assert config_from_hf(transformers.Wav2Vec2Config(vocab_size=32).to_dict()) == PRESETS["base"]
    assert config_from_hf(transformers_config(TINY).to_dict()) == TINY


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"seed{s}")
def test_random_init_fills_every_parameter_and_runs(seed):
    params = perturbed_parameters(TINY, seed)
    assert {name: p.shape for name, p in params.items()} == TINY.parameter_shapes()
    model = Wav2Vec2ForCTC(TINY, params, backend="reference")
    audio, labels = batch(seed)
    a = model.new_activations(*audio.shape)
    assert np.isfinite(model.forward(audio, AUDIO_LENGTHS, a)).all()
    assert np.isfinite(model.loss(labels, LABEL_LENGTHS, a, model.new_gradients(*audio.shape)))


def test_audio_too_short_for_a_frame_is_refused():
    model = Wav2Vec2ForCTC(TINY, perturbed_parameters(TINY, 0), backend="reference")
    with pytest.raises(InputError, match="at least 400 \\(one frame\\)"):
        model.forward(np.zeros((2, 800)), np.array([800, 399]))


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"seed{s}")
def test_speech_batches_are_padded_to_buckets_with_labels_that_fit(seed):
    from gpt2kit.wav2vec2.config import PRESETS as SIZES
    from gpt2kit.wav2vec2.training import SAMPLE_RATE, SpeechBatches

    base = SIZES["base"]
    batches = SpeechBatches(base, B=4, seed=seed, bucket=0.5)
    for audio, audio_lengths, labels, label_lengths in (next(batches) for _ in range(5)):
        assert audio.shape[1] % (SAMPLE_RATE // 2) == 0 and audio.shape[1] - SAMPLE_RATE // 2 < audio_lengths.max()
        assert (SAMPLE_RATE <= audio_lengths).all() and (audio_lengths <= 16 * SAMPLE_RATE).all()
        assert (audio[np.arange(audio.shape[1]) >= audio_lengths[:, None]] == 0).all()
        assert labels.shape == (4, batches.max_labels)
        assert (label_lengths <= (base.frames(audio_lengths) + 1) // 2).all()
        own = np.arange(batches.max_labels) < label_lengths[:, None]
        assert ((labels >= 1) & (labels < base.vocab_size))[own].all() and (labels[~own] == 0).all()
        assert (label_lengths >= 10 * audio_lengths // SAMPLE_RATE - 1).all()  # 10-16 characters a second


def test_a_speech_step_needs_the_kernels_backend():
    from gpt2kit.model_runtime.executors import ExecutorError
    from gpt2kit.wav2vec2.training import SpeechStepError, make_speech_step

    model = Wav2Vec2ForCTC(TINY, perturbed_parameters(TINY, 0), backend="reference")
    with pytest.raises(SpeechStepError, match="kernels backend, not 'reference'"):
        make_speech_step(model, "grape", 2, 16000, 8)
    with pytest.raises(ExecutorError, match="no executor 'eager'; the executors are baseline, ptgraph, grape"):
        make_speech_step(model, "eager", 2, 16000, 8)


def test_parameters_go_back_to_transformers_whole():
    """to_hf_state_dict then from_hf_state_dict gives the parameters back, and transformers' model loads them strictly
    under its own spelling of weight norm's halves."""
    from gpt2kit.wav2vec2.checkpoint import to_hf_state_dict

    params = perturbed_parameters(TINY, 3)
    hf_model = transformers.Wav2Vec2ForCTC(transformers_config(TINY))
    state = hf_model.state_dict()
    tensors = to_hf_state_dict(TINY, params, state)
    assert set(tensors) == set(state) - {"wav2vec2.masked_spec_embed"}
    state.update({name: torch.from_numpy(np.ascontiguousarray(array)) for name, array in tensors.items()})
    hf_model.load_state_dict(state)
    back = from_hf_state_dict(TINY, hf_model.state_dict())
    assert all(np.array_equal(back[name], params[name]) for name in params)


@pytest.mark.parametrize("safetensors", [True, False], ids=["safetensors", "pytorch-bin"])
def test_a_transformers_directory_loads_as_its_state_dict_converts(tmp_path, safetensors):
    from gpt2kit.wav2vec2.checkpoint import load

    hf_model = hf_twin(2)
    hf_model.float().save_pretrained(tmp_path, safe_serialization=safetensors)
    config, params = load(tmp_path)
    assert config == TINY
    want = from_hf_state_dict(TINY, hf_model.state_dict())
    assert set(params) == set(want) and all(np.array_equal(params[name], want[name]) for name in want)


def test_a_directory_that_is_not_wav2vec2_s_is_one_line(tmp_path):
    from gpt2kit.model_runtime.checkpoint_files import CheckpointError
    from gpt2kit.wav2vec2.checkpoint import load

    (tmp_path / "config.json").write_text('{"model_type": "gpt2"}')
    with pytest.raises(CheckpointError, match="model_type is 'gpt2', not 'wav2vec2'"):
        load(tmp_path)
    with pytest.raises(CheckpointError, match="not a transformers Wav2Vec2 directory"):
        load(tmp_path / "nothing" / "here")
    with pytest.raises(CheckpointError, match="unknown Wav2Vec2 size 'huge'"):
        load("random:huge")
