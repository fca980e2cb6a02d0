"""The leaderboard: tokens per second of a submission's kernels in the whole model, behind a
correctness gate, every timed token checked, and none of the submission's code running
while it is timed.

    python -m gpt2kit.grading leaderboard SUBMISSION [SUBMISSION ...] [--variant NAME] [--seed N] [--out DIR]

The workload is fixed in grading/leaderboard.toml: GPT-2 124M with seeded random
weights, every batch size x count of new tokens x prompt length, sampled (temperature,
top-k) or greedy. Per submission (grading.ranking):
1. a worker process (grading.leaderboard_worker, sandboxed, under the table's time
   limit) loads the submission's kernels and runs the gate's calls and two short
   generations of every configuration's shape, taping the first call of each host
   function at each shape (grading.taped_calls); the tapes are all it sends back, and it
   ends;
2. a trusted replayer (grading.leaderboard_replayer, the kit's own code) builds the tapes'
   programs itself and runs the model on them: the gate's outputs, which the ranking
   process judges against the float64 reference (gpt2.logits_check's allowance for the
   submission's profile); then per configuration a warm-up, and a timed generation of
   the prompts and sampling seed the ranking process draws from a secret seed (the
   kit's grape executor and sampling kernels, its own buffers, its own clock).
Then every returned token is checked by the trusted model (grading.token_check: the gold
backend, teacher-forced, in the ranking process), and each configuration's tokens per
second must stay under the device's memory-bandwidth roofline. A submission that passes
everything scores the geometric mean of its configurations' tokens per second, with one
row per configuration. Per submission: a console table and OUT/<name>/leaderboard.json,
holding Gradescope's leaderboard fields.

This module is the table, the records, the model both sides build and the calls both
run, and the judging of the gate, with no oracle in it: the worker imports it too.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import tomllib
from pathlib import Path

import numpy as np

from gpt2kit.gpt2.checkpoint import Parameters, perturbed_parameters
from gpt2kit.gpt2.config import GPT2Config, preset
from gpt2kit.gpt2.model import GPT2
from gpt2kit.generation.decoding import make_decoder
from gpt2kit.generation.generate import Sampling, decoder_kind
from gpt2kit.kernel_runtime import KitError
from gpt2kit.model_runtime.backends import Backend, uses_flash, uses_fused_decode
from gpt2kit.reference.numerics import element_errors

TABLE_FILE = Path(__file__).with_name("leaderboard.toml")
WARM_UP_TOKENS = 2


class LeaderboardError(KitError):
    """A workload table that cannot be used."""


@dataclasses.dataclass(frozen=True)
class Workload:
    weights_seed: int
    temperature: float  # 0: greedy
    top_k: int
    batches: tuple[int, ...]
    new_tokens: tuple[int, ...]
    prompt_lengths: tuple[int, ...]
    gate_prompt: str
    gate_steps: int
    time_limit_seconds: float

    def sampling(self, seed: int) -> Sampling:
        """How every configuration chooses its tokens; `seed` is the run's, drawn by the ranking process."""
        if self.temperature == 0:
            return Sampling(temperature=0.0)
        return Sampling(self.temperature, self.top_k, None, seed)


@dataclasses.dataclass(frozen=True)
class Configuration:
    batch: int
    new_tokens: int
    prompt_length: int

    @property
    def name(self) -> str:
        return f"B{self.batch} new{self.new_tokens} prompt{self.prompt_length}"

    @property
    def tokens(self) -> int:
        """New tokens a run generates."""
        return self.batch * self.new_tokens


def load_workload(path: Path = TABLE_FILE) -> Workload:
    """The workload table, checked: any problem is one LeaderboardError line naming the file and the key."""
    try:
        raw = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise LeaderboardError(f"{path}: cannot read the leaderboard table ({err})") from None
    fields = [f.name for f in dataclasses.fields(Workload)]
    missing = [name for name in fields if name not in raw]
    if missing:
        raise LeaderboardError(f"{path}: missing {', '.join(missing)}")
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        raise LeaderboardError(f"{path}: unknown key {unknown[0]!r}")

    def positive_ints(key):
        values = raw[key]
        if not (isinstance(values, list) and values and all(isinstance(v, int) and v >= 1 for v in values)):
            raise LeaderboardError(f"{path}: {key} must be a non-empty list of integers >= 1, got {values!r}")
        return tuple(values)

    for key, least in (("weights_seed", 0), ("top_k", 1), ("gate_steps", 1)):
        if not (isinstance(raw[key], int) and raw[key] >= least):
            raise LeaderboardError(f"{path}: {key} must be an integer >= {least}")
    if not (isinstance(raw["temperature"], (int, float)) and raw["temperature"] >= 0):
        raise LeaderboardError(f"{path}: temperature must be a number >= 0 (0: greedy)")
    if not (isinstance(raw["time_limit_seconds"], (int, float)) and raw["time_limit_seconds"] > 0):
        raise LeaderboardError(f"{path}: time_limit_seconds must be a number > 0")
    if not (isinstance(raw["gate_prompt"], str) and raw["gate_prompt"].strip()):
        raise LeaderboardError(f"{path}: gate_prompt must be a non-empty string")
    return Workload(raw["weights_seed"], float(raw["temperature"]), raw["top_k"], positive_ints("batches"),
                    positive_ints("new_tokens"), positive_ints("prompt_lengths"), raw["gate_prompt"],
                    raw["gate_steps"], float(raw["time_limit_seconds"]))


def model_weights(workload: Workload) -> tuple[GPT2Config, Parameters]:
    """The model every submission runs, and the gate's reference with it: GPT-2 124M, GPT-2's init with
    noise on the biases and layernorm weights (so a kernel that drops a bias shows), from the table's seed."""
    config = preset("gpt2")
    return config, perturbed_parameters(config, workload.weights_seed)


def leaderboard_model(workload: Workload, ops, variants: tuple[str, ...]) -> GPT2:
    """The table's model on the GPU, its host functions `ops` (the worker's taping ones, the replayer's taped
    ones), calling flash attention or the fused decode matmuls where `variants` choose them."""
    import cupy

    backend = Backend("kernels", cupy, np.float32, ops, flash_attention=uses_flash(variants),
                      fused_decode=uses_fused_decode(variants))
    return GPT2(*model_weights(workload), backend=backend)


def configurations(workload: Workload) -> list[Configuration]:
    """Every batch size x count of new tokens x prompt length, batch sizes outermost."""
    return [Configuration(*c) for c in itertools.product(workload.batches, workload.new_tokens,
                                                         workload.prompt_lengths)]


def geometric_mean(values) -> float:
    values = list(values)
    if not values or min(values) <= 0:
        raise ValueError("a geometric mean needs positive values")
    return math.exp(sum(math.log(v) for v in values) / len(values))


@dataclasses.dataclass(frozen=True)
class GateOutputs:
    """What the gate's calls gave on the submission's tapes, in the replayer."""
    logits: np.ndarray              # (T, V): one forward pass over the gate prompt
    cached_logits: np.ndarray       # (steps + 1, V): the prefill's last row, then each cached decode step
    recomputed_logits: np.ndarray   # the same positions, every step a full forward pass
    cached_tokens: np.ndarray       # (steps,) greedy tokens of the cached path
    recomputed_tokens: np.ndarray   # and of the recomputing path

    def arrays(self) -> dict[str, np.ndarray]:
        return dataclasses.asdict(self)

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> GateOutputs | None:
        """The outputs from the replayer's message, or None when one is missing or not numbers."""
        names = [f.name for f in dataclasses.fields(cls)]
        if not all(name in arrays and np.issubdtype(arrays[name].dtype, np.number) for name in names):
            return None
        return cls(**{name: arrays[name] for name in names})


def gate_outputs(model: GPT2, prompt: list[int], steps: int) -> GateOutputs:
    """The gate's calls: one forward pass over `prompt`; then `steps` greedy steps with the KV cache (the graphed
    decoder), and the same steps recomputed, both paths fed the cached path's tokens so that their logits
    compare."""
    tokens = np.array([prompt], np.int32)
    logits = model.backend.to_host(model(tokens))[0]
    cached = make_decoder(model, decoder_kind(model, use_cache=True, use_graph=True), 1)
    recomputed = make_decoder(model, "recompute", 1)
    cached_rows, recomputed_rows = [cached.prefill(tokens)[0]], [recomputed.prefill(tokens)[0]]
    cached_tokens, recomputed_tokens = [], []
    for _ in range(steps):
        cached_tokens.append(int(np.argmax(cached_rows[-1])))
        recomputed_tokens.append(int(np.argmax(recomputed_rows[-1])))
        step = np.array([cached_tokens[-1]], np.int32)
        cached_rows.append(cached.step(step)[0].copy())  # a decoder's step may return its own buffer
        recomputed_rows.append(recomputed.step(step)[0].copy())
    return GateOutputs(logits, np.stack(cached_rows), np.stack(recomputed_rows), np.array(cached_tokens),
                       np.array(recomputed_tokens))


def warm_up(executor, workload: Workload, batch: int, prompt_length: int) -> None:
    """Three generations of WARM_UP_TOKENS on prompts of this shape, of content of their own: the first runs
    every call eagerly (in the worker, taping it), the second captures the executor's CUDA graphs, the third
    replays them, so that a timed run is never a graph's first launch (which uploads it to the device)."""
    vocab_size = executor.model.config.vocab_size
    prompts = [[(row * prompt_length + position) % vocab_size for position in range(prompt_length)]
               for row in range(batch)]
    for _ in range(3):
        executor.generate(prompts, WARM_UP_TOKENS, workload.sampling(seed=0), stop_at_end_of_text=False)


def gate_failure(outputs: GateOutputs | None, reference_logits: np.ndarray, allowed: float) -> str | None:
    """Why the submission fails the gate, or None: its logits against the float64 reference within
    `allowed`, and its cached decoding against its own recomputation (same tokens, logits within `allowed`)."""
    if outputs is None:
        return "the gate's outputs are missing or unreadable"
    if outputs.logits.shape != reference_logits.shape:
        return f"gate logits of shape {outputs.logits.shape}, expected {reference_logits.shape}"
    error = _max_error(outputs.logits, reference_logits)
    if not error <= allowed:
        return f"logits on the gate prompt off by {error:.3g} (allowed {allowed:.3g})"
    if not np.array_equal(outputs.cached_tokens, outputs.recomputed_tokens):
        step = int(np.argmax(outputs.cached_tokens != outputs.recomputed_tokens)) if (
            outputs.cached_tokens.shape == outputs.recomputed_tokens.shape) else 0
        return f"greedy tokens with the KV cache differ from recomputing at step {step}"
    error = _max_error(outputs.cached_logits, outputs.recomputed_logits)
    if not error <= allowed:
        return f"logits with the KV cache differ from recomputing by {error:.3g} (allowed {allowed:.3g})"
    return None


def _max_error(got: np.ndarray, want: np.ndarray) -> float:
    return float(element_errors(got, want).max(initial=0.0)) if got.shape == want.shape else math.inf


@dataclasses.dataclass(frozen=True)
class Row:
    configuration: Configuration
    seconds: float        # by the replayer's clock: the generation, from a synchronized device to tokens on the host
    tokens: int           # new tokens generated: batch x new_tokens
    refused: str | None = None  # why the run does not count: wrong tokens, or faster than the roofline

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds


@dataclasses.dataclass
class Standing:
    submission: str
    score: float | None    # the geometric mean of tok/s; None: no score
    reason: str
    rows: list[Row]
    seed: int | None = None             # the secret seed of the prompts, shown after the runs
    wall_seconds: float | None = None   # the whole ranking of this submission: worker, replayer, check
    isolation: str = ""                 # what its worker could read (grading.sandbox's summary line)


def standing(submission: str, workload: Workload, gate_reason: str | None, rows: list[Row],
             crash: str | None = None) -> Standing:
    """The submission's score, or why it has none: a failed gate, a crash, missing configurations, a run
    refused (its configuration named)."""
    if gate_reason is not None:
        return Standing(submission, None, f"failed the correctness gate: {gate_reason}", rows)
    if crash is not None:
        return Standing(submission, None, crash, rows)
    refused = next((r for r in rows if r.refused), None)
    if refused is not None:
        return Standing(submission, None, f"{refused.configuration.name}: {refused.refused}", rows)
    expected = len(configurations(workload))
    if len(rows) < expected:
        return Standing(submission, None, f"only {len(rows)} of {expected} configurations ran", rows)
    score = geometric_mean(r.tokens_per_second for r in rows)
    return Standing(submission, score, f"geometric mean of {expected} configurations, every token checked", rows)


def console_table(result: Standing) -> str:
    lines = [f"submission: {result.submission}", *filter(None, [result.isolation]),
             f"{'configuration':28s} {'seconds':>9s} {'tok/s':>10s}"]
    lines += [f"{r.configuration.name:28s} {r.seconds:9.3f} {r.tokens_per_second:10.0f}"
              + ("  refused" if r.refused else "") for r in result.rows]
    score = f"{result.score:.0f} tok/s" if result.score is not None else "no score"
    lines.append(f"{'score':28s} {score}  ({result.reason})")
    if result.seed is not None:
        lines.append(f"{'prompts seed':28s} {result.seed}")
    if result.wall_seconds is not None:
        lines.append(f"{'wall time':28s} {result.wall_seconds:.0f} s")
    return "\n".join(lines)


def gradescope_fields(result: Standing) -> dict:
    """Gradescope's leaderboard entry (results.json's "leaderboard"), and the output students see."""
    value = round(result.score, 1) if result.score is not None else 0
    return {"leaderboard": [{"name": "tok/s (geometric mean)", "value": value, "order": "desc"}],
            "output": console_table(result)}
