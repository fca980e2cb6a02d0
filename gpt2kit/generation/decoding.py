"""Decoders: a prompt's prefill, then one step per new token, each owning what it runs on.

Four forms behind one interface:

    recompute         no cache: every step runs the whole sequence again (the yardstick)
    launched          a KV cache; each step's ~135 kernels launched one by one from Python
    graph             a KV cache; the step captured once as a CUDA graph and replayed
    graph_per_length  a KV cache; one graph per cache length (what PyTorch's graphs force)

    decoder = make_decoder(model, "graph", batch_size=1)
    logits = decoder.prefill(prompts)       # B rows of tokens -> each row's last logits (B, V), host
    logits = decoder.step(next_tokens)      # tokens (B,)   -> logits (B, V), host
    decoder.reorder(rows)                   # row i continues from row rows[i] (beam search)

The prompts of a batch may differ in length: each row then is prefilled alone into
its own rows of the cache, and each row's position and cache length live on the
device, so the steps after run all rows together.

A decoder owns its KV cache, its step's activations and its graph. A graph replays
the device addresses it was captured with, so every buffer it touches must live as
long as the graph and belong to nothing else: a forward pass of another shape on the
same model, or any other allocation, can then never land in them.

A captured step does not depend on the host: the new tokens are read from a device
buffer the decoder owns, and positions and cache lengths from the cache's
device-side `lengths`, which the step itself advances. So one graph serves every
step. Capture records launches without running them, and a kernel cannot be
compiled or loaded while a capture is open, so the first step is launched and the
capture comes after it.

In a starter kit the KV cache's kernels (kernels/decode.py) are TODO stubs until the
student writes them (reference.registry.not_written_yet). A cached decoder would then
compute nothing, so make_decoder refuses one with a line that names the stubs, and
generation (decoder_or_recompute) falls back to the recomputing decoder, saying so
in one line on stderr: the model still completes text on the student's own kernels.
"""

from __future__ import annotations

import contextlib
import sys

import numpy as np

from gpt2kit.kernel_runtime import KitError
from gpt2kit.kernel_runtime.device import captured
from gpt2kit.model_runtime.causal_lm import CausalLM, KVCache
from gpt2kit.model_runtime.ops import KV_CACHE_FUNCTIONS
from gpt2kit.reference.registry import host_function, not_written_yet


class DecoderError(KitError):
    """A decoder that cannot run on this model's kernels."""


def prompt_rows(prompts, batch_size: int) -> list[np.ndarray]:
    """The prompts (a (B, T) array, or B lists of any lengths) as B int32 rows."""
    rows = [np.asarray(prompt, np.int32).reshape(-1) for prompt in prompts]
    if len(rows) != batch_size:
        raise ValueError(f"{len(rows)} prompts for a decoder of {batch_size} rows")
    return rows


class RecomputeDecoder:
    """No cache: every step runs the whole sequence so far (rows of different lengths one by one)."""

    stream = contextlib.nullcontext()  # where its work runs, entered by callers: the current stream

    def __init__(self, model: CausalLM, batch_size: int):
        self.model, self.batch_size = model, batch_size
        self.rows: list[np.ndarray] = []

    def prefill(self, prompts) -> np.ndarray:
        self.rows = prompt_rows(prompts, self.batch_size)
        return self._last_logits()

    def step(self, tokens) -> np.ndarray:
        self.rows = [np.append(row, np.int32(token)) for row, token in zip(self.rows, np.asarray(tokens).reshape(-1))]
        return self._last_logits()

    def reorder(self, rows) -> None:
        self.rows = [self.rows[i] for i in rows]

    def _last_logits(self) -> np.ndarray:
        forward, to_host = self.model.forward, self.model.backend.to_host
        if len({len(row) for row in self.rows}) == 1:
            return to_host(forward(np.stack(self.rows))[:, -1])
        return np.concatenate([to_host(forward(row[None, :])[:, -1]) for row in self.rows])


class LaunchedDecoder:
    """A KV cache and the step's own activations; each step launched from Python."""

    stream = contextlib.nullcontext()  # the current stream; a GraphDecoder has a stream of its own

    def __init__(self, model: CausalLM, batch_size: int):
        self.model, self.batch_size = model, batch_size
        self.cache = model.new_cache(batch_size)
        self.activations = model.new_activations(batch_size, 1)

    def prefill(self, prompts) -> np.ndarray:
        return self.model.backend.to_host(self.prefill_on_device(prompts))

    def prefill_on_device(self, prompts):
        """Empty the cache, run the prompts; each row's last logits (B, V), contiguous, on the backend."""
        rows = prompt_rows(prompts, self.batch_size)
        self.cache.clear()
        if len({len(row) for row in rows}) == 1:
            return self._prefill(np.stack(rows), self.cache)
        logits = [self._prefill(row[None, :], self.cache.rows(b, b + 1)) for b, row in enumerate(rows)]
        self.cache.length = max(len(row) for row in rows)  # the host's check of room: the longest row
        return self.model.backend.xp.concatenate(logits)

    def _prefill(self, tokens: np.ndarray, cache: KVCache):
        activations = self.model.new_activations(*tokens.shape)  # freed after: nothing captured them
        return self.model.backend.xp.ascontiguousarray(self.model.forward(tokens, cache, activations)[:, -1])

    def step(self, tokens) -> np.ndarray:
        tokens = np.asarray(tokens, np.int32).reshape(self.batch_size)
        return self.model.backend.to_host(self.model.decode_step(tokens, self.cache, self.activations))

    def reorder(self, rows) -> None:
        """Row i of the cache becomes a copy of row rows[i], in place: a captured graph keeps its addresses."""
        rows = self.model.backend.xp.asarray(np.asarray(rows, np.int64))
        filled = self.cache.length
        for layer_cache in self.cache.k + self.cache.v:
            layer_cache[:, :, :filled] = layer_cache[rows, :, :filled]

    # ------------------------------------------------------------------ on the device (generation.grape)

    @property
    def lengths(self):
        """Each row's cache length, (B,) int32 on the device: what a step's kernels read, and advance."""
        return self.cache.lengths

    @property
    def step_logits(self):
        """Where a step writes its logits: (B, 1, Vp) on the device, each row's V real tokens first."""
        return self.activations.logits

    def launch_step(self, tokens) -> None:
        """A step's launches, its tokens (B,) int32 read from the device and nothing from the host, so that a
        CUDA graph can capture them; count each step on the host with stepped()."""
        self.model.decode_launches(tokens, self.cache, self.activations)

    def stepped(self) -> None:
        """The host's count of one more step queued on the device: TokenError when the context is full."""
        self.cache.check_room(1)
        self.cache.length += 1

    def reorder_on_device(self, rows, starts, done, group: int) -> None:
        """Row i of the cache becomes a copy of row rows[i] ((B,) int32 on the device, in i's group of `group`
        rows) at its positions from starts[i] ((B,) int32) below its length, read from the device; nothing once
        done[0] is set. One launch for every layer."""
        k_layers, v_layers = self.cache.stacked
        layers, B, NH, slots, HS = k_layers.shape
        host_function("kv_cache_reorder_forward")(k_layers, v_layers, rows, starts, self.cache.lengths, done, layers,
                                                  B, NH, slots, HS, group)

    def cache_bytes(self) -> int:
        return sum(layer.nbytes for layer in self.cache.k + self.cache.v)


class GraphDecoder(LaunchedDecoder):
    """The launched decoder's step, captured once as a CUDA graph after its first launch.

    Everything runs on the decoder's own stream, so its work is ordered without
    device-wide synchronisation; the host waits only for the logits it copies back."""

    def __init__(self, model: CausalLM, batch_size: int):
        if model.backend.name != "kernels":
            raise ValueError(f"CUDA graphs need the kernels backend, not {model.backend.name!r} "
                             "(gold allocates inside its calls, the reference runs on the CPU)")
        import cupy

        super().__init__(model, batch_size)
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.tokens = cupy.zeros(batch_size, np.int32)  # the step's input, read by every graph
        self.graphs: dict = {}  # graph_key() -> (graph, activations it writes, logits view)
        self.loaded = False     # every kernel of the step compiled and loaded (capture cannot do that)
        cupy.cuda.Device().synchronize()  # the buffers above were zeroed on another stream

    def graph_key(self):
        """Which graph serves the next step: one for every length."""
        return None

    def graph_activations(self):
        """The activations a new graph writes into: the decoder's own, shared by its graphs."""
        return self.activations

    def prefill(self, prompts) -> np.ndarray:
        with self.stream:
            return super().prefill(prompts)

    def step(self, tokens) -> np.ndarray:
        key = self.graph_key()
        with self.stream:
            if not self.loaded:
                logits = super().step(tokens)
                self.loaded = True
                self.capture([key])
                return logits
            self.cache.check_room(1)
            if key not in self.graphs:
                self.capture([key])
            graph, _, logits = self.graphs[key]
            self.tokens.set(np.asarray(tokens, np.int32).reshape(self.batch_size))
            graph.launch()
            self.cache.length += 1
            return logits.get()

    def reorder(self, rows) -> None:
        with self.stream:
            super().reorder(rows)

    def capture(self, keys) -> None:
        """Capture the step for each key not captured yet (after a first step has loaded the kernels)."""
        with self.stream:  # the launches must go to the stream being captured
            for key in keys:
                if key in self.graphs:
                    continue
                activations = self.graph_activations()
                graph, logits = captured(self.stream, lambda: self.model.decode_launches(self.tokens, self.cache,
                                                                                          activations))
                self.graphs[key] = (graph, activations, logits)  # the graph's buffers live as long as it


class PerLengthGraphDecoder(GraphDecoder):
    """One graph per KV length, as PyTorch's CUDA graphs need (their kernels take the length
    as a launch argument): captured the first time a length is reached, each with
    activations of its own, as a PyTorch graph captured with its own memory pool has."""

    def graph_key(self):
        return self.cache.length

    def graph_activations(self):
        return self.model.new_activations(self.batch_size, 1)


DECODERS = {"recompute": RecomputeDecoder, "launched": LaunchedDecoder, "graph": GraphDecoder,
            "graph_per_length": PerLengthGraphDecoder}
KINDS = tuple(DECODERS)


def print_on_stderr(line: str) -> None:
    print(line, file=sys.stderr)


def make_decoder(model: CausalLM, kind: str, batch_size: int):
    """A decoder of `kind` (one of KINDS) for `batch_size` rows."""
    if kind not in DECODERS:
        raise ValueError(f"no decoder {kind!r}; the kinds are {', '.join(KINDS)}")
    stubs = kv_cache_stubs(model, kind)
    if stubs:
        raise DecoderError(f"{stubs}: the {kind} decoder needs the KV cache they keep (write them, or generate "
                           "without the cache)")
    return DECODERS[kind](model, batch_size)


def decoder_or_recompute(model: CausalLM, kind: str, batch_size: int, say=print_on_stderr):
    """make_decoder's decoder, or the recomputing one when `kind` needs the KV cache and the model's kernels
    directory has not written the cache's host functions yet; say(line) then tells why."""
    stubs = kv_cache_stubs(model, kind)
    if stubs:
        say(f"{stubs}; generating without the KV cache (each step recomputes the whole sequence)")
        kind = "recompute"
    return make_decoder(model, kind, batch_size)


def kv_cache_stubs(model: CausalLM, kind: str) -> str | None:
    """When a decoder of `kind` needs the KV cache and the model's kernels directory still has some of its
    host functions as TODO stubs: those functions and their file ("...: not written yet (kernels/decode.py)").
    Else None (always on gold and the reference, which run no kernels directory)."""
    if kind == "recompute" or model.backend.name != "kernels":
        return None
    return not_written_yet(KV_CACHE_FUNCTIONS)
