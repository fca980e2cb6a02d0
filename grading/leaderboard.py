"""The leaderboard: tokens per second of a submission's kernels in the whole model, behind a
correctness gate.

    python -m grading leaderboard SUBMISSION [SUBMISSION ...] [--variant NAME] [--out DIR]

The workload is fixed in grading/leaderboard.toml: GPT-2 124M with seeded random
weights, sampling with a fixed seed, every batch size x count of new tokens x prompt.
For each submission a worker process (grading.leaderboard_worker, under the table's
time limit) loads the submission's kernels, runs the gate's calls and then every
configuration through the grape executor (CUDA graphs, tokens chosen on the GPU),
and saves what it saw. This process judges the gate against the float64 reference
it computes itself (gpt2.logits_check's allowance for the submission's profile), and
only a submission that passes is scored: the geometric mean of its configurations'
tokens per second, with one row per configuration. Per submission: a console table
and OUT/<name>/leaderboard.json, holding Gradescope's leaderboard fields.

This module is the table, the records and the judging, with no oracle in it: the
worker imports it too. grading.ranking runs the workers and computes the reference.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import tomllib
from pathlib import Path

import numpy as np

from gpt2.checkpoint import Parameters, perturbed_parameters
from gpt2.config import GPT2Config, preset
from kernel_runtime import KitError
from reference.numerics import element_errors

TABLE_FILE = Path(__file__).with_name("leaderboard.toml")
GATE_FILE, ROWS_FILE = "gate.npz", "rows.json"


class LeaderboardError(KitError):
    """A workload table or a worker's output that cannot be used."""


@dataclasses.dataclass(frozen=True)
class Workload:
    weights_seed: int
    temperature: float
    top_k: int
    sampling_seed: int
    batches: tuple[int, ...]
    new_tokens: tuple[int, ...]
    prompts: tuple[str, ...]
    gate_prompt: str
    gate_steps: int
    time_limit_seconds: float


@dataclasses.dataclass(frozen=True)
class Configuration:
    batch: int
    new_tokens: int
    prompt: int  # index into Workload.prompts

    @property
    def name(self) -> str:
        return f"B{self.batch} new{self.new_tokens} prompt{self.prompt}"


def load_workload(path: Path = TABLE_FILE) -> Workload:
    """The workload table, checked: any problem is one LeaderboardError line naming the file and the key."""
    try:
        raw = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise LeaderboardError(f"{path}: cannot read the leaderboard table ({err})") from None
    fields = {f.name: f.type for f in dataclasses.fields(Workload)}
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

    prompts = raw["prompts"]
    if not (isinstance(prompts, list) and prompts and all(isinstance(p, str) and p.strip() for p in prompts)):
        raise LeaderboardError(f"{path}: prompts must be a non-empty list of non-empty strings")
    for key in ("weights_seed", "top_k", "sampling_seed", "gate_steps"):
        if not (isinstance(raw[key], int) and raw[key] >= (1 if key in ("top_k", "gate_steps") else 0)):
            raise LeaderboardError(f"{path}: {key} must be an integer >= {1 if key in ('top_k', 'gate_steps') else 0}")
    for key in ("temperature", "time_limit_seconds"):
        if not (isinstance(raw[key], (int, float)) and raw[key] > 0):
            raise LeaderboardError(f"{path}: {key} must be a number > 0")
    if not (isinstance(raw["gate_prompt"], str) and raw["gate_prompt"].strip()):
        raise LeaderboardError(f"{path}: gate_prompt must be a non-empty string")
    return Workload(raw["weights_seed"], float(raw["temperature"]), raw["top_k"], raw["sampling_seed"],
                    positive_ints("batches"), positive_ints("new_tokens"), tuple(prompts), raw["gate_prompt"],
                    raw["gate_steps"], float(raw["time_limit_seconds"]))


def model_weights(workload: Workload) -> tuple[GPT2Config, Parameters]:
    """The model every submission runs, and the gate's reference with it: GPT-2 124M, GPT-2's init with
    noise on the biases and layernorm weights (so a kernel that drops a bias shows), from the table's seed."""
    config = preset("gpt2")
    return config, perturbed_parameters(config, workload.weights_seed)


def configurations(workload: Workload) -> list[Configuration]:
    """Every batch size x count of new tokens x prompt, batch sizes outermost."""
    return [Configuration(b, n, p) for b, n, p in itertools.product(workload.batches, workload.new_tokens,
                                                                    range(len(workload.prompts)))]


def geometric_mean(values) -> float:
    values = list(values)
    if not values or min(values) <= 0:
        raise ValueError("a geometric mean needs positive values")
    return math.exp(sum(math.log(v) for v in values) / len(values))


@dataclasses.dataclass(frozen=True)
class GateOutputs:
    """What the worker saw in the gate's calls, all from the submission's kernels."""
    logits: np.ndarray              # (T, V): one forward pass over the gate prompt
    cached_logits: np.ndarray       # (steps + 1, V): the prefill's last row, then each cached decode step
    recomputed_logits: np.ndarray   # the same positions, every step a full forward pass
    cached_tokens: np.ndarray       # (steps,) greedy tokens of the cached path
    recomputed_tokens: np.ndarray   # and of the recomputing path

    def save(self, directory: Path) -> None:
        np.savez(Path(directory) / GATE_FILE, **dataclasses.asdict(self))

    @classmethod
    def load(cls, directory: Path) -> GateOutputs | None:
        path = Path(directory) / GATE_FILE
        try:
            with np.load(path) as saved:
                return cls(**{f.name: saved[f.name] for f in dataclasses.fields(cls)})
        except (OSError, KeyError, ValueError):
            return None


def gate_failure(outputs: GateOutputs | None, reference_logits: np.ndarray, allowed: float) -> str | None:
    """Why the submission fails the gate, or None: its logits against the float64 reference within
    `allowed`, and its cached decoding against its own recomputation (same tokens, logits within `allowed`)."""
    if outputs is None:
        return "the gate's outputs are missing (the worker did not get that far)"
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
    seconds: float
    tokens: int  # new tokens generated: batch x new_tokens

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds


def save_rows(rows: list[Row], directory: Path) -> None:
    (Path(directory) / ROWS_FILE).write_text(json.dumps(
        [dataclasses.asdict(r.configuration) | {"seconds": r.seconds, "tokens": r.tokens} for r in rows]))


def load_rows(directory: Path, workload: Workload) -> list[Row]:
    """The worker's timed rows, only for configurations of the workload, each once."""
    path = Path(directory) / ROWS_FILE
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    wanted, rows = set(configurations(workload)), {}
    for entry in raw if isinstance(raw, list) else []:
        try:
            configuration = Configuration(entry["batch"], entry["new_tokens"], entry["prompt"])
            row = Row(configuration, float(entry["seconds"]), int(entry["tokens"]))
        except (KeyError, TypeError, ValueError):
            continue
        if (configuration in wanted and row.seconds > 0
                and row.tokens == configuration.batch * configuration.new_tokens):
            rows.setdefault(configuration, row)
    return list(rows.values())


@dataclasses.dataclass
class Standing:
    submission: str
    score: float | None    # the geometric mean of tok/s; None: no score
    reason: str
    rows: list[Row]


def standing(submission: str, workload: Workload, gate_reason: str | None, rows: list[Row],
             crash: str | None = None) -> Standing:
    """The submission's score, or why it has none: a failed gate, a crash, missing configurations."""
    if gate_reason is not None:
        return Standing(submission, None, f"failed the correctness gate: {gate_reason}", rows)
    if crash is not None:
        return Standing(submission, None, crash, rows)
    expected = len(configurations(workload))
    if len(rows) < expected:
        return Standing(submission, None, f"only {len(rows)} of {expected} configurations ran", rows)
    score = geometric_mean(r.tokens_per_second for r in rows)
    return Standing(submission, score, f"geometric mean of {expected} configurations", rows)


def console_table(result: Standing) -> str:
    lines = [f"submission: {result.submission}", f"{'configuration':28s} {'seconds':>9s} {'tok/s':>10s}"]
    lines += [f"{r.configuration.name:28s} {r.seconds:9.3f} {r.tokens_per_second:10.0f}" for r in result.rows]
    score = f"{result.score:.0f} tok/s" if result.score is not None else "no score"
    lines.append(f"{'score':28s} {score}  ({result.reason})")
    return "\n".join(lines)


def gradescope_fields(result: Standing) -> dict:
    """Gradescope's leaderboard entry (results.json's "leaderboard"), and the output students see."""
    value = round(result.score, 1) if result.score is not None else 0
    return {"leaderboard": [{"name": "tok/s (geometric mean)", "value": value, "order": "desc"}],
            "output": console_table(result)}
