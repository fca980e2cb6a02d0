"""Wav2Vec2's layers' NumPy references (reference.cpu) against PyTorch and autograd, in float64 on the CPU.

As tests/reference/test_backward_reference.py: each case draws its inputs from a seed in its test id and compares
float64 with float64 (1e-10 of the largest element); parameter gradients start from random values they must keep,
activation gradients from NaN they must overwrite. The last tests chain the references into transformers' own
feature encoder and positional convolution, at the configuration's kernels and strides."""

import numpy as np
import pytest

from gpt2kit.reference import cpu
from tests.reference.test_backward_reference import SEEDS, close, seeded, tensor

torch = pytest.importorskip("torch", reason="needs PyTorch: the README's Setup says how to add it")
F = torch.nn.functional


def channels_first(x):
    """A (B, T, C) tensor as torch's convolutions and group norm take it, (B, C, T)."""
    return x.transpose(1, 2)


def conv_output_frames(T, K, stride, padding):
    return (T + 2 * padding - K) // stride + 1


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"seed{s}")
@pytest.mark.parametrize("B, T, C, OC, K, stride, padding, groups, T_out", [
    (2, 9, 6, 4, 3, 1, 0, 1, 7),
    (1, 1, 3, 5, 1, 1, 0, 1, 1),        # one frame, one tap
    (1, 1, 4, 6, 2, 1, 1, 2, 1),        # one frame between zero padding, one of two output frames kept
    (2, 11, 6, 9, 4, 3, 2, 3, 4),       # stride and padding, three groups
    (3, 7, 5, 5, 3, 2, 1, 5, 4),        # groups == C: a depthwise convolution
    (2, 10, 8, 8, 4, 1, 2, 4, 10),      # even kernel, padding K // 2: the last of T + 1 frames dropped
    (2, 40, 1, 7, 10, 5, 0, 1, 7),      # the feature encoder's first layer: audio in, kernel 10, stride 5
])
def test_conv1d_forward_and_backward(seed, B, T, C, OC, K, stride, padding, groups, T_out):
    rng = seeded(seed, "conv1d")
    assert T_out <= conv_output_frames(T, K, stride, padding)
    x, weight, bias = rng.normal(size=(B, T, C)), rng.normal(size=(OC, C // groups, K)), rng.normal(size=OC)
    dout = rng.normal(size=(B, T_out, OC))
    out = np.full((B, T_out, OC), np.nan)
    cpu.conv1d_forward(out, x, weight, bias, B, T, C, OC, K, stride, padding, groups, T_out)
    starts = [rng.normal(size=shape) for shape in ((OC, C // groups, K), OC)]
    dinp, (dweight, dbias) = np.full((B, T, C), np.nan), (s.copy() for s in starts)
    cpu.conv1d_backward(dinp, dweight, dbias, dout, x, weight, B, T, C, OC, K, stride, padding, groups, T_out)
    x_t, weight_t, bias_t = tensor(x), tensor(weight), tensor(bias)
    y = channels_first(F.conv1d(channels_first(x_t), weight_t, bias_t, stride, padding, groups=groups)[:, :, :T_out])
    y.backward(torch.tensor(dout))
    close(out, y)
    close(dinp, x_t.grad)
    for ours, start, theirs in zip((dweight, dbias), starts, (weight_t, bias_t)):
        close(ours - start, theirs.grad)


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"seed{s}")
def test_conv1d_without_bias_or_input_gradient(seed):
    B, T, C, OC, K, stride = 2, 12, 3, 4, 3, 2  # Wav2Vec2's feature encoder: no bias, and audio needs no gradient
    T_out = conv_output_frames(T, K, stride, 0)
    rng = seeded(seed, "conv1d_bare")
    x, weight, dout = rng.normal(size=(B, T, C)), rng.normal(size=(OC, C, K)), rng.normal(size=(B, T_out, OC))
    out = np.full((B, T_out, OC), np.nan)
    cpu.conv1d_forward(out, x, weight, None, B, T, C, OC, K, stride, 0, 1, T_out)
    start = rng.normal(size=(OC, C, K))
    dweight = start.copy()
    cpu.conv1d_backward(None, dweight, None, dout, x, weight, B, T, C, OC, K, stride, 0, 1, T_out)
    weight_t = tensor(weight)
    y = channels_first(F.conv1d(channels_first(torch.tensor(x)), weight_t, None, stride))
    y.backward(torch.tensor(dout))
    close(out, y)
    close(dweight - start, weight_t.grad)


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"seed{s}")
@pytest.mark.parametrize("B, T, C, G", [(2, 5, 6, 3), (1, 1, 6, 2), (2, 7, 5, 5), (3, 4, 6, 1), (2, 33, 8, 8)])
def test_group_norm_forward_and_backward(seed, B, T, C, G):
    rng = seeded(seed, "group_norm")
    x = rng.normal(size=(B, T, C)) * 3 + 10  # a large mean: the centred form matters
    weight, bias, dout = rng.normal(size=C), rng.normal(size=C), rng.normal(size=(B, T, C))
    out, mean, rstd = np.full((B, T, C), np.nan), np.empty((B, G)), np.empty((B, G))
    every_frame = np.full(B, T, np.int32)
    cpu.group_norm_forward(out, mean, rstd, x, weight, bias, every_frame, B, T, C, G)
    starts = [rng.normal(size=C) for _ in range(2)]
    dinp, (dweight, dbias) = np.full((B, T, C), np.nan), (s.copy() for s in starts)
    cpu.group_norm_backward(dinp, dweight, dbias, dout, x, weight, mean, rstd, every_frame, B, T, C, G)
    x_t, weight_t, bias_t = tensor(x), tensor(weight), tensor(bias)
    y = channels_first(F.group_norm(channels_first(x_t), G, weight_t, bias_t, eps=cpu.GROUP_NORM_EPS))
    y.backward(torch.tensor(dout))
    close(out, y)
    grouped = torch.tensor(x).reshape(B, T, G, C // G)
    close(mean, grouped.mean(dim=(1, 3)))
    close(rstd, 1 / torch.sqrt(grouped.var(dim=(1, 3), unbiased=False) + cpu.GROUP_NORM_EPS))
    close(dinp, x_t.grad)
    for ours, start, theirs in zip((dweight, dbias), starts, (weight_t, bias_t)):
        close(ours - start, theirs.grad)


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"seed{s}")
@pytest.mark.parametrize("B, T, C, G, frames", [(2, 9, 6, 3, (4, 9)), (3, 33, 8, 8, (1, 20, 33))])
def test_group_norm_takes_its_statistics_from_the_counted_frames(seed, B, T, C, G, frames):
    """Statistics of each utterance's first frames[b] frames normalise all T, as torch computes it written out, with
    autograd for the backward: frames past the counted ones reach the gradient only through their own outputs."""
    rng = seeded(seed, "group_norm_frames")
    x = rng.normal(size=(B, T, C)) * 3 + 10
    weight, bias, dout = rng.normal(size=C), rng.normal(size=C), rng.normal(size=(B, T, C))
    frames = np.array(frames, np.int32)
    out, mean, rstd = np.full((B, T, C), np.nan), np.empty((B, G)), np.empty((B, G))
    cpu.group_norm_forward(out, mean, rstd, x, weight, bias, frames, B, T, C, G)
    dinp, dweight, dbias = np.full((B, T, C), np.nan), np.zeros(C), np.zeros(C)
    cpu.group_norm_backward(dinp, dweight, dbias, dout, x, weight, mean, rstd, frames, B, T, C, G)
    x_t, weight_t, bias_t = tensor(x), tensor(weight), tensor(bias)
    grouped = x_t.reshape(B, T, G, C // G)
    outputs = []
    for b, counted in enumerate(frames):
        mu = grouped[b, :counted].mean(dim=(0, 2), keepdim=True)
        variance = ((grouped[b, :counted] - mu) ** 2).mean(dim=(0, 2), keepdim=True)
        outputs.append((grouped[b] - mu) / torch.sqrt(variance + cpu.GROUP_NORM_EPS))
    y = torch.stack(outputs).reshape(B, T, C) * weight_t + bias_t
    y.backward(torch.tensor(dout))
    close(out, y)
    close(dinp, x_t.grad)
    close(dweight, weight_t.grad)
    close(dbias, bias_t.grad)


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"seed{s}")
def test_gelu_erf_is_torchs_exact_gelu(seed):
    rng = seeded(seed, "gelu_erf")
    x = np.concatenate([rng.normal(size=97) * 3, [0.0, -8.0, 8.0, -30.0, 30.0]])  # the tails too
    dout = rng.normal(size=x.size)
    out, dinp = np.full(x.size, np.nan), np.full(x.size, np.nan)
    cpu.gelu_erf_forward(out, x, x.size)
    cpu.gelu_erf_backward(dinp, x, dout, x.size)
    x_t = tensor(x)
    y = F.gelu(x_t)
    y.backward(torch.tensor(dout))
    close(out, y)
    close(dinp, x_t.grad)


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"seed{s}")
@pytest.mark.parametrize("B, T, C, NH, lengths", [
    (2, 5, 16, 2, [5, 1]),              # one row fully valid, one of a single frame
    (3, 7, 30, 3, [7, 4, 1]),
    (1, 1, 8, 2, [1]),
])
def test_bidirectional_attention_masks_padded_keys_only(seed, B, T, C, NH, lengths):
    rng = seeded(seed, "bidirectional_attention")
    x, dout = rng.normal(size=(B, T, 3 * C)), rng.normal(size=(B, T, C))
    lengths = np.array(lengths, dtype=np.int32)
    out, att = np.full((B, T, C), np.nan), np.full((B, NH, T, T), np.nan)
    cpu.bidirectional_attention_forward(out, att, x, lengths, B, T, C, NH)
    dinp = np.full((B, T, 3 * C), np.nan)
    cpu.bidirectional_attention_backward(dinp, dout, x, att, lengths, B, T, C, NH)
    x_t = tensor(x)
    q, k, v = (part.reshape(B, T, NH, C // NH).transpose(1, 2) for part in x_t.split(C, dim=-1))
    valid_keys = torch.arange(T).reshape(1, 1, 1, T) < torch.tensor(lengths).reshape(B, 1, 1, 1)
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=valid_keys)
    y.transpose(1, 2).reshape(B, T, C).backward(torch.tensor(dout))
    scores = (q @ k.transpose(2, 3)) / np.sqrt(C // NH)
    close(att, torch.softmax(scores.masked_fill(~valid_keys, -torch.inf), dim=-1))
    assert (att[~np.broadcast_to(valid_keys.numpy(), att.shape)] == 0).all()
    close(out, y.transpose(1, 2).reshape(B, T, C))
    close(dinp, x_t.grad)


def torch_ctc(logits, targets, input_lengths, target_lengths):
    """torch's per-utterance CTC losses and the gradient of their sum with respect to the logits."""
    logits_t = tensor(logits)
    losses = F.ctc_loss(F.log_softmax(logits_t, dim=-1).transpose(0, 1), torch.tensor(targets),
                        torch.tensor(input_lengths), torch.tensor(target_lengths), blank=cpu.CTC_BLANK,
                        reduction="none", zero_infinity=False)
    losses.sum().backward()
    return losses.detach().numpy(), logits_t.grad.numpy()


def ours_ctc(logits, targets, input_lengths, target_lengths):
    (B, T, V), S = logits.shape, targets.shape[1]
    losses, dlogits = np.full(B, np.nan), np.full((B, T, V), np.nan)
    cpu.ctc_loss_forward_backward(dlogits, losses, logits, targets.astype(np.int32), input_lengths.astype(np.int32),
                                  target_lengths.astype(np.int32), B, T, V, S)
    assert all((dlogits[b, frames:] == 0).all() for b, frames in enumerate(input_lengths))
    return losses, dlogits


def random_targets(rng, B, S, V, target_lengths):
    """Labels in 1..V-1 (never the blank), padded past each length with the blank."""
    targets = rng.integers(1, V, size=(B, S))
    targets[np.arange(S) >= np.reshape(target_lengths, (B, 1))] = cpu.CTC_BLANK
    return targets


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"seed{s}")
@pytest.mark.parametrize("B, T, V, S, input_lengths, target_lengths, scale", [
    (3, 12, 6, 4, [12, 9, 5], [4, 2, 0], 1.0),       # one target empty: only blanks
    (1, 1, 3, 1, [1], [1], 1.0),                     # one frame, one label
    (2, 20, 8, 6, [20, 13], [6, 3], 50.0),           # large logits: near-certain frames, losses near 1000
    (2, 500, 30, 60, [500, 350], [60, 25], 3.0),     # long inputs: p(targets) near e^-2000, below float64
])
def test_ctc_loss_and_gradient_of_the_sum(seed, B, T, V, S, input_lengths, target_lengths, scale):
    rng = seeded(seed, "ctc")
    case = (rng.normal(size=(B, T, V)) * scale, random_targets(rng, B, S, V, target_lengths), np.array(input_lengths),
            np.array(target_lengths))
    losses, dlogits = ours_ctc(*case)
    their_losses, their_dlogits = torch_ctc(*case)
    close(losses, their_losses)
    close(dlogits, their_dlogits)


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"seed{s}")
def test_ctc_repeated_labels_need_a_blank_between(seed):
    """Labels 2 2 2 3 need 6 frames (2 _ 2 _ 2 3): 9 frames fit many alignments, 6 exactly one, 5 none (+inf, and
    the NaN gradient torch gives without zero_infinity)."""
    rng = seeded(seed, "ctc_repeats")
    B, T, V = 3, 9, 5
    case = (rng.normal(size=(B, T, V)), np.tile([2, 2, 2, 3], (B, 1)), np.array([9, 6, 5]), np.array([4, 4, 4]))
    losses, dlogits = ours_ctc(*case)
    their_losses, their_dlogits = torch_ctc(*case)
    assert np.isinf(losses[2]) and np.isinf(their_losses[2])
    close(losses[:2], their_losses[:2])
    assert np.isnan(dlogits[2, :5]).all() and (np.isnan(dlogits) == np.isnan(their_dlogits)).all()
    close(dlogits[:2], their_dlogits[:2])
    assert (dlogits[2, 5:] == their_dlogits[2, 5:]).all()


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"seed{s}")
@pytest.mark.parametrize("OC, C, K", [(6, 4, 5), (1, 3, 1), (8, 3, 7)])
def test_weight_norm_over_all_but_the_kernel_axis(seed, OC, C, K):
    rng = seeded(seed, "weight_norm")
    g, v, dweight = rng.normal(size=(1, 1, K)), rng.normal(size=(OC, C, K)) * 10, rng.normal(size=(OC, C, K))
    weight = np.full((OC, C, K), np.nan)
    cpu.weight_norm_forward(weight, g, v, OC, C, K)
    starts = [rng.normal(size=shape) for shape in ((1, 1, K), (OC, C, K))]
    dg, dv = (s.copy() for s in starts)
    cpu.weight_norm_backward(dg, dv, dweight, g, v, OC, C, K)
    g_t, v_t = tensor(g), tensor(v)
    y = torch._weight_norm(v_t, g_t, 2)
    y.backward(torch.tensor(dweight))
    close(weight, y)
    close(weight, g * v / np.linalg.norm(v, axis=(0, 1), keepdims=True))
    for ours, start, theirs in zip((dg, dv), starts, (g_t, v_t)):
        close(ours - start, theirs.grad)


def wav2vec2_module(name, **settings):
    """transformers' Wav2Vec2 module `name` built from Wav2Vec2Config(**settings), in float64."""
    modeling = pytest.importorskip("transformers.models.wav2vec2.modeling_wav2vec2",
                                   reason="needs transformers: pip install -e '.[hf]'")
    config = modeling.Wav2Vec2Config(**settings)
    return getattr(modeling, name)(config).double().eval(), config


def randomise(module, rng):
    """Every parameter drawn from N(0, 1 / fan-in), fan-in the size of one output channel's slice of it."""
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.copy_(torch.tensor(rng.normal(size=tuple(parameter.shape)) / np.sqrt(parameter[0].numel())))


def test_wav2vec2_defaults_are_the_shapes_these_layers_take():
    modeling = pytest.importorskip("transformers.models.wav2vec2.modeling_wav2vec2",
                                   reason="needs transformers: pip install -e '.[hf]'")
    config = modeling.Wav2Vec2Config()
    assert tuple(config.conv_dim) == (512,) * 7 and config.hidden_size == 768
    assert tuple(config.conv_kernel) == (10, 3, 3, 3, 3, 2, 2) and tuple(config.conv_stride) == (5, 2, 2, 2, 2, 2, 2)
    assert (config.feat_extract_norm, config.feat_extract_activation, config.hidden_act) == ("group", "gelu", "gelu")
    assert not config.conv_bias  # the feature encoder's convolutions have no bias
    assert (config.num_conv_pos_embeddings, config.num_conv_pos_embedding_groups) == (128, 16)
    assert (config.pad_token_id, config.ctc_loss_reduction, config.ctc_zero_infinity) == (cpu.CTC_BLANK, "sum", False)
    frames = 16000  # one second of 16 kHz audio
    for K, stride in zip(config.conv_kernel, config.conv_stride):
        frames = conv_output_frames(frames, K, stride, 0)
    model = type("Model", (), {"config": config})()  # all that _get_feat_extract_output_lengths reads of its model
    assert frames == 49 == modeling.Wav2Vec2PreTrainedModel._get_feat_extract_output_lengths(model, 16000)
    K = config.num_conv_pos_embeddings
    assert conv_output_frames(frames, K, 1, K // 2) == frames + 1  # the even kernel's extra frame, which is dropped


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"seed{s}")
def test_feature_encoder_is_convolutions_then_group_norm_then_gelu(seed):
    """Wav2Vec2FeatureEncoder at the default kernels and strides, 8 channels: conv1d_forward (no padding, no bias),
    group_norm_forward with a group per channel after the first convolution only, gelu_erf_forward after each."""
    encoder, config = wav2vec2_module("Wav2Vec2FeatureEncoder", conv_dim=(8,) * 7)
    rng = seeded(seed, "feature_encoder")
    randomise(encoder, rng)
    B, T, C = 2, 4000, 1
    x = rng.normal(size=(B, T, C))
    with torch.no_grad():
        theirs = channels_first(encoder(torch.tensor(x[..., 0])))
    for layer, (OC, K, stride) in enumerate(zip(config.conv_dim, config.conv_kernel, config.conv_stride)):
        parameters = {name: p.detach().numpy() for name, p in encoder.conv_layers[layer].named_parameters()}
        T_out = conv_output_frames(T, K, stride, 0)
        y = np.empty((B, T_out, OC))
        cpu.conv1d_forward(y, x, parameters["conv.weight"], None, B, T, C, OC, K, stride, 0, 1, T_out)
        if layer == 0:
            normalised = np.empty((B, T_out, OC))
            cpu.group_norm_forward(normalised, np.empty((B, OC)), np.empty((B, OC)), y, parameters["layer_norm.weight"],
                                   parameters["layer_norm.bias"], np.full(B, T_out, np.int32), B, T_out, OC, OC)
            y = normalised
        x, T, C = np.empty((B, T_out, OC)), T_out, OC
        cpu.gelu_erf_forward(x, y, y.size)
    assert x.shape == theirs.shape == (B, 12, 8)
    close(x, theirs)


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"seed{s}")
def test_positional_conv_embedding_is_weight_norm_then_conv_then_gelu(seed):
    """Wav2Vec2PositionalConvEmbedding at hidden 32, kernel 8 (even: of its T + 1 output frames the last is dropped),
    4 groups, forward and backward: weight_norm, conv1d with padding K // 2 and T_out = T, then gelu_erf."""
    B, T, C, K, groups = 2, 11, 32, 8, 4
    module, _ = wav2vec2_module("Wav2Vec2PositionalConvEmbedding", hidden_size=C, num_conv_pos_embeddings=K,
                                num_conv_pos_embedding_groups=groups)
    rng = seeded(seed, "positional_conv")
    randomise(module, rng)
    parametrization = module.conv.parametrizations.weight  # torch's weight_norm(dim=2): original0 g, original1 v
    g_t, v_t, bias_t = parametrization.original0, parametrization.original1, module.conv.bias
    g, v, bias = (p.detach().numpy() for p in (g_t, v_t, bias_t))
    x, dout = rng.normal(size=(B, T, C)), rng.normal(size=(B, T, C))
    x_t = tensor(x)
    theirs = module(x_t)
    theirs.backward(torch.tensor(dout))

    weight, conv, y = np.empty((C, C // groups, K)), np.empty((B, T, C)), np.empty((B, T, C))
    cpu.weight_norm_forward(weight, g, v, C, C // groups, K)
    cpu.conv1d_forward(conv, x, weight, bias, B, T, C, C, K, 1, K // 2, groups, T)
    cpu.gelu_erf_forward(y, conv, y.size)
    close(y, theirs)

    dconv, dx = np.empty((B, T, C)), np.empty((B, T, C))
    dweight, dbias, dg, dv = np.zeros(weight.shape), np.zeros(C), np.zeros(g.shape), np.zeros(v.shape)
    cpu.gelu_erf_backward(dconv, conv, dout, dconv.size)
    cpu.conv1d_backward(dx, dweight, dbias, dconv, x, weight, B, T, C, C, K, 1, K // 2, groups, T)
    cpu.weight_norm_backward(dg, dv, dweight, g, v, C, C // groups, K)
    for ours, parameter in zip((dx, dbias, dg, dv), (x_t, bias_t, g_t, v_t)):
        close(ours, parameter.grad)
