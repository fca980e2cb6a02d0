"""Batches of a training text: inputs and targets (B, T) token ids, each target the token after its input.

    batches = TextBatches(tokens, B, T)     # tokens: the whole text's ids, in order
    inputs, targets = next(batches)

As llm.c's DataLoader: consecutive windows of B * T + 1 tokens, each batch starting
where the last one's inputs ended, and from the start again when the text runs out
(`epoch` counts the passes).
"""

from __future__ import annotations

import numpy as np

from gpt2kit.kernel_runtime import KitError


class TextTooShortError(KitError):
    """A text with fewer tokens than one batch needs."""


class TextBatches:
    def __init__(self, tokens, B: int, T: int):
        self.tokens = np.asarray(tokens, dtype=np.int32).reshape(-1)
        if self.tokens.size < B * T + 1:
            raise TextTooShortError(f"a text of {self.tokens.size} tokens is too short for batches of B={B} rows of "
                                    f"T={T} tokens: one needs {B * T + 1}")
        self.B, self.T = B, T
        self.position, self.epoch = 0, 0

    def __iter__(self):
        return self

    def __next__(self) -> tuple[np.ndarray, np.ndarray]:
        span = self.B * self.T + 1
        if self.position + span > self.tokens.size:
            self.position, self.epoch = 0, self.epoch + 1
        window = self.tokens[self.position:self.position + span]
        self.position += span - 1
        return window[:-1].reshape(self.B, self.T), window[1:].reshape(self.B, self.T)
