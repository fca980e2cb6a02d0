"""Beam search over a decoder, as transformers' `generate(num_beams=...)` defines it.

Each prompt runs as `num_beams` rows of one decoder. Per step, on the host:

    scores = log_softmax(logits) + each beam's running score       (float32, as transformers)
    the 2 * num_beams best (beam, token) continuations of all beams
    those that end (end-of-text, or the length limit) are hypotheses: their score is
        sum of log-probabilities / generated_length ** length_penalty
    and the best num_beams of them are kept; the best num_beams that go on are the
    next beams, and the decoder's rows (the KV cache) are reordered to follow them.

The search stops when no running beam can beat the worst kept hypothesis (the
`early_stopping` heuristics: False, True or "never", as transformers' docs define
them), or at max_new_tokens. The result is every prompt's num_beams hypotheses,
best first, with their scores.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from gpt2kit.generation.decoding import decoder_or_recompute
from gpt2kit.generation.generate import check_finite
from gpt2kit.model_runtime.causal_lm import CausalLM, TokenError

NEGATIVE = np.float32(-1e9)  # transformers' "impossible" score


@dataclasses.dataclass(frozen=True)
class BeamSearch:
    num_beams: int
    length_penalty: float = 1.0
    early_stopping: bool | str = False  # True, False or "never"

    def __post_init__(self):
        if self.num_beams < 1:
            raise ValueError(f"num_beams must be >= 1, got {self.num_beams}")
        if not (isinstance(self.early_stopping, bool) or self.early_stopping == "never"):  # 1 is not True here
            raise ValueError(f"early_stopping must be True, False or 'never', got {self.early_stopping!r}")


@dataclasses.dataclass
class Hypotheses:
    """Per prompt, num_beams sequences (prompt and new tokens, best first) and their scores."""

    sequences: list[list[list[int]]]
    scores: np.ndarray  # (prompts, num_beams) float32


def beam_search(model: CausalLM, prompts: list[list[int]], max_new_tokens: int, search: BeamSearch,
                decoder="launched", clock=None) -> Hypotheses:
    """Beam search from each prompt (all of one length) for at most max_new_tokens new tokens.

    decoder: a kind of generation.decoding (recompute, saying so on stderr, while the KV cache's kernels are
    TODO stubs), or a decoder of prompts * num_beams rows to run on.
    clock: when given, clock.mark(stage) is called as each stage begins (InputPrep: the
    cache's reordering; Model: the step; BeamSearch: choosing on the host)."""
    prompts = equal_length_prompts(prompts)
    P, prompt_length = prompts.shape
    end_of_text = model.config.end_of_text
    K = search.num_beams
    max_length = prompt_length + max_new_tokens
    if isinstance(decoder, str):
        decoder = decoder_or_recompute(model, decoder, P * K)
    mark = clock.mark if clock is not None else lambda stage: None
    mark("Model")
    logits = decoder.prefill(np.repeat(prompts, K, axis=0))

    running = np.repeat(prompts[:, None, :], K, axis=1)          # (P, K, length) tokens of the running beams
    running_scores = np.zeros((P, K), np.float32)
    running_scores[:, 1:] = NEGATIVE                             # at first every beam is the same: keep one
    finished = np.full((P, K, max_length), end_of_text, np.int64)
    finished_scores = np.full((P, K), NEGATIVE, np.float32)
    is_finished = np.zeros((P, K), bool)
    improvable = np.ones(P, bool)
    length = prompt_length
    while True:
        mark("BeamSearch")
        log_probs = _log_softmax(logits.astype(np.float32)).reshape(P, K, -1) + running_scores[:, :, None]
        V = log_probs.shape[-1]
        flat = log_probs.reshape(P, K * V)
        top = _top_indices(flat, 2 * K)                          # (P, 2K), best first
        top_scores = np.take_along_axis(flat, top, axis=1)
        top_beams, top_tokens = top // V, top % V
        top_sequences = np.concatenate([np.take_along_axis(running, top_beams[:, :, None], axis=1),
                                        top_tokens[:, :, None]], axis=2)
        ends = (top_tokens == end_of_text) | (length + 1 >= max_length)

        going_on = _top_indices(top_scores + ends * NEGATIVE, K)
        running = np.take_along_axis(top_sequences, going_on[:, :, None], axis=1)
        running_scores = np.take_along_axis(top_scores + ends * NEGATIVE, going_on, axis=1)
        beam_rows = np.take_along_axis(top_beams, going_on, axis=1)

        candidates = top_scores / np.float32((length + 1 - prompt_length) ** search.length_penalty)
        just_finished = ends & (np.arange(2 * K) < K)[None, :]   # only the best K may become hypotheses
        closed = (is_finished.all(axis=1) & (search.early_stopping is True)) | ~improvable
        candidates = candidates + closed[:, None] * NEGATIVE + ~just_finished * NEGATIVE
        padded = np.full((P, 2 * K, max_length), end_of_text, np.int64)
        padded[:, :, :length + 1] = top_sequences
        merged = _top_indices(np.concatenate([finished_scores, candidates], axis=1), K)
        finished = np.take_along_axis(np.concatenate([finished, padded], axis=1), merged[:, :, None], axis=1)
        finished_scores = np.take_along_axis(np.concatenate([finished_scores, candidates], axis=1), merged, axis=1)
        is_finished = np.take_along_axis(np.concatenate([is_finished, just_finished], axis=1), merged, axis=1)

        length += 1
        improvable &= _may_improve(running_scores, finished_scores, is_finished, length, max_length, prompt_length,
                                   search)
        exists_open_beam = not (is_finished.all() and search.early_stopping is True)
        if not (improvable.any() and exists_open_beam and not ends.all()):
            break
        rows = (beam_rows + np.arange(P)[:, None] * K).reshape(-1)
        mark("InputPrep")
        decoder.reorder(rows)
        mark("Model")
        logits = decoder.step(running[:, :, -1].reshape(-1))
    mark("end")
    return hypotheses(finished, finished_scores, prompt_length, length - prompt_length, end_of_text)


def equal_length_prompts(prompts) -> np.ndarray:
    """The prompts as one (P, T) array of token ids; TokenError unless they share one length."""
    lengths = sorted({len(prompt) for prompt in prompts})
    if len(lengths) != 1 or lengths[0] == 0:
        raise TokenError(f"beam search takes prompts of one length, not of {' and '.join(map(str, lengths)) or 'none'} "
                         "tokens: search them one call per length")
    return np.asarray(prompts, np.int64)


def hypotheses(finished: np.ndarray, scores: np.ndarray, prompt_length: int, generated: int,
               end_of_text: int) -> Hypotheses:
    """Hypotheses from the kept sequences (P, K, max_length), padded with end_of_text: each
    cut after its first end-of-text among the generated tokens, else after all of them."""
    return Hypotheses([[list(map(int, seq[:_kept_length(seq, prompt_length, generated, end_of_text)]))
                        for seq in beams] for beams in finished], scores)


def _may_improve(running_scores, finished_scores, is_finished, length, max_length, prompt_length,
                 search: BeamSearch) -> np.ndarray:
    """Per prompt: can the best running beam still beat the worst kept hypothesis?"""
    if search.early_stopping == "never" and search.length_penalty > 0:
        best_length = max_length - prompt_length
    else:
        best_length = length - prompt_length
    best_running = running_scores[:, 0] / np.float32(best_length ** search.length_penalty)
    worst_finished = np.where(is_finished.all(axis=1), finished_scores.min(axis=1), NEGATIVE)
    return best_running > worst_finished


def _kept_length(sequence, prompt_length: int, generated: int, end_of_text: int) -> int:
    """A hypothesis's length: up to its first end-of-text (kept), else the whole generated length."""
    new = sequence[prompt_length:prompt_length + generated]
    ends = np.flatnonzero(new == end_of_text)
    return prompt_length + (int(ends[0]) + 1 if ends.size else generated)


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    largest = logits.max(axis=-1, keepdims=True)
    check_finite(largest)
    shifted = logits - largest
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def _top_indices(scores: np.ndarray, k: int) -> np.ndarray:
    """The indices of each row's k largest scores, largest first (ties: the lower index first).

    A stable sort of the whole row would do, but rows of num_beams * V scores are long: the
    k-th largest value is found by partition, and only what reaches it is sorted."""
    n = scores.shape[1]
    if k >= n // 2:
        return np.argsort(-scores, axis=1, kind="stable")[:, :k]
    top = np.empty((scores.shape[0], k), np.int64)
    for r, row in enumerate(scores):
        kth = np.partition(row, n - k)[n - k]
        above = np.flatnonzero(row > kth)
        reaching = np.concatenate([above, np.flatnonzero(row == kth)[:k - above.size]])
        reaching.sort()  # in id order, so the stable sort below breaks ties by id
        top[r] = reaching[np.argsort(-row[reaching], kind="stable")]
    return top
