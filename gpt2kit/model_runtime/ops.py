"""The host functions the model calls, as a typed protocol: follow `ops.matmul_forward(...)`
in gpt2/model.py to here, and from each method's docstring to its kernel module.

Every backend (model_runtime.backends) offers these functions: the kernels of the
kernels directory the process runs, reference.gold, or reference.cpu (SpeechOps' only
where its module has them). Arrays are the backend's (CuPy float32 on the GPU, NumPy on
the CPU); each call writes its outputs in place and returns None. Each method's spec is
reference/specs/<name without _forward>.py.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Protocol

Array = Any  # a CuPy or NumPy array, or None for an absent bias


class ForwardOps(Protocol):
    def encoder_forward(self, out: Array, inp: Array, wte: Array, wpe: Array, B: int, T: int, C: int) -> None:
        """kernels/encoder.py: out[b, t] = wte[inp[b, t]] + wpe[t]."""

    def layernorm_forward(self, out: Array, mean: Array, rstd: Array, inp: Array, weight: Array, bias: Array,
                          B: int, T: int, C: int) -> None:
        """kernels/layernorm.py: LayerNorm of every (b, t) row; mean and rstd are outputs too."""

    def matmul_forward(self, out: Array, inp: Array, weight: Array, bias: Array, B: int, T: int, C: int,
                       OC: int) -> None:
        """kernels/matmul.py: out = inp @ weight^T + bias."""

    def attention_forward(self, out: Array, qkvr: Array, att: Array, inp: Array, B: int, T: int, C: int,
                          NH: int) -> None:
        """kernels/attention.py: causal multi-head attention of packed q|k|v."""

    def flash_attention_forward(self, out: Array, lse: Array, inp: Array, B: int, T: int, C: int, NH: int) -> None:
        """kernels/flash_attention.py (milestone 3): attention_forward's out without the T x T probabilities;
        lse (B, NH, T) gets each softmax's log-sum-exp. Optional (OPTIONAL_FUNCTIONS): the model calls it in
        attention_forward's place when its backend has it (model_runtime.backends, the attention_flash variant)."""

    def local_attention_forward(self, out: Array, lse: Array, inp: Array, B: int, T: int, C: int, NH: int,
                                W: int) -> None:
        """kernels/flash_attention.py (milestone 3): flash attention over each query's W most recent keys.
        Optional: a local model (GPT2(..., window=W)) calls it in attention_forward's place."""

    def rotary_forward(self, out: Array, inp: Array, positions: Array, sin_cos: Array, B: int, T: int, C: int,
                       NH: int, rotary_dim: int) -> None:
        """kernels/rotary.py (milestone 3): packed q|k|v with each query and key head's first rotary_dim values
        turned by the angle of position positions[b] + t. Optional: GPT-J (gptj.model) calls it."""

    def residual_forward(self, out: Array, inp1: Array, inp2: Array, N: int) -> None:
        """kernels/residual.py: out = inp1 + inp2."""

    def gelu_forward(self, out: Array, inp: Array, N: int) -> None:
        """kernels/gelu.py: GELU, tanh form."""

    def encoder_at_positions_forward(self, out: Array, inp: Array, positions: Array, wte: Array, wpe: Array,
                                     B: int, T: int, C: int) -> None:
        """kernels/decode.py: out[b, t] = wte[inp[b, t]] + wpe[positions[b] + t]."""

    def kv_cache_append_forward(self, k_cache: Array, v_cache: Array, qkv: Array, lengths: Array, B: int, T: int,
                                C: int, NH: int, max_T: int) -> None:
        """kernels/decode.py: cache slots (lengths[b] + t) % max_T get the keys and values of qkv."""

    def decode_attention_forward(self, out: Array, qkv: Array, k_cache: Array, v_cache: Array, lengths: Array,
                                 B: int, C: int, NH: int, max_T: int) -> None:
        """kernels/decode.py: the row's key and value to cache slot lengths[b] % max_T, then its query attends to
        cache slots 0..min(lengths[b], max_T - 1)."""

    def layernorm_matmul_forward(self, out: Array, inp: Array, ln_weight: Array, ln_bias: Array, weight: Array,
                                 bias: Array, B: int, T: int, C: int, OC: int) -> None:
        """kernels/fused_gemv.py (milestone 3): out = layernorm(inp) @ weight^T + bias, in one kernel.
        Optional: the decode step calls the fused functions when its backend has them (model_runtime.backends, FUSED_DECODE_VARIANTS)."""

    def layernorm_matmul_gelu_forward(self, out: Array, inp: Array, ln_weight: Array, ln_bias: Array,
                                      weight: Array, bias: Array, B: int, T: int, C: int, OC: int) -> None:
        """kernels/fused_gemv.py (milestone 3): out = gelu(layernorm(inp) @ weight^T + bias). Optional."""

    def matmul_residual_forward(self, out: Array, inp: Array, weight: Array, bias: Array, residual: Array, B: int,
                                T: int, C: int, OC: int) -> None:
        """kernels/fused_gemv.py (milestone 3): out = residual + inp @ weight^T + bias. Optional."""


class TrainingOps(Protocol):
    """What a training step calls besides the forward pass (milestone 4): each backward pass, the loss and
    the optimizer's update. A parameter's gradient is added to; an activation's is written, except
    layernorm_backward's dinp and residual_backward's two, which add (reference/cpu.py's training section)."""

    def cross_entropy_forward_backward(self, dlogits: Array, losses: Array, logits: Array, targets: Array, B: int,
                                       T: int, V: int, Vp: int) -> None:
        """kernels/cross_entropy.py: losses (B, T) and dlogits (B, T, Vp), the gradient of their mean."""

    def matmul_backward(self, dinp: Array, dweight: Array, dbias: Array, dout: Array, inp: Array, weight: Array,
                        B: int, T: int, C: int, OC: int) -> None:
        """kernels/matmul_backward.py: dinp = dout @ weight; dweight += dout^T @ inp; dbias += dout's row sum."""

    def layernorm_backward(self, dinp: Array, dweight: Array, dbias: Array, scratch: Array, dout: Array, inp: Array,
                           weight: Array, mean: Array, rstd: Array, B: int, T: int, C: int) -> None:
        """kernels/layernorm_backward.py: from the forward's saved mean and rstd; dinp, dweight, dbias added to;
        scratch (B, T, 2C) for the sums over rows."""

    def attention_backward(self, dinp: Array, dscores: Array, dout: Array, inp: Array, att: Array, B: int, T: int,
                           C: int, NH: int) -> None:
        """kernels/attention_backward.py: dinp (B, T, 3C) for q, k and v, from the saved probabilities att;
        dscores (B, NH, T, T) is scratch."""

    def gelu_backward(self, dinp: Array, inp: Array, dout: Array, N: int) -> None:
        """kernels/gelu_backward.py: dinp = gelu'(inp) * dout."""

    def residual_backward(self, dinp1: Array, dinp2: Array, dout: Array, N: int) -> None:
        """kernels/residual_backward.py: dinp1 += dout, dinp2 += dout."""

    def encoder_backward(self, dwte: Array, dwpe: Array, dout: Array, inp: Array, B: int, T: int, C: int) -> None:
        """kernels/encoder_backward.py: dwte[inp[b, t]] += dout[b, t]; dwpe[t] += dout[b, t] over b."""

    def adamw_update(self, params: Array, grads: Array, m: Array, v: Array, N: int, learning_rate: float,
                     beta1: float, beta2: float, eps: float, weight_decay: float, step: int) -> None:
        """kernels/adamw.py: one torch.optim.AdamW step of N parameters; m and v updated in place."""


class SpeechOps(Protocol):
    """What Wav2Vec2 (wav2vec2.model) calls besides the transformer's functions: the convolutions of its
    feature encoder and positional embedding, their norms, the exact GELU, attention over every valid frame and
    the CTC loss, forward and backward. Channel-last (B, T, C) activations; gradients as in TrainingOps.
    Optional: a backend has each one its module has (reference.cpu has them all)."""

    def conv1d_forward(self, out: Array, inp: Array, weight: Array, bias: Array, B: int, T: int, C: int, OC: int,
                       K: int, stride: int, padding: int, groups: int, T_out: int) -> None:
        """kernels/conv1d.py: torch's grouped conv1d of inp (B, T, C) into out (B, T_out, OC), zero padded."""

    def conv1d_backward(self, dinp: Array, dweight: Array, dbias: Array, dout: Array, inp: Array, weight: Array,
                        B: int, T: int, C: int, OC: int, K: int, stride: int, padding: int, groups: int,
                        T_out: int) -> None:
        """kernels/conv1d.py: dinp written (None: not wanted), dweight and dbias (None: no bias) added to."""

    def group_norm_forward(self, out: Array, mean: Array, rstd: Array, inp: Array, weight: Array, bias: Array,
                           frames: Array, B: int, T: int, C: int, G: int) -> None:
        """kernels/group_norm.py: GroupNorm of G groups over time and channels, the statistics of each utterance's
        first frames[b] frames; mean and rstd (B, G) saved."""

    def group_norm_backward(self, dinp: Array, dweight: Array, dbias: Array, dout: Array, inp: Array,
                            weight: Array, mean: Array, rstd: Array, frames: Array, B: int, T: int, C: int,
                            G: int) -> None:
        """kernels/group_norm.py: dinp written, dweight and dbias added to, from the saved mean and rstd."""

    def gelu_erf_forward(self, out: Array, inp: Array, N: int) -> None:
        """kernels/gelu_erf.py: the exact GELU, x * Phi(x)."""

    def gelu_erf_backward(self, dinp: Array, inp: Array, dout: Array, N: int) -> None:
        """kernels/gelu_erf.py: dinp = gelu_erf'(inp) * dout."""

    def bidirectional_attention_forward(self, out: Array, att: Array, inp: Array, lengths: Array, B: int, T: int,
                                        C: int, NH: int) -> None:
        """kernels/bidirectional_attention.py: attention of packed q|k|v to every key before lengths[b]."""

    def bidirectional_attention_backward(self, dinp: Array, dout: Array, inp: Array, att: Array, lengths: Array,
                                         B: int, T: int, C: int, NH: int) -> None:
        """kernels/bidirectional_attention.py: dinp (B, T, 3C) from the saved probabilities att."""

    def ctc_loss_forward_backward(self, dlogits: Array, losses: Array, logits: Array, targets: Array,
                                  input_lengths: Array, target_lengths: Array, B: int, T: int, V: int,
                                  S: int) -> None:
        """kernels/ctc_loss.py: losses (B,) of CTC, blank 0, and dlogits, the gradient of their sum."""

    def weight_norm_forward(self, weight: Array, g: Array, v: Array, OC: int, C: int, K: int) -> None:
        """kernels/weight_norm.py: weight[:, :, k] = g[k] * v[:, :, k] / ||v[:, :, k]|| (torch's dim=2)."""

    def weight_norm_backward(self, dg: Array, dv: Array, dweight: Array, g: Array, v: Array, OC: int, C: int,
                             K: int) -> None:
        """kernels/weight_norm.py: dg and dv added to, from dweight."""


PROTOCOLS = (ForwardOps, TrainingOps, SpeechOps)
TRAINING_FUNCTIONS: tuple[str, ...] = tuple(name for name in vars(TrainingOps) if not name.startswith("_"))
SPEECH_FUNCTIONS: tuple[str, ...] = tuple(name for name in vars(SpeechOps) if not name.startswith("_"))
FUSED_DECODE_FUNCTIONS = ("layernorm_matmul_forward", "layernorm_matmul_gelu_forward", "matmul_residual_forward")
# the KV cache's: while they are stubs, generation recomputes every step instead (generation.decoding)
KV_CACHE_FUNCTIONS = ("encoder_at_positions_forward", "kv_cache_append_forward", "decode_attention_forward")
# a later milestone's: not every kit has them
OPTIONAL_FUNCTIONS: tuple[str, ...] = ("flash_attention_forward", "local_attention_forward", "rotary_forward",
                                       *FUSED_DECODE_FUNCTIONS)
MODEL_FUNCTIONS: tuple[str, ...] = tuple(name for name in vars(ForwardOps)
                                         if name.endswith("_forward") and name not in OPTIONAL_FUNCTIONS)


@functools.cache  # inspect.signature takes tens of microseconds: a replayed call asks for its names every time
def parameters(function: str) -> tuple[str, ...]:
    """A host function's argument names in call order, from its protocol."""
    protocol = next(protocol for protocol in PROTOCOLS if function in vars(protocol))
    return tuple(inspect.signature(getattr(protocol, function)).parameters)[1:]  # all but self
