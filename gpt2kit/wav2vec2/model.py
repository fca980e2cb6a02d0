"""Wav2Vec2ForCTC on the kit's host functions, readable top to bottom.

    model = Wav2Vec2ForCTC(config, params, backend="reference")
    a = model.new_activations(B, S)
    logits = model.forward(audio, audio_lengths, a)   # audio (B, S) samples -> logits (B, T frames, V)
    d, grads = model.new_gradients(B, S), model.zero_grads()
    loss = model.loss(labels, label_lengths, a, d)    # CTC, summed over the batch; d.logits its gradient
    model.backward(a, d, grads)                       # every parameter's gradient added into grads

The forward pass is transformers' Wav2Vec2ForCTC in eval mode: dropout, LayerDrop and
SpecAugment's masking act only in training, and this model has none of them.

    x = audio                                              (B, S, 1): one channel
    x = gelu(group_norm(conv0(x)))                         feature encoder: 7 convolutions without
    x = gelu(conv_i(x)), i = 1..6                          bias or padding, 320 samples a frame
    x = proj(ln_feat(x))                                   feature projection, F -> C channels
    x = x * valid                                          padded frames zeroed
    x = ln_enc(x + gelu(pos_conv(x)))                      positional convolution (weight norm, groups)
    for each layer:                                        post-layernorm
        x = ln1(x + attproj(attention(qkv(x))))            attention to every valid frame
        x = ln2(x + fcproj(gelu(fc(x))))                   feed-forward
    logits = x @ lm_head^T + lm_head_bias

GELU is the exact one (gelu_erf) throughout. A batch is padded to its longest utterance:
utterance b has config.frames(audio_lengths[b]) valid frames (transformers' reduction of
the attention mask); attention ignores the keys past them and the CTC loss stops there.
The feature encoder reads every sample as given, padding included (zeros, as transformers'
feature extractor pads), its group norm too, as transformers' does.

Packed rows (new_activations(B, S, rows=M)): past the positional convolution every call
but attention treats each frame alone, so the transformer can run over the batch's valid
frames only, packed one utterance after another into M rows (packed_rows: their count
rounded up to whole tiles of rows), zeros past them. The layer's qkv is spread back to
frames for attention, and its output packed again; the logits go back to frames. No valid
frame's value changes (up to the order of float32 sums over rows), and a third of a
typical batch's transformer work, its padding, is not done; the padded frames' logits are
zero. Unpacked (rows None), the transformer runs over all B x T frames, and every
"_rows"/"_frames" name below is the array it names without the suffix.

`backward` makes the forward pass's calls in reverse, as GPT-2's (gpt2/model.py). A
post-layernorm layer reads its input twice, in the residual add and in the next matmul,
so that input's gradient is the sum of two shares, which residual_forward adds.
"""

from __future__ import annotations

import math
import types

import numpy as np

from gpt2kit.kernel_runtime import KitError, ceil_div
from gpt2kit.model_runtime.backends import Backend, BackendError, make_backend
from gpt2kit.model_runtime.causal_lm import layer_views, zero_activations
from gpt2kit.model_runtime.checkpoint_files import Parameters
from gpt2kit.model_runtime.ops import SPEECH_FUNCTIONS
from gpt2kit.wav2vec2.config import LAYER_PARAMETERS, Wav2Vec2Config

# the activations whose gradients the backward pass keeps, under their names (new_gradients adds its own buffers)
GRADIENT_ACTIVATIONS = ("conv", "gn", "conv_gelu", "ln_feat", "proj", "masked", "pos_conv_weight", "pos_conv",
                        "pos_sum", "ln_enc", "qkv", "atty", "residual1", "ln1", "fch", "fch_gelu", "residual2", "ln2",
                        "logits")
# those that layernorm_backward's dinp and conv1d_backward's dweight add to: zeroed at the start of each pass
ACCUMULATED_GRADIENTS = ("conv_gelu", "pos_conv_weight", "pos_sum", "residual1", "residual2")
ROW_TILE = 128  # packed rows come in whole tiles of the matmul engine's rows (kernels/matmul_tf32.py's TILE_M)


class InputError(KitError):
    """Audio or labels the model cannot take: wrong shape, lengths out of range, too short for one frame."""


class Wav2Vec2ForCTC:
    def __init__(self, config: Wav2Vec2Config, params: Parameters, backend: str | Backend = "reference"):
        self.config = config
        self.backend = backend if isinstance(backend, Backend) else make_backend(backend)
        missing = [name for name in SPEECH_FUNCTIONS if getattr(self.backend.ops, name, None) is None]
        if missing:
            raise BackendError(f"Wav2Vec2 needs {', '.join(missing)}, which the {self.backend.name} backend does "
                               "not have (the reference backend has them all)")
        self.parameters = {name: self.backend.upload(array) for name, array in params.items()}
        self.global_names = tuple(name for name in self.parameters if name not in LAYER_PARAMETERS)
        self.weights = self.views(self.parameters)

    def views(self, arrays: dict) -> types.SimpleNamespace:
        """`arrays` laid out as the parameters, as the passes read them: the transformer's as a list of each
        layer's view, the feature encoder's convolution weights as one list too (conv_weights)."""
        views = layer_views(arrays, self.global_names)
        views.conv_weights = [arrays[f"conv{i}w"] for i in range(len(self.config.conv_dim))]
        return views

    # ------------------------------------------------------------------ forward

    def forward(self, audio, audio_lengths, a=None):
        """Logits (B, T, V) of audio (B, S) samples, of which utterance b's first audio_lengths[b] are its own.
        Every activation the backward pass needs stays in `a` (new_activations(B, S)), else in a fresh set."""
        audio, frames = self.check_audio(audio, audio_lengths)
        a = a if a is not None else self.new_activations(*audio.shape)
        self.load_batch(a, audio, frames)
        self.forward_launches(a)
        return a.logits

    def load_batch(self, a, audio, frames) -> None:
        """A checked batch (check_audio) into a's input buffers: the audio zero padded to a's S samples, each
        utterance's frames, the mask of valid frames, the frames group norm counts (all of the batch's padded
        length, audio.shape[1] samples, which a's S may exceed: a graph's buffers reused for a shorter batch) and,
        where a's transformer is packed, the packing's indices."""
        B, S = a.audio.shape[:2]
        if audio.shape[0] != B or audio.shape[1] > S:
            raise InputError(f"a batch of {audio.shape[0]} utterances of {audio.shape[1]} samples does not fit "
                             f"activations for {B} of {S}")
        padded = np.zeros((B, S), audio.dtype)
        padded[:, :audio.shape[1]] = audio
        T = a.logits.shape[1]
        a.audio[...] = self.backend.upload(padded).reshape(B, S, 1)
        a.frames[...] = self.backend.upload(frames)
        a.valid[...] = self.backend.upload((np.arange(T) < frames[:, None])[..., None].astype(np.float32))
        a.gn_frames[...] = self.backend.upload(np.full(B, self.config.frames_per_layer(audio.shape[1])[0], np.int32))
        if a.packed_rows is not None:
            row_frames, frame_rows = self.packing(frames, T, a.packed_rows)
            a.row_frames[...], a.frame_rows[...] = self.backend.upload(row_frames), self.backend.upload(frame_rows)

    @staticmethod
    def packed_rows(frames, T: int) -> int:
        """The rows a batch of these valid frames (B,) of T packs into: their count rounded up to whole tiles of
        ROW_TILE rows (so that batches of nearby counts share activations, and a graph), at most B x T."""
        return min(len(frames) * T, ceil_div(int(np.sum(frames)), ROW_TILE) * ROW_TILE)

    @staticmethod
    def packing(frames, T: int, M: int) -> tuple[np.ndarray, np.ndarray]:
        """The indices gather_rows packs with, int32: each of M rows' frame (b T + t), -1 past the valid ones; and
        each of the B x T frames' row, -1 where padded."""
        valid = (np.arange(T) < frames[:, None]).reshape(-1)
        N = int(valid.sum())
        if N > M:
            raise InputError(f"a batch of {N} valid frames does not fit activations packed into {M} rows")
        row_frames, frame_rows = np.full(M, -1, np.int32), np.full(valid.size, -1, np.int32)
        row_frames[:N], frame_rows[valid] = np.flatnonzero(valid), np.arange(N)
        return row_frames, frame_rows

    def forward_launches(self, a) -> None:
        """The forward pass's host functions on the batch a's buffers hold (load_batch): nothing read from the host,
        nothing allocated but scratch, so a CUDA graph can capture it."""
        c, w, ops, xp = self.config, self.weights, self.backend.ops, self.backend.xp
        (B, S), T = a.audio.shape[:2], a.logits.shape[1]
        C, F, I, NH, V, K, G = (c.channels, c.features, c.intermediate_size, c.num_heads, c.vocab_size,
                                c.pos_conv_kernel, c.pos_conv_groups)

        # the feature encoder: audio -> F channels a frame
        x, T_in = a.audio, S
        for i, (C_in, OC, kernel, stride) in enumerate(c.conv_layers()):
            T_out = a.conv[i].shape[1]
            ops.conv1d_forward(a.conv[i], x, w.conv_weights[i], None, B, T_in, C_in, OC, kernel, stride, 0, 1, T_out)
            if i == 0:  # a group per channel, each normalised over the utterance
                ops.group_norm_forward(a.gn, a.gn_mean, a.gn_rstd, a.conv[0], w.gnw, w.gnb, a.gn_frames, B, T_out, OC,
                                       OC)
            ops.gelu_erf_forward(a.conv_gelu[i], a.gn if i == 0 else a.conv[i], B * T_out * OC)
            x, T_in = a.conv_gelu[i], T_out

        # the feature projection, then the encoder's positional convolution of the valid frames
        ops.layernorm_forward(a.ln_feat, a.ln_feat_mean, a.ln_feat_rstd, x, w.ln_featw, w.ln_featb, B, T, F)
        ops.matmul_forward(a.proj, a.ln_feat, w.projw, w.projb, B, T, F, C)
        xp.multiply(a.proj, a.valid, out=a.masked)  # no host function zeroes frames: one multiply does
        ops.weight_norm_forward(a.pos_conv_weight, w.pos_conv_g, w.pos_conv_v, C, C // G, K)
        # padding K // 2 on both sides makes T + 1 frames of an even kernel: T_out = T drops the last
        ops.conv1d_forward(a.pos_conv, a.masked, a.pos_conv_weight, w.pos_convb, B, T, C, C, K, 1, K // 2, G, T)
        ops.gelu_erf_forward(a.pos_gelu, a.pos_conv, B * T * C)
        ops.residual_forward(a.pos_sum, a.masked, a.pos_gelu, B * T * C)
        ops.layernorm_forward(a.ln_enc, a.ln_enc_mean, a.ln_enc_rstd, a.pos_sum, w.ln_encw, w.ln_encb, B, T, C)

        # the transformer's layers, post-layernorm, over its RB x RT rows: the B x T frames, or 1 x M packed ones
        RB, RT = a.ln1[0].shape[:2]
        self.frames_to_rows(a.enc_rows, a.ln_enc, a)
        x = a.enc_rows
        for l in range(c.num_layers):
            ops.matmul_forward(a.qkv_rows[l], x, w.qkvw[l], w.qkvb[l], RB, RT, C, 3 * C)
            self.rows_to_frames(a.qkv[l], a.qkv_rows[l], a)
            ops.bidirectional_attention_forward(a.atty_frames[l], a.att[l], a.qkv[l], a.frames, B, T, C, NH)
            self.frames_to_rows(a.atty[l], a.atty_frames[l], a)
            ops.matmul_forward(a.attproj[l], a.atty[l], w.attprojw[l], w.attprojb[l], RB, RT, C, C)
            ops.residual_forward(a.residual1[l], x, a.attproj[l], RB * RT * C)
            ops.layernorm_forward(a.ln1[l], a.ln1_mean[l], a.ln1_rstd[l], a.residual1[l], w.ln1w[l], w.ln1b[l], RB,
                                  RT, C)
            ops.matmul_forward(a.fch[l], a.ln1[l], w.fcw[l], w.fcb[l], RB, RT, C, I)
            ops.gelu_erf_forward(a.fch_gelu[l], a.fch[l], RB * RT * I)
            ops.matmul_forward(a.fcproj[l], a.fch_gelu[l], w.fcprojw[l], w.fcprojb[l], RB, RT, I, C)
            ops.residual_forward(a.residual2[l], a.ln1[l], a.fcproj[l], RB * RT * C)
            ops.layernorm_forward(a.ln2[l], a.ln2_mean[l], a.ln2_rstd[l], a.residual2[l], w.ln2w[l], w.ln2b[l], RB,
                                  RT, C)
            x = a.ln2[l]
        ops.matmul_forward(a.logits_rows, x, w.lm_headw, w.lm_headb, RB, RT, C, V)
        self.rows_to_frames(a.logits, a.logits_rows, a)

    def frames_to_rows(self, rows, frames, a) -> None:
        """frames (B, T, W) into the transformer's rows: its valid frames packed into rows (1, M, W), zeros past
        them; nothing when the transformer runs over the frames themselves (rows is frames)."""
        if rows is not frames:
            self.backend.gather_rows(rows, frames, a.row_frames)

    def rows_to_frames(self, frames, rows, a) -> None:
        """The transformer's packed rows (1, M, W) back to frames (B, T, W), padded frames zero; nothing when
        unpacked (frames is rows)."""
        if frames is not rows:
            self.backend.gather_rows(frames, rows, a.frame_rows)

    # ------------------------------------------------------------------ loss and backward (training)

    def loss(self, labels, label_lengths, a, d) -> float:
        """The CTC loss of the forward pass that left `a`, summed over the utterances (transformers'
        ctc_loss_reduction "sum"; +inf for one whose labels do not fit its frames): labels (B, U) ids in 1..V-1
        (0 is the blank), utterance b's first label_lengths[b] of them its own. Each utterance's loss goes to
        a.losses, their sum's gradient at the logits to d.logits."""
        labels, label_lengths = self.check_labels(labels, label_lengths, a.logits.shape[0])
        self.loss_launches(a, d, self.backend.upload(labels), self.backend.upload(label_lengths))
        return float(self.backend.to_host(a.losses).sum())

    def loss_launches(self, a, d, labels, label_lengths) -> None:
        """loss's host function on labels (B, U) and label_lengths (B,) already on the device and checked."""
        B, T, V = a.logits.shape
        self.backend.ops.ctc_loss_forward_backward(d.logits, a.losses, a.logits, labels, a.frames, label_lengths, B,
                                                   T, V, labels.shape[1])

    def backward(self, a, d, grads: dict) -> None:
        """Every parameter's gradient added into grads (zero_grads(), laid out as self.parameters), from d.logits,
        the loss's gradient at the logits of the forward pass that left `a`. d (new_gradients) holds the
        activations' gradients. The forward pass in reverse, call by call."""
        c, w, ops, xp = self.config, self.weights, self.backend.ops, self.backend.xp
        dw = self.views(grads)
        B, S, T = a.audio.shape[0], a.audio.shape[1], a.logits.shape[1]
        RB, RT = a.ln1[0].shape[:2]  # the transformer's rows (forward_launches)
        C, F, I, NH, V, K, G, L = (c.channels, c.features, c.intermediate_size, c.num_heads, c.vocab_size,
                                   c.pos_conv_kernel, c.pos_conv_groups, c.num_layers)
        zero_activations(d, ACCUMULATED_GRADIENTS)
        # layernorm_backward's scratch (rows, 2 * channels), from the one sized for the wider of C and F
        scratch_rows, scratch_C, scratch_F = (d.scratch.reshape(-1)[:rows * 2 * width]
                                              for rows, width in ((RB * RT, C), (B * T, C), (B * T, F)))

        self.frames_to_rows(d.logits_rows, d.logits, a)
        ops.matmul_backward(d.ln2[L - 1], dw.lm_headw, dw.lm_headb, d.logits_rows, a.ln2[L - 1], w.lm_headw, RB, RT,
                            C, V)
        for l in reversed(range(L)):
            x, dx = (a.enc_rows, d.enc_rows) if l == 0 else (a.ln2[l - 1], d.ln2[l - 1])
            ops.layernorm_backward(d.residual2[l], dw.ln2w[l], dw.ln2b[l], scratch_rows, d.ln2[l], a.residual2[l],
                                   w.ln2w[l], a.ln2_mean[l], a.ln2_rstd[l], RB, RT, C)
            # the residual add hands d.residual2 to both its operands: fcproj's is read as it is
            ops.matmul_backward(d.fch_gelu[l], dw.fcprojw[l], dw.fcprojb[l], d.residual2[l], a.fch_gelu[l],
                                w.fcprojw[l], RB, RT, I, C)
            ops.gelu_erf_backward(d.fch[l], a.fch[l], d.fch_gelu[l], RB * RT * I)
            ops.matmul_backward(d.share_rows, dw.fcw[l], dw.fcb[l], d.fch[l], a.ln1[l], w.fcw[l], RB, RT, C, I)
            ops.residual_forward(d.ln1[l], d.share_rows, d.residual2[l], RB * RT * C)  # + the residual add's share
            ops.layernorm_backward(d.residual1[l], dw.ln1w[l], dw.ln1b[l], scratch_rows, d.ln1[l], a.residual1[l],
                                   w.ln1w[l], a.ln1_mean[l], a.ln1_rstd[l], RB, RT, C)
            ops.matmul_backward(d.atty[l], dw.attprojw[l], dw.attprojb[l], d.residual1[l], a.atty[l], w.attprojw[l],
                                RB, RT, C, C)
            self.rows_to_frames(d.atty_frames[l], d.atty[l], a)
            ops.bidirectional_attention_backward(d.qkv_frames[l], d.atty_frames[l], a.qkv[l], a.att[l], a.frames, B,
                                                 T, C, NH)
            self.frames_to_rows(d.qkv[l], d.qkv_frames[l], a)
            ops.matmul_backward(d.share_rows, dw.qkvw[l], dw.qkvb[l], d.qkv[l], x, w.qkvw[l], RB, RT, C, 3 * C)
            ops.residual_forward(dx, d.share_rows, d.residual1[l], RB * RT * C)
        self.rows_to_frames(d.ln_enc, d.enc_rows, a)

        ops.layernorm_backward(d.pos_sum, dw.ln_encw, dw.ln_encb, scratch_C, d.ln_enc, a.pos_sum, w.ln_encw,
                               a.ln_enc_mean, a.ln_enc_rstd, B, T, C)
        ops.gelu_erf_backward(d.pos_conv, a.pos_conv, d.pos_sum, B * T * C)  # pos_sum = masked + gelu(pos_conv)
        ops.conv1d_backward(d.share, d.pos_conv_weight, dw.pos_convb, d.pos_conv, a.masked, a.pos_conv_weight, B,
                            T, C, C, K, 1, K // 2, G, T)
        ops.weight_norm_backward(dw.pos_conv_g, dw.pos_conv_v, d.pos_conv_weight, w.pos_conv_g, w.pos_conv_v, C,
                                 C // G, K)
        ops.residual_forward(d.masked, d.share, d.pos_sum, B * T * C)
        xp.multiply(d.masked, a.valid, out=d.proj)  # the zeroed frames pass no gradient back
        ops.matmul_backward(d.ln_feat, dw.projw, dw.projb, d.proj, a.ln_feat, w.projw, B, T, F, C)
        ops.layernorm_backward(d.conv_gelu[-1], dw.ln_featw, dw.ln_featb, scratch_F, d.ln_feat, a.conv_gelu[-1],
                               w.ln_featw, a.ln_feat_mean, a.ln_feat_rstd, B, T, F)
        for i, (C_in, OC, kernel, stride) in reversed(list(enumerate(c.conv_layers()))):
            T_in, T_out = S if i == 0 else a.conv[i - 1].shape[1], a.conv[i].shape[1]
            ops.gelu_erf_backward(d.gn if i == 0 else d.conv[i], a.gn if i == 0 else a.conv[i], d.conv_gelu[i],
                                  B * T_out * OC)
            if i == 0:
                ops.group_norm_backward(d.conv[0], dw.gnw, dw.gnb, d.gn, a.conv[0], w.gnw, a.gn_mean, a.gn_rstd,
                                        a.gn_frames, B, T_out, OC, OC)
            # the audio needs no gradient (dinp None)
            ops.conv1d_backward(None if i == 0 else d.conv_gelu[i - 1], dw.conv_weights[i], None, d.conv[i],
                                a.audio if i == 0 else a.conv_gelu[i - 1], w.conv_weights[i], B, T_in, C_in, OC,
                                kernel, stride, 0, 1, T_out)

    # ------------------------------------------------------------------ buffers

    def activation_shapes(self, B: int, S: int, rows: int | None = None) -> dict:
        """name -> shape, or a list of shapes (one array each: the feature encoder's layers, the transformer's),
        for B utterances of S samples, the transformer's arrays over B x T frames or, packed, `rows` rows (with
        the arrays packing adds: enc_rows, logits_rows, and the layers' one qkv_scratch and atty_scratch)."""
        c = self.config
        T, C, F, I, NH, V, L = (c.frames(S), c.channels, c.features, c.intermediate_size, c.num_heads, c.vocab_size,
                                c.num_layers)
        R = (B, T) if rows is None else (1, rows)  # the transformer's rows
        convs = [(B, frames, OC) for frames, OC in zip(c.frames_per_layer(S), c.conv_dim)]
        shapes = {
            "audio": (B, S, 1),
            "conv": convs, "gn": convs[0], "gn_mean": (B, c.conv_dim[0]), "gn_rstd": (B, c.conv_dim[0]),
            "conv_gelu": convs,
            "ln_feat": (B, T, F), "ln_feat_mean": (B, T), "ln_feat_rstd": (B, T),
            "proj": (B, T, C), "masked": (B, T, C),
            "pos_conv_weight": (C, C // c.pos_conv_groups, c.pos_conv_kernel), "pos_conv": (B, T, C),
            "pos_gelu": (B, T, C), "pos_sum": (B, T, C),
            "ln_enc": (B, T, C), "ln_enc_mean": (B, T), "ln_enc_rstd": (B, T),
            "qkv": (B, T, 3 * C), "att": (B, NH, T, T), "atty": (*R, C), "attproj": (*R, C),
            "residual1": (*R, C), "ln1": (*R, C), "ln1_mean": R, "ln1_rstd": R,
            "fch": (*R, I), "fch_gelu": (*R, I), "fcproj": (*R, C),
            "residual2": (*R, C), "ln2": (*R, C), "ln2_mean": R, "ln2_rstd": R,
            "logits": (B, T, V), "losses": (B,),
        }
        if rows is not None:
            shapes |= {"enc_rows": (*R, C), "logits_rows": (*R, V), "qkv_scratch": (*R, 3 * C),
                       "atty_scratch": (B, T, C)}
        per_layer = ("qkv", "att", "atty", "attproj", "residual1", "ln1", "ln1_mean", "ln1_rstd", "fch", "fch_gelu",
                     "fcproj", "residual2", "ln2", "ln2_mean", "ln2_rstd")
        return shapes | {name: [shapes[name]] * L for name in per_layer}

    def new_activations(self, B: int, S: int, within=None, rows: int | None = None):
        """A fresh set of activations for B utterances of S samples, with the batch's buffers load_batch fills:
        frames (B,) each utterance's valid frames, valid (B, T, 1) their mask, gn_frames (B,) the frames group norm
        counts. rows: the transformer's over that many packed rows (packed_rows), and the indices load_batch packs
        with (row_frames, frame_rows). within: a set made for B utterances of S samples or more (and as many rows
        or more, packed as this one is or not), whose memory this set takes (each array the first elements of its
        namesake) instead of its own."""
        T, L = self.config.frames(S), self.config.num_layers
        shapes = self.activation_shapes(B, S, rows) | {"valid": (B, T, 1)}
        indices = {} if rows is None else {"row_frames": (rows,), "frame_rows": (B * T,)}
        self._check_within(within, rows)
        if within is not None:
            a = self._allocate(shapes | indices, within)
            a.frames, a.gn_frames = within.frames, within.gn_frames
        else:
            a = self._allocate(shapes)
            a.frames, a.gn_frames = (self.backend.xp.zeros(B, np.int32) for _ in range(2))
            for name, shape in indices.items():
                setattr(a, name, self.backend.xp.full(shape, -1, np.int32))
        a.packed_rows = rows
        if rows is None:  # each array of the rows is the frames'
            a.enc_rows, a.logits_rows, a.qkv_rows, a.atty_frames = a.ln_enc, a.logits, a.qkv, a.atty
        else:  # the layers take turns with one scratch each: qkv's rows before attention, its output's frames
            a.qkv_rows, a.atty_frames = [a.qkv_scratch] * L, [a.atty_scratch] * L
        return a

    def new_gradients(self, B: int, S: int, within=None, rows: int | None = None):
        """The backward pass's buffers for B utterances of S samples: the gradients of GRADIENT_ACTIVATIONS, named
        as the activations (qkv's as its rows, matmul_backward's dout); share (B, T, C), the gradient a matmul or
        the positional convolution hands an input that a residual add reads too, before residual_forward adds the
        add's; and layernorm_backward's scratch. rows, within: as new_activations'."""
        c, shapes = self.config, self.activation_shapes(B, S, rows)
        T, C, L = c.frames(S), c.channels, c.num_layers
        R = shapes["ln1"][0][:2]
        gradients = {name: shapes[name] for name in GRADIENT_ACTIVATIONS} | {"qkv": [(*R, 3 * C)] * L}
        gradients |= {"share": (B, T, C), "scratch": (B, T, 2 * max(C, c.features))}
        if rows is not None:
            gradients |= {name: shapes[name] for name in ("enc_rows", "logits_rows", "atty_scratch")}
            gradients["qkv_scratch"] = (B, T, 3 * C)  # attention's dinp, over the frames
        self._check_within(within, rows)
        d = self._allocate(gradients, within)
        if rows is None:
            d.enc_rows, d.logits_rows, d.qkv_frames, d.atty_frames = d.ln_enc, d.logits, d.qkv, d.atty
            d.share_rows = d.share
        else:
            d.qkv_frames, d.atty_frames = [d.qkv_scratch] * L, [d.atty_scratch] * L
            d.share_rows = d.share.reshape(-1)[:rows * C].reshape(1, rows, C)
        d.packed_rows = rows
        return d

    @staticmethod
    def _check_within(within, rows) -> None:
        if within is not None and (within.packed_rows is None) != (rows is None):
            raise InputError(f"a set {'packed into rows' if rows else 'over all frames'} cannot take the memory of "
                             f"one {'packed into rows' if within.packed_rows else 'over all frames'}")

    def zero_grads(self) -> dict:
        """A zero gradient for every parameter, laid out as self.parameters."""
        return {name: self.backend.xp.zeros_like(array) for name, array in self.parameters.items()}

    def _allocate(self, shapes: dict, within=None):
        """An array of each shape (a list of shapes: a list of arrays), by name: new, or the first elements of
        within's namesake, which is at least as large."""
        def array(name, shape, i=None):
            if within is None:
                return self.backend.empty(*shape)
            held = getattr(within, name) if i is None else getattr(within, name)[i]
            return held.reshape(-1)[:math.prod(shape)].reshape(shape)

        return types.SimpleNamespace(**{
            name: [array(name, s, i) for i, s in enumerate(shape)] if isinstance(shape, list) else array(name, shape)
            for name, shape in shapes.items()})

    # ------------------------------------------------------------------ checks

    def check_audio(self, audio, audio_lengths) -> tuple[np.ndarray, np.ndarray]:
        """audio (B, S) floats and each utterance's frame count (B,) int32, on the host, after checking that
        audio_lengths (B,) are sample counts in [1, S] that make at least one frame each."""
        audio, lengths = np.asarray(self.backend.to_host(audio)), np.asarray(self.backend.to_host(audio_lengths))
        if audio.ndim != 2 or audio.size == 0 or not np.issubdtype(audio.dtype, np.floating):
            raise InputError(f"audio must be a non-empty (B, S) array of float samples, got shape {audio.shape} of "
                             f"{audio.dtype}")
        B, S = audio.shape
        if lengths.shape != (B,) or not np.issubdtype(lengths.dtype, np.integer):
            raise InputError(f"audio_lengths must be ({B},) integers, got shape {lengths.shape} of {lengths.dtype}")
        if (lengths > S).any() or (self.config.frames(lengths) < 1).any():
            raise InputError(f"audio_lengths {lengths.tolist()} must be at least {self.config.samples_per_frame()} "
                             f"(one frame) and at most S={S}")
        return audio, self.config.frames(lengths).astype(np.int32)

    def check_labels(self, labels, label_lengths, B: int) -> tuple[np.ndarray, np.ndarray]:
        """labels (B, U) and label_lengths (B,) as int32 on the host, after checking that each utterance's labels
        are ids in 1..V-1."""
        labels, lengths = np.asarray(self.backend.to_host(labels)), np.asarray(self.backend.to_host(label_lengths))
        if labels.ndim != 2 or labels.shape[0] != B or labels.shape[1] < 1 or lengths.shape != (B,):
            raise InputError(f"labels must be ({B}, U) and label_lengths ({B},), got {labels.shape} and "
                             f"{lengths.shape}")
        if not np.issubdtype(labels.dtype, np.integer) or ((lengths < 0) | (lengths > labels.shape[1])).any():
            raise InputError(f"labels must be integer ids and label_lengths in [0, {labels.shape[1]}], got "
                             f"{labels.dtype} and {lengths.tolist()}")
        own = np.arange(labels.shape[1]) < lengths[:, None]
        if ((labels < 1) | (labels >= self.config.vocab_size))[own].any():
            raise InputError(f"labels must be ids in 1..{self.config.vocab_size - 1} (0 is CTC's blank)")
        return labels.astype(np.int32), lengths.astype(np.int32)
