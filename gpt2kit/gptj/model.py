"""GPT-J on the kit's kernels, readable top to bottom.

    model = GPTJ.from_pretrained("random:gpt-j-6b")   # or a transformers directory, or "gpt-j-6b"
    logits = model(tokens)                            # tokens (B, T) int32 -> logits (B, T, 50400)

The forward pass is transformers' GPTJForCausalLM:

    x = wte[token]                                              no learned positions
    for each layer:
        h = ln1(x)                                              one layernorm feeds both branches
        q, k, v = qkv(h)                                        no bias
        q, k = rotary(q, k, position)                           the position enters here (kernels/rotary.py)
        x = x + attproj(attention(q, k, v)) + fcproj(gelu(fc(h)))   attention and MLP side by side
    logits = lnf(x) @ lm_head^T + lm_head_bias                  the LM head is its own matrix

Every step is a host function GPT-2 uses already, except the rotary embedding. The
embedding is GPT-2's encoder with a position table of zeros, so that a student's
encoder (and its decode twin, which reads positions from the device) serves both
models: 32 MB of zeros, against 24 GB of weights. Head size 256 goes through the
same attention kernels as GPT-2's 64.

Positions reach the rotary kernel from the device: the KV cache's lengths, or zeros
for a plain forward pass. So a decode step is the same launches at every length, and
the decoders and executors of gpt2kit/generation/ capture and replay it as they do GPT-2's.
With the fused matmuls (milestone 3's menu) a decode step runs ln1 inside both the
qkv and the fc matmuls, and the two residual adds inside the two projections.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from gpt2kit.gptj.config import GPTJConfig
from gpt2kit.model_runtime.backends import Backend, BackendError
from gpt2kit.model_runtime.causal_lm import CausalLM, KVCache

if TYPE_CHECKING:
    from gpt2kit.model_runtime.checkpoint_files import Parameters

# name -> shape; L layers, B rows, T tokens, C channels, NH heads, Vp the LM head's rows
ACTIVATION_SHAPES = {
    "encoded": "B T C",
    "ln1": "L B T C", "ln1_mean": "L B T", "ln1_rstd": "L B T",
    "qkv": "L B T 3C", "qkv_turned": "L B T 3C", "atty": "L B T C", "att": "L B NH T T", "lse": "L B NH T",
    "attproj": "L B T C", "fch": "L B T 4C", "fch_gelu": "L B T 4C", "fcproj": "L B T C",
    "residual2": "L B T C", "residual3": "L B T C",  # x + attention, then + MLP: the layer's output
    "lnf": "B T C", "lnf_mean": "B T", "lnf_rstd": "B T",
    "logits": "B T Vp",
    "qkvr": "3BTC",  # attention's scratch, shared by the layers
}
GLOBAL_WEIGHTS = ("wte", "lnfw", "lnfb", "lm_headw", "lm_headb")  # the others are stacked over layers


class GPTJ(CausalLM):
    ACTIVATION_SHAPES = ACTIVATION_SHAPES

    def __init__(self, config: GPTJConfig, params: Parameters, backend: str | Backend = "kernels",
                 kernels: str | None = None):
        super().__init__(config, backend, kernels)
        self.check_backend(self.backend)
        from gpt2kit.reference.numerics import rotary_sin_cos

        self.weights = self.upload_weights(params, GLOBAL_WEIGHTS)
        self.weights.wpe = self.backend.upload(np.zeros((config.max_T, config.channels), np.float32))
        self.weights.sin_cos = self.backend.upload(rotary_sin_cos(config.max_T, config.rotary_dim))
        self._zero_positions: dict[int, object] = {}  # B -> zeros (B,) int32: a plain pass starts at position 0

    @classmethod
    def check_backend(cls, backend: Backend) -> None:
        if getattr(backend.ops, "rotary_forward", None) is None:
            raise BackendError(f"GPT-J needs rotary_forward (kernels/rotary.py, milestone 3), which the "
                               f"{backend.name} backend does not have")

    @staticmethod
    def load_checkpoint(source, progress=None) -> tuple:
        """A transformers GPT-J directory, a hub name (gpt-j-6b) or "random:gpt-j-6b"."""
        from gpt2kit.gptj import checkpoint  # here: `import gpt2kit.gptj` leaves it to its command line

        return checkpoint.load(source, progress)

    # ------------------------------------------------------------------ forward

    def transformer(self, a, B: int, T: int, cache: KVCache | None, decoding: bool) -> None:
        """Every layer, the final layernorm and the LM head, from a.encoded to a.logits."""
        C, NH, L, rotary_dim = self.config.channels, self.config.num_heads, self.config.num_layers, self.config.rotary_dim
        w, ops = self.weights, self.backend.ops
        fused = decoding and self.backend.fused_decode  # a few rows: the fused matrix-vector kernels (milestone 3)
        positions = cache.lengths if cache is not None else self._zeros(B)  # each row's first position
        residual = a.encoded
        for l in range(L):
            with self.profile_range(f"layer {l}"):
                run = self.runner(l)
                if fused:  # ln1 folded into the qkv matmul (and below into the fc matmul)
                    run("ln1+qkv", ops.layernorm_matmul_forward, a.qkv[l], residual, w.ln1w[l], w.ln1b[l], w.qkvw[l],
                        None, B, T, C, 3 * C)
                else:
                    run("ln1", ops.layernorm_forward, a.ln1[l], a.ln1_mean[l], a.ln1_rstd[l], residual, w.ln1w[l],
                        w.ln1b[l], B, T, C)
                    run("qkv", ops.matmul_forward, a.qkv[l], a.ln1[l], w.qkvw[l], None, B, T, C, 3 * C)
                run("rotary", ops.rotary_forward, a.qkv_turned[l], a.qkv[l], positions, w.sin_cos, B, T, C, NH,
                    rotary_dim)
                self.attend(run, l, a, a.qkv_turned[l], cache, B, T, decoding)
                if fused:  # the residual adds folded into the projections
                    run("attproj+residual2", ops.matmul_residual_forward, a.residual2[l], a.atty[l], w.attprojw[l],
                        None, residual, B, T, C, C)
                    run("ln1+fc+gelu", ops.layernorm_matmul_gelu_forward, a.fch_gelu[l], residual, w.ln1w[l],
                        w.ln1b[l], w.fcw[l], w.fcb[l], B, T, C, 4 * C)
                    run("fcproj+residual3", ops.matmul_residual_forward, a.residual3[l], a.fch_gelu[l],
                        w.fcprojw[l], w.fcprojb[l], a.residual2[l], B, T, 4 * C, C)
                else:
                    run("attproj", ops.matmul_forward, a.attproj[l], a.atty[l], w.attprojw[l], None, B, T, C, C)
                    run("fc", ops.matmul_forward, a.fch[l], a.ln1[l], w.fcw[l], w.fcb[l], B, T, C, 4 * C)
                    run("gelu", ops.gelu_forward, a.fch_gelu[l], a.fch[l], B * T * 4 * C)
                    run("fcproj", ops.matmul_forward, a.fcproj[l], a.fch_gelu[l], w.fcprojw[l], w.fcprojb[l], B, T,
                        4 * C, C)
                    run("residual2", ops.residual_forward, a.residual2[l], residual, a.attproj[l], B * T * C)
                    run("residual3", ops.residual_forward, a.residual3[l], a.residual2[l], a.fcproj[l], B * T * C)
                residual = a.residual3[l]
        self.final_layernorm_and_head(a, residual, B, T, fused, w.lm_headw, w.lm_headb)

    # ------------------------------------------------------------------ helpers

    def _zeros(self, B: int):
        if B not in self._zero_positions:
            self._zero_positions[B] = self.backend.xp.zeros(B, np.int32)
        return self._zero_positions[B]
