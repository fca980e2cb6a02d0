"""One decode step captured as a CUDA graph, replayed for every new token.

A decode step is ~135 small launches for GPT-2 124M; launched one by one from
Python, the host's time per launch, not the GPU, sets the pace. Captured once into
a CUDA graph, the whole step is a single launch.

One graph serves every step because nothing in the step depends on the host: the
new tokens are read from a device buffer this class owns, and positions and cache
lengths from the cache's device-side `lengths`, which the step itself advances.

    step = CapturedDecodeStep(model, cache, batch_size=1)   # after one ordinary decode step
    logits = step(next_tokens)                              # (B,) host ints -> (B, V) host logits

Capture records launches without running them, and a kernel cannot be compiled or
loaded while a capture is open: make one ordinary decode_step first (generate does).
"""

from __future__ import annotations

import numpy as np

from gpt2.model import GPT2, KVCache


class CapturedDecodeStep:
    def __init__(self, model: GPT2, cache: KVCache, batch_size: int):
        import cupy

        if model.backend.name != "kernels":
            raise ValueError(f"CUDA graphs need the kernels backend, not {model.backend.name!r} "
                             "(gold allocates inside its calls, the reference runs on the CPU)")
        self.model, self.cache = model, cache
        self.tokens = cupy.zeros(batch_size, np.int32)
        self.stream = cupy.cuda.Stream(non_blocking=True)
        cupy.cuda.Device().synchronize()  # earlier steps ran on another stream
        with self.stream:
            self.stream.begin_capture()
            try:
                self.logits = model.decode_launches(self.tokens, cache)
            finally:
                self.graph = self.stream.end_capture()

    def __call__(self, tokens) -> np.ndarray:
        """Run one step for `tokens` (B,) and return the logits (B, V) on the host."""
        self.cache.check_room(1)
        with self.stream:  # the copy in, the step and the copy out, in order on one stream
            self.tokens.set(np.asarray(tokens, dtype=np.int32).reshape(self.tokens.shape))
            self.graph.launch()
            logits = self.logits.get()
        self.cache.length += 1
        return logits
