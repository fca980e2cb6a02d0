"""Checking a timed run's tokens with a trusted model, teacher-forced.

    failure = check_run(model, prompts, tokens, new_tokens, sampling, allowed)   # None, or why it does not count

The ranking process runs the trusted model (the gold backend: CuPy library calls, never
the submission's code) once over every row's prompt followed by the tokens the worker
returned, so that position j's logits are the trusted model's given the returned prefix.
`allowed` is the whole-model logit allowance of the submission's profile
(gpt2.logits_check): the submission's logits and the trusted model's may each be that
far from the float64 truth, so two of them may differ by EPSILON = 2 x allowed.

Per token:
* greedy: the token's trusted logit is within EPSILON of the largest (a near-tie may
  go either way in a correct float32 model);
* sampled: the token is in the trusted top-k, with EPSILON at the boundary: its
  trusted logit is at least the k-th largest minus EPSILON.
The first failing token is named (row, new token, id).

A sampled run must also follow the model's distribution, not only its support (always
taking the top token, or a lower temperature, stays inside the top-k). With f_j(x) the
trusted log-probability of token x at position j (temperature, no cut), q_j the
distribution a correct sampler draws from (softmax of the trusted logits over the
trusted top-k) and E_j, V_j the mean and variance of f_j under q_j, the sum of
X_j = f_j(x_j) - E_j over the run's tokens is a martingale: given everything before it,
each X_j has mean 0 and variance V_j, whatever the earlier tokens were, and |X_j| <= b
(the largest |f_j - E_j| over any top-k). Freedman's inequality bounds its tail:

    P(|sum X_j| >= t) <= 2 exp(-t^2 / (2 (V + b t / 3))),   V = sum V_j,

which is FALSE_ALARM for t = b l / 3 + sqrt((b l / 3)^2 + 2 V l), l = ln(2 / FALSE_ALARM),
about 5.4 standard deviations when b is small beside sqrt(V). A correct submission does
not sample q_j exactly: its logits are within EPSILON of the trusted ones, so each of
its probabilities is within a factor exp(2 EPSILON / T) of q_j's (T the temperature),
and its mean of f_j moves by at most (exp(2 EPSILON / T) - 1) sqrt(V_j) (Cauchy-Schwarz).
The run passes when |sum X_j| <= t + (exp(2 EPSILON / T) - 1) sum sqrt(V_j). In means
per token, the margin shrinks as 1/sqrt(N) for N tokens: at 500 tokens a row it is a
few hundredths of a nat, and a sampler at temperature 0.9 instead of 1, or one that
takes the top token, is far outside it.
"""

from __future__ import annotations

import math

import numpy as np

from gpt2kit.generation.generate import Sampling
from gpt2kit.gpt2.model import GPT2

FALSE_ALARM = 1e-6      # the chance that a correct sampler's run is refused by the mean log-probability check
POSITIONS_AT_ONCE = 512  # positions whose logits are sorted and summed together (memory: a few of (512, V))


def check_run(model: GPT2, prompts: np.ndarray, tokens, new_tokens: int, sampling: Sampling,
              allowed: float) -> str | None:
    """Why the run's tokens are not the trusted model's (module docstring), or None. prompts (B, L) the
    prompts the run was given; tokens what the worker returned for them, expected (B, new_tokens) ids."""
    B, L = prompts.shape
    V = model.config.vocab_size
    if not (isinstance(tokens, np.ndarray) and np.issubdtype(tokens.dtype, np.integer)
            and tokens.shape == (B, new_tokens)):
        return (f"wrong tokens: expected {B} rows of {new_tokens} token ids, got "
                f"{getattr(tokens, 'shape', None)} of {getattr(tokens, 'dtype', type(tokens).__name__)}")
    if ((tokens < 0) | (tokens >= V)).any():
        row, position = np.argwhere((tokens < 0) | (tokens >= V))[0]
        return f"wrong tokens: row {row}, new token {position}: id {tokens[row, position]} is outside [0, {V})"
    epsilon = 2 * allowed
    sequences = np.concatenate([prompts, tokens], axis=1)[:, :-1].astype(np.int32)  # the last predicts nothing
    logits = model(sequences)[:, L - 1:]  # (B, n, V): position j's logits choose new token j
    xp = model.backend.xp
    chosen = xp.asarray(tokens)
    if sampling.temperature == 0:
        top = logits.max(axis=-1)
        gaps = model.backend.to_host(top - xp.take_along_axis(logits, chosen[..., None], -1)[..., 0])
        return _first_failure(gaps, epsilon, tokens, "is not the trusted model's choice: its logit is {gap:.3g} "
                                                     "below the largest")
    k = min(sampling.top_k or V, V)
    gaps, moments = np.empty(tokens.shape), np.zeros(4)  # moments: sum X_j, sum V_j, sum sqrt(V_j), b
    for row in range(B):
        for start in range(0, tokens.shape[1], POSITIONS_AT_ONCE):
            block = logits[row, start:start + POSITIONS_AT_ONCE]
            block_gaps, block_moments = _sampled_block(xp, block, chosen[row, start:start + block.shape[0]],
                                                       k, sampling.temperature, epsilon)
            gaps[row, start:start + block.shape[0]] = model.backend.to_host(block_gaps)
            moments[:3] += block_moments[:3]
            moments[3] = max(moments[3], block_moments[3])
    failure = _first_failure(gaps, epsilon, tokens, f"is not in the trusted model's top {k}: its logit is "
                                                    "{gap:.3g} below the " + f"{k}th largest")
    if failure:
        return failure
    deviation, variance, spread, b = moments
    count = tokens.size
    margin = freedman_margin(variance, b) + math.expm1(2 * epsilon / sampling.temperature) * spread
    if abs(deviation) > margin:
        return (f"wrong tokens: their mean log-probability under the trusted model is {deviation / count:+.4f} from "
                f"what its own samples average, allowed +-{margin / count:.4f} (not drawn from the model's "
                f"distribution: a wrong temperature, top-k or sampler)")
    return None


def freedman_margin(variance: float, bound: float, false_alarm: float = FALSE_ALARM) -> float:
    """The t at which Freedman's tail bound 2 exp(-t^2 / (2 (variance + bound t / 3))) is `false_alarm`."""
    log_odds = math.log(2 / false_alarm)
    linear = bound * log_odds / 3
    return linear + math.sqrt(linear ** 2 + 2 * variance * log_odds)


def _sampled_block(xp, logits, chosen, k: int, temperature: float, epsilon: float):
    """For positions (P, V) of one row: how far each chosen token is below the k-th largest logit (P,), and
    (sum X_j, sum V_j, sum sqrt(V_j), max |f_j - E_j| over the top-k) of the module docstring."""
    P, V = logits.shape
    kth = xp.sort(logits, axis=-1)[:, V - k]
    chosen_logits = xp.take_along_axis(logits, chosen[:, None], -1)[:, 0]
    scaled = logits.astype(np.float64) / temperature
    largest = scaled.max(axis=-1, keepdims=True)
    log_probabilities = scaled - largest - xp.log(xp.exp(scaled - largest).sum(axis=-1, keepdims=True))  # f_j
    in_top = logits >= kth[:, None]
    weights = xp.where(in_top, xp.exp(scaled - largest), 0.0)
    q = weights / weights.sum(axis=-1, keepdims=True)
    mean = (q * log_probabilities).sum(axis=-1)                                        # E_j
    centred = xp.where(in_top, log_probabilities - mean[:, None], 0.0)
    variance = (q * centred ** 2).sum(axis=-1)                                         # V_j
    observed = xp.take_along_axis(log_probabilities, chosen[:, None], -1)[:, 0]
    moments = [float((observed - mean).sum()), float(variance.sum()), float(xp.sqrt(variance).sum()),
               float(xp.abs(centred).max())]
    return kth - chosen_logits, moments


def _first_failure(gaps: np.ndarray, epsilon: float, tokens: np.ndarray, what: str) -> str | None:
    """The earliest token (by new-token index, then row) whose gap exceeds epsilon, named, or None."""
    failing = np.argwhere((gaps > epsilon).T)  # (position, row) pairs, earliest position first
    if not len(failing):
        return None
    position, row = failing[0]
    return (f"wrong tokens: row {row}, new token {position} (id {tokens[row, position]}) "
            + what.format(gap=float(gaps[row, position])) + f" (allowed {epsilon:.3g})")
