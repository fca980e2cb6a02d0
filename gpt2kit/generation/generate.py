"""Text generation: greedy, temperature, top-k and top-p sampling, with or without a KV cache.

With the cache (the default) the prompt is run once (prefill) and every new token
costs one decode step against the cached keys and values; on the kernels backend
that step is captured once as a CUDA graph and replayed (generation.decoding). Without it, every new
token re-runs the whole sequence: slower, and the yardstick the cache is tested
against (under greedy decoding both must give the same tokens).
Where the kernels directory's KV-cache kernels are still a starter kit's TODO stubs,
generation recomputes instead, and warn() says so in one line (generation.decoding).

A prompt too long to leave room for the new tokens in the model's context is cut
from the left, keeping its end, with a warning that says how many tokens were
dropped; asking for more new tokens than the context holds is an error.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from typing import Callable

import numpy as np

from gpt2kit.generation.decoding import decoder_or_recompute
from gpt2kit.kernel_runtime import KitError
from gpt2kit.model_runtime.causal_lm import CausalLM, TokenError


class SamplingError(KitError):
    """Sampling options that mean nothing."""


@dataclasses.dataclass(frozen=True)
class Sampling:
    """temperature 0 means greedy (argmax); top_k / top_p None means no cut."""

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None

    def __post_init__(self):
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise SamplingError(f"temperature must be a finite number >= 0, got {self.temperature}")
        if self.top_k is not None and self.top_k < 1:
            raise SamplingError(f"top_k must be >= 1, got {self.top_k}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise SamplingError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.seed is not None and self.seed < 0:
            raise SamplingError(f"seed must be >= 0, got {self.seed}")


class NonFiniteLogitsError(KitError):
    """Logits holding NaN or infinity: no token can be chosen from them."""


def check_finite(largest) -> None:
    """NonFiniteLogitsError unless `largest`, a row's largest logit (NaN where the row holds one), is finite."""
    if not np.all(np.isfinite(largest)):
        raise NonFiniteLogitsError("the model's logits hold NaN or infinity, so no token can be chosen: a kernel "
                                   "wrote non-finite values (python -m gpt2kit.gpt2.step_check names the first)")


GREEDY = Sampling(temperature=0.0)


def next_token(logits: np.ndarray, sampling: Sampling, rng: np.random.Generator) -> int:
    """One token id from a row of logits (V,)."""
    if sampling.temperature == 0:
        token = int(np.argmax(logits))  # a NaN is the argmax: then it is what the check sees
        check_finite(logits[token])
        return token
    probabilities = sampling_probabilities(logits, sampling)
    return int(rng.choice(probabilities.size, p=probabilities))


def sampling_probabilities(logits: np.ndarray, sampling: Sampling) -> np.ndarray:
    """The distribution (float64) a row of logits (V,) is sampled from: temperature (> 0), then top-k, then top-p."""
    check_finite(logits.max())
    logits = logits.astype(np.float64) / sampling.temperature
    if sampling.top_k is not None and sampling.top_k < logits.size:
        kth_largest = np.partition(logits, -sampling.top_k)[-sampling.top_k]
        logits = np.where(logits < kth_largest, -np.inf, logits)
    probabilities = np.exp(logits - logits.max())
    probabilities /= probabilities.sum()
    if sampling.top_p is not None and sampling.top_p < 1:
        order = np.argsort(-probabilities)
        cumulative = np.cumsum(probabilities[order])
        keep = order[: int(np.searchsorted(cumulative, sampling.top_p)) + 1]  # smallest set reaching top_p
        kept = np.zeros_like(probabilities)
        kept[keep] = probabilities[keep]
        probabilities = kept / kept.sum()
    return probabilities


def warn_on_stderr(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def fit_prompt(prompt: list[int], max_new_tokens: int, context: int, warn: Callable[[str], None]) -> list[int]:
    if not prompt:
        raise TokenError("the prompt is empty: give at least one token")
    if max_new_tokens < 0:
        raise TokenError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    if max_new_tokens >= context:
        raise TokenError(f"max_new_tokens={max_new_tokens} leaves no room for a prompt in the model's "
                         f"context of {context} tokens")
    room = context - max_new_tokens
    if len(prompt) > room:
        warn(f"prompt of {len(prompt)} tokens cut to its last {room}: {len(prompt) - room} dropped from its start "
             f"to leave room for {max_new_tokens} new tokens in the context of {context}")
        return prompt[-room:]
    return prompt


def generate(model: CausalLM, prompt: list[int], max_new_tokens: int, sampling: Sampling = GREEDY, *,
             use_cache: bool = True, use_graph: bool = True, stop_at_end_of_text: bool = True,
             on_token: Callable[[int], None] | None = None,
             warn: Callable[[str], None] = warn_on_stderr) -> list[int]:
    """The new token ids (without the prompt), streamed one by one to on_token: a
    sampling loop over a decoder (generation.decoding). With the cache on the kernels
    backend, decode steps replay a CUDA graph of the step unless use_graph is False."""
    stream = None if on_token is None else lambda row, token: on_token(token)
    return generate_batch(model, [prompt], max_new_tokens, sampling, use_cache=use_cache, use_graph=use_graph,
                          stop_at_end_of_text=stop_at_end_of_text, on_token=stream, warn=warn)[0]


def generate_batch(model: CausalLM, prompts: list[list[int]], max_new_tokens: int, sampling: Sampling = GREEDY, *,
                   use_cache: bool = True, use_graph: bool = True, decoder=None, stop_at_end_of_text: bool = True,
                   on_token: Callable[[int, int], None] | None = None,
                   warn: Callable[[str], None] = warn_on_stderr
                   ) -> list[list[int]]:
    """Each prompt's new tokens, the prompts (of any lengths) decoded together as the rows
    of one decoder; on_token(row, token) streams them. A row that has ended (end-of-text
    or its budget) takes no more tokens, while the others go on. Under greedy decoding
    each row's tokens are its own generate()'s; sampling draws every row's tokens from
    one generator seeded by sampling.seed, row after row. `decoder`: one to run on
    (generation.decoding, of len(prompts) rows) instead of a new one chosen by the flags."""
    prompts = [fit_prompt(list(prompt), max_new_tokens, model.config.max_T, warn) for prompt in prompts]
    if max_new_tokens == 0:
        return [[] for _ in prompts]
    decoder = decoder or decoder_or_recompute(model, decoder_kind(model, use_cache, use_graph), len(prompts),
                                            warn)
    rng = np.random.default_rng(sampling.seed)
    new: list[list[int]] = [[] for _ in prompts]
    running = list(range(len(prompts)))
    logits = decoder.prefill(prompts)
    while True:
        tokens = [next_token(row_logits, sampling, rng) for row_logits in logits]
        for row in running:
            new[row].append(tokens[row])
            if on_token is not None:
                on_token(row, tokens[row])
        running = [row for row in running if len(new[row]) < max_new_tokens
                   and not (stop_at_end_of_text and tokens[row] == model.config.end_of_text)]
        if not running:
            return new
        logits = decoder.step(tokens)


def decoder_kind(model: CausalLM, use_cache: bool, use_graph: bool) -> str:
    if not use_cache:
        return "recompute"
    return "graph" if use_graph and model.backend.name == "kernels" else "launched"
