"""GPT-2 on the kit's kernels, readable top to bottom.

    model = GPT2.from_pretrained("gpt2_124M.bin")     # or an HF directory, "gpt2", "random"
    logits = model(tokens)                            # tokens (B, T) int32 -> logits (B, T, V)

The forward pass is GPT-2's, as llm.c lays it out:

    x = wte[token] + wpe[position]                              encoder
    for each layer:
        x = x + attproj(attention(qkv(ln1(x))))                 causal self-attention
        x = x + fcproj(gelu(fc(ln2(x))))                        MLP
    logits = lnf(x) @ wte^T                                     tied LM head

Training runs it backwards (`backward`, at the end): each call's backward host function
in reverse order, from the loss's gradient at the logits to every parameter's
gradient; training.step.TrainingStep wraps it with the loss and the optimizer.

What every model family shares (the KV cache, activations, token checks, the order
of a forward pass and of a decode step, observers) is model_runtime.causal_lm's
CausalLM; this file is GPT-2's own forward pass.

Generation uses a KV cache: `forward(tokens, cache)` runs the prompt and stores
every layer's keys and values; `decode_step(token, cache)` then runs one new token
per row against them, with positions read from the cache's device-side lengths
(which is what lets a decoder capture a step once as a CUDA graph and replay it).

With flash attention (the attention_flash variant, milestone 3) the attention step
calls flash_attention_forward, which keeps each softmax's log-sum-exp (a.lse) instead
of the T x T probabilities (a.att, not allocated then). A local model (`window=W`)
calls local_attention_forward, and its KV cache is a ring of W slots per layer.
With the fused matmuls (milestone 3's menu), a decode step runs six kernels a layer
instead of eleven: ln1 inside the qkv matmul, ln2 and GELU inside the fc matmul, the
residual adds inside the two projections (kernels/fused_gemv.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpt2kit.gpt2.config import GPT2Config
from gpt2kit.model_runtime.backends import Backend, BackendError
from gpt2kit.model_runtime.causal_lm import CausalLM, KVCache

if TYPE_CHECKING:
    from gpt2kit.gpt2.checkpoint import Parameters

# name -> shape; L layers, B rows, T tokens, C channels, NH heads, Vp padded vocabulary
ACTIVATION_SHAPES = {
    "encoded": "B T C",
    "ln1": "L B T C", "ln1_mean": "L B T", "ln1_rstd": "L B T",
    "qkv": "L B T 3C", "atty": "L B T C", "att": "L B NH T T", "lse": "L B NH T",
    "attproj": "L B T C", "residual2": "L B T C",
    "ln2": "L B T C", "ln2_mean": "L B T", "ln2_rstd": "L B T",
    "fch": "L B T 4C", "fch_gelu": "L B T 4C", "fcproj": "L B T C", "residual3": "L B T C",
    "lnf": "B T C", "lnf_mean": "B T", "lnf_rstd": "B T",
    "logits": "B T Vp",
    "qkvr": "3BTC",  # attention's scratch, shared by the layers
}

GLOBAL_WEIGHTS = ("wte", "wpe", "lnfw", "lnfb")  # the others are stacked over layers


class GPT2(CausalLM):
    ACTIVATION_SHAPES = ACTIVATION_SHAPES

    def __init__(self, config: GPT2Config, params: Parameters, backend: str | Backend = "kernels",
                 kernels: str | None = None, window: int | None = None):
        super().__init__(config, backend, kernels)
        # a local model: each token attends to its `window` most recent tokens (itself included)
        self.window = window
        if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
            raise ValueError(f"window must be a positive number of tokens, got {window!r}")
        if window is not None and getattr(self.backend.ops, "local_attention_forward", None) is None:
            raise BackendError(f"a local model needs local_attention_forward (kernels/flash_attention.py, "
                               f"milestone 3), which the {self.backend.name} backend does not have")
        self.weights = self.upload_weights(params, GLOBAL_WEIGHTS)

    @staticmethod
    def load_checkpoint(source, progress=None) -> tuple:
        """An llm.c .bin file, an HF directory, a hub name (gpt2, gpt2-medium, ...) or "random"."""
        from gpt2kit.gpt2 import checkpoint  # here: `import gpt2kit.gpt2` leaves it to its command line

        return checkpoint.load(source, progress)

    # ------------------------------------------------------------------ forward

    def transformer(self, a, B: int, T: int, cache: KVCache | None, decoding: bool) -> None:
        """Every layer, the final layernorm and the LM head, from a.encoded to a.logits."""
        C, L, w, ops = self.config.channels, self.config.num_layers, self.weights, self.backend.ops
        fused = decoding and self.backend.fused_decode  # a few rows: the fused matrix-vector kernels (milestone 3)
        residual = a.encoded
        for l in range(L):
            with self.profile_range(f"layer {l}"):
                run = self.runner(l)
                if fused:  # ln1 folded into the qkv matmul
                    run("ln1+qkv", ops.layernorm_matmul_forward, a.qkv[l], residual, w.ln1w[l], w.ln1b[l], w.qkvw[l],
                        w.qkvb[l], B, T, C, 3 * C)
                else:
                    run("ln1", ops.layernorm_forward, a.ln1[l], a.ln1_mean[l], a.ln1_rstd[l], residual, w.ln1w[l],
                        w.ln1b[l], B, T, C)
                    run("qkv", ops.matmul_forward, a.qkv[l], a.ln1[l], w.qkvw[l], w.qkvb[l], B, T, C, 3 * C)
                self.attend(run, l, a, a.qkv[l], cache, B, T, decoding)
                if fused:  # the residual adds folded into the projections, ln2 and GELU into the fc matmul
                    run("attproj+residual2", ops.matmul_residual_forward, a.residual2[l], a.atty[l], w.attprojw[l],
                        w.attprojb[l], residual, B, T, C, C)
                    run("ln2+fc+gelu", ops.layernorm_matmul_gelu_forward, a.fch_gelu[l], a.residual2[l], w.ln2w[l],
                        w.ln2b[l], w.fcw[l], w.fcb[l], B, T, C, 4 * C)
                    run("fcproj+residual3", ops.matmul_residual_forward, a.residual3[l], a.fch_gelu[l],
                        w.fcprojw[l], w.fcprojb[l], a.residual2[l], B, T, 4 * C, C)
                else:
                    run("attproj", ops.matmul_forward, a.attproj[l], a.atty[l], w.attprojw[l], w.attprojb[l], B, T,
                        C, C)
                    run("residual2", ops.residual_forward, a.residual2[l], residual, a.attproj[l], B * T * C)
                    run("ln2", ops.layernorm_forward, a.ln2[l], a.ln2_mean[l], a.ln2_rstd[l], a.residual2[l],
                        w.ln2w[l], w.ln2b[l], B, T, C)
                    run("fc", ops.matmul_forward, a.fch[l], a.ln2[l], w.fcw[l], w.fcb[l], B, T, C, 4 * C)
                    run("gelu", ops.gelu_forward, a.fch_gelu[l], a.fch[l], B * T * 4 * C)
                    run("fcproj", ops.matmul_forward, a.fcproj[l], a.fch_gelu[l], w.fcprojw[l], w.fcprojb[l], B, T,
                        4 * C, C)
                    run("residual3", ops.residual_forward, a.residual3[l], a.residual2[l], a.fcproj[l], B * T * C)
                residual = a.residual3[l]
        self.final_layernorm_and_head(a, residual, B, T, fused, w.wte, None)  # the LM head is the token table

    # ------------------------------------------------------------------ backward (training)

    # the activations whose gradients the backward pass uses, and those of them that gather from two branches
    # (the residual stream's, and the residual adds' operands): a training step zeroes these before each pass
    GRADIENT_ACTIVATIONS = ("encoded", "ln1", "qkv", "atty", "attproj", "residual2", "ln2", "fch", "fch_gelu",
                            "fcproj", "residual3", "lnf", "logits")
    ACCUMULATED_GRADIENTS = ("encoded", "attproj", "residual2", "fcproj", "residual3")

    def new_activation_grads(self, B: int, T: int):
        """The backward pass's buffers for B rows of T tokens: the gradients of GRADIENT_ACTIVATIONS, named as the
        activations, and two scratches every layer shares: layernorm_backward's (scratch) and attention_backward's
        (dscores, one layer's T x T score gradients)."""
        d = self.new_activations(B, T, self.GRADIENT_ACTIVATIONS)
        d.scratch = self.backend.empty(B, T, 2 * self.config.channels)
        d.dscores = self.backend.empty(B, self.config.num_heads, T, T)
        return d

    def backward(self, a, d, dw, tokens, B: int, T: int) -> None:
        """Every parameter's gradient added into dw (laid out as self.weights), from d.logits, the gradient
        of the loss at the logits of the forward pass that left its activations in `a`. d holds the
        activations' gradients (new_activation_grads); the ACCUMULATED_GRADIENTS ones start at zero. The forward
        pass in reverse, call by call (llm.c's gpt2_backward)."""
        c, w, ops, run = self.config, self.weights, self.backend.ops, self.runner(None)
        C, L, NH, Vp = c.channels, c.num_layers, c.num_heads, c.padded_vocab_size
        run("lm_head", ops.matmul_backward, d.lnf, dw.wte, None, d.logits, a.lnf, w.wte, B, T, C, Vp)
        run("lnf", ops.layernorm_backward, d.residual3[L - 1], dw.lnfw, dw.lnfb, d.scratch, d.lnf, a.residual3[L - 1],
            w.lnfw, a.lnf_mean, a.lnf_rstd, B, T, C)
        for l in reversed(range(L)):
            run = self.runner(l)
            residual, dresidual = (a.encoded, d.encoded) if l == 0 else (a.residual3[l - 1], d.residual3[l - 1])
            run("residual3", ops.residual_backward, d.residual2[l], d.fcproj[l], d.residual3[l], B * T * C)
            run("fcproj", ops.matmul_backward, d.fch_gelu[l], dw.fcprojw[l], dw.fcprojb[l], d.fcproj[l],
                a.fch_gelu[l], w.fcprojw[l], B, T, 4 * C, C)
            run("gelu", ops.gelu_backward, d.fch[l], a.fch[l], d.fch_gelu[l], B * T * 4 * C)
            run("fc", ops.matmul_backward, d.ln2[l], dw.fcw[l], dw.fcb[l], d.fch[l], a.ln2[l], w.fcw[l], B, T, C,
                4 * C)
            run("ln2", ops.layernorm_backward, d.residual2[l], dw.ln2w[l], dw.ln2b[l], d.scratch, d.ln2[l],
                a.residual2[l], w.ln2w[l], a.ln2_mean[l], a.ln2_rstd[l], B, T, C)
            run("residual2", ops.residual_backward, dresidual, d.attproj[l], d.residual2[l], B * T * C)
            run("attproj", ops.matmul_backward, d.atty[l], dw.attprojw[l], dw.attprojb[l], d.attproj[l], a.atty[l],
                w.attprojw[l], B, T, C, C)
            run("attention", ops.attention_backward, d.qkv[l], d.dscores, d.atty[l], a.qkv[l], a.att[l], B, T, C, NH)
            run("qkv", ops.matmul_backward, d.ln1[l], dw.qkvw[l], dw.qkvb[l], d.qkv[l], a.ln1[l], w.qkvw[l], B, T,
                C, 3 * C)
            run("ln1", ops.layernorm_backward, dresidual, dw.ln1w[l], dw.ln1b[l], d.scratch, d.ln1[l], residual,
                w.ln1w[l], a.ln1_mean[l], a.ln1_rstd[l], B, T, C)
        self.runner(None)("encoder", ops.encoder_backward, dw.wte, dw.wpe, d.encoded, tokens, B, T, C)
