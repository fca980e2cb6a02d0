"""What every decoder-only model family of the kit shares: its KV cache, its activations,
the checks on the tokens it is given, and the order of a forward pass and of a decode step.

A family (gpt2.model.GPT2, gptj.model.GPTJ) subclasses CausalLM and writes its own
forward pass as a list of host-function calls,

    transformer(a, B, T, cache, decoding)    a.encoded -> every layer -> a.logits

after the embedding (embed and embed_at_positions: the token and position tables'
sum, prefill and decode step), names its activations in ACTIVATION_SHAPES, and says
how its checkpoints load (load_checkpoint). The rest, here, is what decoders and
executors (gpt2kit/generation/) rely on, whatever the family:

    logits = model.forward(tokens, cache, activations)    prefill: (B, T) -> (B, T, V); fills an empty cache
    logits = model.decode_step(tokens, cache, activations) one token per row -> (B, V)
    model.decode_launches(tokens, cache, a)               the same step's launches only (a CUDA graph captures them)
    model.new_cache(B), model.new_activations(B, T)      buffers owned by the caller
    model.config.max_T, .vocab_size, .padded_vocab_size, .end_of_text

Activations are allocated for a (B, T) and kept for every layer, like the course's
gpt2.cuh, so a step-by-step check can look at any of them. Per-layer tensors are
lists of views made once (slicing an array costs microseconds of Python per call,
which adds up over a hundred launches per generated token). A plain call keeps one
set per model; a decoder (generation.decoding) owns its own, so that a CUDA graph it
captured keeps writing into memory that nothing else holds.

Every host-function call names its step (ln1, qkv, attention, ...). `observer`, when
set, runs each call instead of the model, with its step and layer: the NVTX ranges of
the profiler and the step-by-step check (gpt2.step_check) are both observers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import types
from typing import Callable, Protocol

import numpy as np

from gpt2kit.kernel_runtime import KitError
from gpt2kit.model_runtime.backends import Backend, make_backend


class TokenError(KitError):
    """Token ids the model cannot take: wrong shape, out of range, or too many."""


class Observer(Protocol):
    def __call__(self, step: str, layer: int | None, kernel: Callable, args: tuple) -> None:
        """Run (or watch) `kernel(*args)`, the call of forward-pass `step` in `layer` (None: outside the layers)."""


def nvtx_observer(step: str, layer: int | None, kernel: Callable, args: tuple) -> None:
    """Each call inside an NVTX range named after its step and host function, for nsys and ncu."""
    from cupyx.profiler import time_range

    with time_range(f"{step} ({kernel.__name__})"):
        kernel(*args)


def activation_shape(spec: str, sizes: dict) -> tuple[int, ...]:
    """"L B T 3C" -> (L, B, T, 3 * C); a token like "3BTC" multiplies its letters' sizes."""
    dims = []
    for token in spec.split():
        factor = int(token[0]) if token[0].isdigit() else 1
        names = token[1:] if token[0].isdigit() else token
        value = sizes[names] if names in sizes else int(np.prod([sizes[n] for n in names]))
        dims.append(factor * value)
    return tuple(dims)


@dataclasses.dataclass
class KVCache:
    """Keys and values of the tokens so far: k[l] and v[l] (B, NH, slots, HS) for layer l.

    Token p of a row lives in slot p % slots. A model's cache has a slot per position
    of its context; a local model's (attention over a window of W) has W slots, a
    ring: the tokens that have left every window are overwritten.

    lengths (B,) int32 lives on the backend's device and is what the kernels read;
    `length` is the host's count for checks: the longest row's length. `context` is
    how many tokens a row may hold in all (the model's positions). A model's own cache
    keeps every layer in one array, `stacked` (k, v), each (L, B, NH, slots, HS), so
    that one launch can reach all of them (kernels/kv_cache_reorder.py); a cache of
    some rows' views has none."""

    k: list
    v: list
    lengths: object
    context: int
    length: int = 0
    stacked: tuple | None = None

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


class CausalLM:
    """A decoder-only model on a backend: the family's subclass writes its forward pass (see the module docstring)."""

    ACTIVATION_SHAPES: dict[str, str] = {}  # name -> shape over L B T C NH Vp and the family's own letters

    def __init__(self, config, backend: str | Backend = "kernels", kernels: str | None = None):
        self.config = config
        self.backend = backend if isinstance(backend, Backend) else make_backend(backend, kernels)
        self.observer: Observer | None = None  # runs every host-function call when set
        self.nvtx = False  # True: NVTX ranges around the pass and each layer (nvtx_observer: each call)
        self._activations_for = None  # ((B, T, activation_key()), activations) of plain calls
        # flash attention (milestone 3) keeps no T x T probabilities: a.att is then not allocated
        self.flash_attention = self.backend.flash_attention
        self.window: int | None = None  # a local model's (GPT-2's window=W): attention to the W latest tokens

    def __call__(self, tokens):
        return self.forward(tokens)

    @classmethod
    def check_backend(cls, backend: Backend) -> None:
        """BackendError, before any weights load, when `backend` lacks a host function this family calls."""

    @classmethod
    def from_pretrained(cls, source, backend: str = "kernels", kernels: str | None = None):
        """The model of `source`, as the family's load_checkpoint reads it."""
        return cls(*cls.load_checkpoint(source), backend, kernels)

    # ------------------------------------------------------------------ what a family writes

    @staticmethod
    def load_checkpoint(source, progress=None) -> tuple:
        """(config, parameters) of a source, progress(line) told each tenth: the family's checkpoint module's load."""
        raise NotImplementedError

    def embed(self, a, tokens, B: int, T: int) -> None:
        """The token and position tables' sum (GPT-2's encoder; a family without positions gives zeros)."""
        self.runner(None)("encoder", self.backend.ops.encoder_forward, a.encoded, tokens, self.weights.wte,
                          self.weights.wpe, B, T, self.config.channels)

    def embed_at_positions(self, a, tokens, lengths, B: int) -> None:
        self.runner(None)("encoder", self.backend.ops.encoder_at_positions_forward, a.encoded, tokens, lengths,
                          self.weights.wte, self.weights.wpe, B, 1, self.config.channels)

    def transformer(self, a, B: int, T: int, cache: KVCache | None, decoding: bool) -> None:
        raise NotImplementedError

    def activation_sizes(self, B: int, T: int) -> dict[str, int]:
        """The letters of ACTIVATION_SHAPES for B rows of T tokens."""
        c = self.config
        return dict(L=c.num_layers, B=B, T=T, C=c.channels, NH=c.num_heads, Vp=c.padded_vocab_size)

    def unused_activations(self) -> tuple[str, ...]:
        """Activations this model, as configured, never writes (so never allocates): with flash or local
        attention, the three-kernel attention's probabilities and scratch."""
        return ("att", "qkvr") if self.flash_attention or self.window else ()

    def activation_key(self) -> tuple:
        """What, besides (B, T), decides the activations a plain call needs."""
        return (self.flash_attention, self.window)

    def cache_slots(self) -> int:
        """Slots per row of a new KV cache: a slot per position, or for a local model a ring of `window`."""
        return min(self.window, self.config.max_T) if self.window else self.config.max_T

    # ------------------------------------------------------------------ steps every family calls

    def upload_weights(self, params, global_names: tuple[str, ...]) -> types.SimpleNamespace:
        """`params` on the backend, each whole in self.parameters; returned as the forward pass reads them:
        those of `global_names` whole, the others (stacked over layers) as a list of each layer's view, made once."""
        self.parameters = {name: self.backend.upload(array) for name, array in params.items()}
        return layer_views(self.parameters, global_names)

    def attend(self, run, l: int, a, qkv, cache: KVCache | None, B: int, T: int, decoding: bool) -> None:
        """Layer l's attention into a.atty[l], from its packed q|k|v rows `qkv`: a decode step against the cache
        (which stores the step's key and value itself); else the keys and values stored first when there is a
        cache, then local, flash or three-kernel attention."""
        C, NH, ops = self.config.channels, self.config.num_heads, self.backend.ops
        if decoding:
            run("attention", ops.decode_attention_forward, a.atty[l], qkv, cache.k[l], cache.v[l], cache.lengths, B,
                C, NH, cache.slots)
            return
        if cache is not None:
            run("kv_append", ops.kv_cache_append_forward, cache.k[l], cache.v[l], qkv, cache.lengths, B, T, C, NH,
                cache.slots)
        if self.window:
            run("attention", ops.local_attention_forward, a.atty[l], a.lse[l], qkv, B, T, C, NH, self.window)
        elif self.flash_attention:
            run("attention", ops.flash_attention_forward, a.atty[l], a.lse[l], qkv, B, T, C, NH)
        else:
            run("attention", ops.attention_forward, a.atty[l], a.qkvr, a.att[l], qkv, B, T, C, NH)

    def final_layernorm_and_head(self, a, residual, B: int, T: int, fused: bool, weight, bias) -> None:
        """a.logits = lnf(residual) @ weight^T + bias (bias None: none), fused into one kernel when `fused`."""
        C, Vp, w, ops = self.config.channels, self.config.padded_vocab_size, self.weights, self.backend.ops
        run = self.runner(None)
        if fused:
            run("lnf+lm_head", ops.layernorm_matmul_forward, a.logits, residual, w.lnfw, w.lnfb, weight, bias, B, T,
                C, Vp)
        else:
            run("lnf", ops.layernorm_forward, a.lnf, a.lnf_mean, a.lnf_rstd, residual, w.lnfw, w.lnfb, B, T, C)
            run("lm_head", ops.matmul_forward, a.logits, a.lnf, weight, bias, B, T, C, Vp)

    # ------------------------------------------------------------------ forward

    def forward(self, tokens, cache: KVCache | None = None, activations=None):
        """Logits (B, T, V) for tokens (B, T). With an empty cache, also fill it (prefill).
        `activations` (from new_activations(B, T)): the caller's own, else the model's."""
        tokens = self.check_tokens(tokens, 2)
        B, T = tokens.shape
        if cache is not None and cache.length != 0:
            raise ValueError("forward() fills an empty cache; continue a filled one with decode_step()")
        a = activations if activations is not None else self._activations(B, T)
        self.forward_launches(tokens, a, cache)
        if cache is not None:
            cache.advance(T)
        return a.logits[:, :, :self.config.vocab_size]

    def forward_launches(self, tokens, a, cache: KVCache | None = None) -> None:
        """The launches of a forward pass into activations `a`, tokens (B, T) int32 already on the device and
        checked: what a training step's CUDA graph captures."""
        B, T = tokens.shape
        self.embed(a, tokens, B, T)
        self.transformer(a, B, T, cache, decoding=False)

    def decode_step(self, tokens, cache: KVCache, activations=None):
        """Logits (B, V) for one new token per row (tokens (B,)), attending to the cache."""
        tokens = self.check_tokens(tokens, 1)
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
        captured once as a CUDA graph, serve every step (generation.decoding)."""
        B = tokens.shape[0]
        self.embed_at_positions(a, tokens, cache.lengths, B)
        self.transformer(a, B, 1, cache, decoding=True)
        cache.lengths += 1
        return a.logits[:, 0, :self.config.vocab_size]

    # ------------------------------------------------------------------ buffers

    def new_cache(self, batch_size: int) -> KVCache:
        """An empty cache of cache_slots() slots per row."""
        c = self.config
        shape = (c.num_layers, batch_size, c.num_heads, self.cache_slots(), c.channels // c.num_heads)
        xp, dtype = self.backend.xp, self.backend.activation_dtype
        k, v = xp.zeros(shape, dtype), xp.zeros(shape, dtype)
        return KVCache(list(k), list(v), xp.zeros(batch_size, np.int32), context=c.max_T, stacked=(k, v))

    def activations(self):
        """The activations of the last plain call (a namespace of arrays named as in ACTIVATION_SHAPES)."""
        return self._activations_for[1] if self._activations_for else None

    def new_activations(self, B: int, T: int, names: tuple[str, ...] | None = None):
        """A fresh set of activations for B rows of T tokens, owned by the caller (only `names`, when given:
        the ones whose gradients a training step keeps)."""
        sizes, unused = self.activation_sizes(B, T), self.unused_activations()
        arrays = {name: self.backend.empty(*activation_shape(spec, sizes))
                  for name, spec in self.ACTIVATION_SHAPES.items()
                  if name not in unused and (names is None or name in names)}
        return types.SimpleNamespace(**{name: list(array) if self.ACTIVATION_SHAPES[name].startswith("L ") else array
                                        for name, array in arrays.items()})

    def _activations(self, B: int, T: int):
        key = (B, T, self.activation_key())
        if self._activations_for is None or self._activations_for[0] != key:
            self._activations_for = (key, self.new_activations(B, T))
        return self._activations_for[1]

    # ------------------------------------------------------------------ helpers

    def runner(self, layer: int | None) -> Callable:
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

    def check_tokens(self, tokens, ndim: int):
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


def layer_views(arrays: dict, global_names: tuple[str, ...]) -> types.SimpleNamespace:
    """`arrays` by name: those of `global_names` as they are, the others (stacked over layers) as a list of
    each layer's view."""
    return types.SimpleNamespace(**{name: array if name in global_names else list(array)
                                    for name, array in arrays.items()})


def zero_activations(activations: types.SimpleNamespace, names) -> None:
    """Each named activation of `activations` filled with 0: every per-layer view of a list, or the array."""
    for name in names:
        value = getattr(activations, name)
        for array in value if isinstance(value, list) else [value]:
            array.fill(0)


def _call(step: str, kernel: Callable, *args) -> None:
    kernel(*args)
