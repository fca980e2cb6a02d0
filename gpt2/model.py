"""GPT-2 on the kit's kernels, readable top to bottom.

    model = GPT2.from_pretrained("gpt2_124M.bin")     # or an HF directory, "gpt2", "random"
    logits = model(tokens)                            # tokens (B, T) int32 -> logits (B, T, V)

The forward pass is GPT-2's, as llm.c lays it out:

    x = wte[token] + wpe[position]                              encoder
    for each layer:
        x = x + attproj(attention(qkv(ln1(x))))                 causal self-attention
        x = x + fcproj(gelu(fc(ln2(x))))                        MLP
    logits = lnf(x) @ wte^T                                     tied LM head

Activations are allocated for a (B, T) and kept for every layer, like the course's
gpt2.cuh, so a step-by-step check can look at any of them. Per-layer tensors are
lists of views made once (slicing an array costs microseconds of Python per call,
which adds up over a hundred launches per generated token). A plain call keeps one
set per model; a decoder (gpt2.decoding) owns its own, so that a CUDA graph it
captured keeps writing into memory that nothing else holds.

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

Every host-function call names its step (ln1, qkv, attention, ...). `observer`, when
set, runs each call instead of the model, with its step and layer: the NVTX ranges of
the profiler and the step-by-step check (gpt2.step_check) are both observers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import types
from typing import TYPE_CHECKING, Callable, Protocol

import numpy as np

from gpt2.backends import Backend, BackendError, make_backend
from gpt2.config import GPT2Config
from kernel_runtime import KitError

if TYPE_CHECKING:
    from gpt2.checkpoint import Parameters

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


UNUSED_BY_FLASH = ("att", "qkvr")

GLOBAL_WEIGHTS = ("wte", "wpe", "lnfw", "lnfb")  # the others are stacked over layers


class Observer(Protocol):
    def __call__(self, step: str, layer: int | None, kernel: Callable, args: tuple) -> None:
        """Run (or watch) `kernel(*args)`, the call of forward-pass `step` in `layer` (None: outside the layers)."""


def _shape(spec: str, sizes: dict) -> tuple[int, ...]:
    """"L B T 3C" -> (L, B, T, 3 * C); a token like "3BTC" multiplies its letters' sizes."""
    dims = []
    for token in spec.split():
        factor = int(token[0]) if token[0].isdigit() else 1
        names = token[1:] if token[0].isdigit() else token
        value = sizes[names] if names in sizes else int(np.prod([sizes[n] for n in names]))
        dims.append(factor * value)
    return tuple(dims)


def nvtx_observer(step: str, layer: int | None, kernel: Callable, args: tuple) -> None:
    """Each call inside an NVTX range named after its step and host function, for nsys and ncu."""
    from cupyx.profiler import time_range

    with time_range(f"{step} ({kernel.__name__})"):
        kernel(*args)


class TokenError(KitError):
    """Token ids the model cannot take: wrong shape, out of range, or too many."""


@dataclasses.dataclass
class KVCache:
    """Keys and values of the tokens so far: k[l] and v[l] (B, NH, slots, HS) for layer l.

    Token p of a row lives in slot p % slots. A model's cache has a slot per position
    of its context; a local model's (attention over a window of W) has W slots, a
    ring: the tokens that have left every window are overwritten.

    lengths (B,) int32 lives on the backend's device and is what the kernels read;
    `length` is the host's count for checks: the longest row's length. `context` is
    how many tokens a row may hold in all (the model's positions)."""

    k: list
    v: list
    lengths: object
    context: int
    length: int = 0

    @property
    def slots(self) -> int:
        return self.k[0].shape[2]

    def check_room(self, count: int) -> None:
        """TokenError unless `count` more tokens fit in the context."""
        if self.length + count > self.context:
            raise TokenError(f"the KV cache is full: {self.length} tokens, the model's context is {self.context}")

    def rows(self, start: int, stop: int) -> "KVCache":
        """Rows start..stop of this cache as an empty cache of their own (views: what it stores lands here)."""
        return KVCache([k[start:stop] for k in self.k], [v[start:stop] for v in self.v], self.lengths[start:stop],
                       self.context)

    def clear(self) -> None:
        """Empty every row (what the cache stored stays, unread, until overwritten)."""
        self.lengths.fill(0)
        self.length = 0

    def advance(self, count: int) -> None:
        self.lengths += count  # a device-side add: nothing is copied to the host
        self.length += count


class GPT2:
    def __init__(self, config: GPT2Config, params: Parameters, backend: str | Backend = "kernels",
                 kernels: str | None = None, window: int | None = None):
        self.config = config
        self.backend = backend if isinstance(backend, Backend) else make_backend(backend, kernels)
        # a local model: each token attends to its `window` most recent tokens (itself included)
        self.window = window
        if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
            raise ValueError(f"window must be a positive number of tokens, got {window!r}")
        if window is not None and getattr(self.backend.ops, "local_attention_forward", None) is None:
            raise BackendError(f"a local model needs local_attention_forward (kernels/flash_attention.py, "
                               f"milestone 3), which the {self.backend.name} backend does not have")
        uploaded = {name: self.backend.upload(array) for name, array in params.items()}
        self.weights = types.SimpleNamespace(**{name: array if name in GLOBAL_WEIGHTS else list(array)
                                                for name, array in uploaded.items()})
        # flash attention (milestone 3) keeps no T x T probabilities: a.att is then not allocated
        self.flash_attention = self.backend.flash_attention
        self.observer: Observer | None = None  # runs every host-function call when set
        self.nvtx = False  # True: NVTX ranges around the pass and each layer (nvtx_observer: each call)
        self._activations_for = None  # ((B, T, flash_attention, window), activations) of plain calls

    @classmethod
    def from_pretrained(cls, source, backend: str = "kernels", kernels: str | None = None) -> "GPT2":
        """An llm.c .bin file, an HF directory, a hub name (gpt2, gpt2-medium, ...) or "random"."""
        # imported here, not at the top, so that `import gpt2` leaves it to `python -m gpt2.checkpoint`
        from gpt2 import checkpoint

        config, params = checkpoint.load(source)
        return cls(config, params, backend, kernels)

    def __call__(self, tokens):
        return self.forward(tokens)

    # ------------------------------------------------------------------ forward

    def forward(self, tokens, cache: KVCache | None = None, activations=None):
        """Logits (B, T, V) for tokens (B, T). With an empty cache, also fill it (prefill).
        `activations` (from new_activations(B, T)): the caller's own, else the model's."""
        tokens = self._check_tokens(tokens, 2)
        B, T = tokens.shape
        if cache is not None and cache.length != 0:
            raise ValueError("forward() fills an empty cache; continue a filled one with decode_step()")
        a = activations if activations is not None else self._activations(B, T)
        run, ops, w = self._runner(None), self.backend.ops, self.weights
        run("encoder", ops.encoder_forward, a.encoded, tokens, w.wte, w.wpe, B, T, self.config.channels)
        self._transformer(a, B, T, cache, decoding=False)
        if cache is not None:
            cache.advance(T)
        return a.logits[:, :, :self.config.vocab_size]

    def decode_step(self, tokens, cache: KVCache, activations=None):
        """Logits (B, V) for one new token per row (tokens (B,)), attending to the cache."""
        tokens = self._check_tokens(tokens, 1)
        cache.check_room(1)
        a = activations if activations is not None else self._activations(tokens.shape[0], 1)
        logits = self.decode_launches(tokens, cache, a)
        cache.length += 1
        return logits

    def decode_launches(self, tokens, cache: KVCache, a):
        """The launches of one decode step into activations `a` (B, 1), tokens (B,) int32
        already on the device.

        Nothing here depends on the host: positions and lengths come from
        cache.lengths, which the step advances on the device. So the same launches,
        captured once as a CUDA graph, serve every step (gpt2.decoding)."""
        B = tokens.shape[0]
        run, ops, w = self._runner(None), self.backend.ops, self.weights
        run("encoder", ops.encoder_at_positions_forward, a.encoded, tokens, cache.lengths, w.wte, w.wpe, B, 1,
            self.config.channels)
        self._transformer(a, B, 1, cache, decoding=True)
        cache.lengths += 1
        return a.logits[:, 0, :self.config.vocab_size]

    def _transformer(self, a, B: int, T: int, cache: KVCache | None, decoding: bool) -> None:
        """Every layer, the final layernorm and the LM head, from a.encoded to a.logits."""
        C, NH, L = self.config.channels, self.config.num_heads, self.config.num_layers
        Vp, w = self.config.padded_vocab_size, self.weights
        ops = self.backend.ops
        fused = decoding and self.backend.fused_decode  # a few rows: the fused matrix-vector kernels (milestone 3)
        residual = a.encoded
        for l in range(L):
            with self.profile_range(f"layer {l}"):
                run = self._runner(l)
                if fused:  # ln1 folded into the qkv matmul
                    run("ln1+qkv", ops.layernorm_matmul_forward, a.qkv[l], residual, w.ln1w[l], w.ln1b[l], w.qkvw[l],
                        w.qkvb[l], B, T, C, 3 * C)
                else:
                    run("ln1", ops.layernorm_forward, a.ln1[l], a.ln1_mean[l], a.ln1_rstd[l], residual, w.ln1w[l],
                        w.ln1b[l], B, T, C)
                    run("qkv", ops.matmul_forward, a.qkv[l], a.ln1[l], w.qkvw[l], w.qkvb[l], B, T, C, 3 * C)
                if cache is not None:
                    run("kv_append", ops.kv_cache_append_forward, cache.k[l], cache.v[l], a.qkv[l], cache.lengths,
                        B, T, C, NH, cache.slots)
                if decoding:
                    run("attention", ops.decode_attention_forward, a.atty[l], a.qkv[l], cache.k[l], cache.v[l],
                        cache.lengths, B, C, NH, cache.slots)
                elif self.window:
                    run("attention", ops.local_attention_forward, a.atty[l], a.lse[l], a.qkv[l], B, T, C, NH,
                        self.window)
                elif self.flash_attention:
                    run("attention", ops.flash_attention_forward, a.atty[l], a.lse[l], a.qkv[l], B, T, C, NH)
                else:
                    run("attention", ops.attention_forward, a.atty[l], a.qkvr, a.att[l], a.qkv[l], B, T, C, NH)
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
        run = self._runner(None)
        if fused:
            run("lnf+lm_head", ops.layernorm_matmul_forward, a.logits, residual, w.lnfw, w.lnfb, w.wte, None, B, T, C,
                Vp)
        else:
            run("lnf", ops.layernorm_forward, a.lnf, a.lnf_mean, a.lnf_rstd, residual, w.lnfw, w.lnfb, B, T, C)
            run("lm_head", ops.matmul_forward, a.logits, a.lnf, w.wte, None, B, T, C, Vp)

    # ------------------------------------------------------------------ helpers

    def new_cache(self, batch_size: int) -> KVCache:
        """An empty cache: a slot per position, or for a local model a ring of `window` slots."""
        c = self.config
        slots = min(self.window, c.max_T) if self.window else c.max_T
        shape = (c.num_layers, batch_size, c.num_heads, slots, c.channels // c.num_heads)
        xp, dtype = self.backend.xp, self.backend.activation_dtype
        return KVCache(list(xp.zeros(shape, dtype)), list(xp.zeros(shape, dtype)), xp.zeros(batch_size, np.int32),
                       context=c.max_T)

    def activations(self):
        """The activations of the last plain call (a namespace of arrays named as in ACTIVATION_SHAPES)."""
        return self._activations_for[1] if self._activations_for else None

    def new_activations(self, B: int, T: int):
        """A fresh set of activations for B rows of T tokens, owned by the caller."""
        c = self.config
        sizes = dict(L=c.num_layers, B=B, T=T, C=c.channels, NH=c.num_heads, Vp=c.padded_vocab_size)
        flash = self.flash_attention or self.window  # local attention is flash attention too
        arrays = {name: self.backend.empty(*_shape(spec, sizes)) for name, spec in ACTIVATION_SHAPES.items()
                  if not (name in UNUSED_BY_FLASH and flash)}
        return types.SimpleNamespace(**{name: list(array) if ACTIVATION_SHAPES[name].startswith("L ") else array
                                        for name, array in arrays.items()})

    def _activations(self, B: int, T: int):
        key = (B, T, self.flash_attention, self.window)
        if self._activations_for is None or self._activations_for[0] != key:
            self._activations_for = (key, self.new_activations(B, T))
        return self._activations_for[1]

    def _runner(self, layer: int | None) -> Callable:
        """run(step, kernel, *args): the call itself, or the observer's (see the module docstring)."""
        observer = self.observer or (nvtx_observer if self.nvtx else None)
        if observer is None:
            return _call
        return lambda step, kernel, *args: observer(step, layer, kernel, args)

    def profile_range(self, name: str):
        """An NVTX range on the profiler's timeline when self.nvtx is set."""
        if not self.nvtx:
            return contextlib.nullcontext()
        from cupyx.profiler import time_range
        return time_range(name)

    def _check_tokens(self, tokens, ndim: int):
        """Token ids as int32 on the backend, after checking shape, range and length on the host."""
        host = self.backend.to_host(tokens) if hasattr(tokens, "shape") else np.asarray(tokens)
        shape_name = "(B, T)" if ndim == 2 else "(B,)"
        if host.ndim != ndim or host.size == 0 or not np.issubdtype(host.dtype, np.integer):
            raise TokenError(f"tokens must be a non-empty {shape_name} array of integer ids, "
                             f"got shape {host.shape} of {host.dtype}")
        V, max_T = self.config.vocab_size, self.config.max_T
        bad = (host < 0) | (host >= V)
        if bad.any():
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            raise TokenError(f"token id {host[where]} at {where} is outside the vocabulary [0, {V})")
        if ndim == 2 and host.shape[1] > max_T:
            raise TokenError(f"{host.shape[1]} tokens exceed the model's context of {max_T}")
        return self.backend.upload(host.astype(np.int32))


def _call(step: str, kernel: Callable, *args) -> None:
    kernel(*args)


def check_sources(model: str, kernels: str | None = None) -> None:
    """Raise the one-line error of a --model or --kernels that names nothing there, reading nothing, so
    that a command names a wrong path before a missing GPU. A model source that names something (a file,
    a directory, a hub name, random) is judged when it loads."""
    from gpt2 import checkpoint
    from kernel_runtime.loader import kernels_directory

    if kernels is not None:
        kernels_directory(kernels)
    if (model.split(":", 1)[0] != "random" and checkpoint.hub_repo_id(model) is None
            and not os.path.exists(os.path.expanduser(model))):
        checkpoint.load(model)  # nothing to read there: raises load's own error
