"""Ranking submissions for the leaderboard (grading.leaderboard): each one's worker run under
the table's time limit, its gate judged here against the float64 reference computed here."""

from __future__ import annotations

import dataclasses
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from gpt2.logits_check import allowed_logit_error
from gpt2.model import GPT2
from gpt2.tokenizer import get_tokenizer
from grading.grade import run_worker
from grading.leaderboard import GateOutputs, Standing, Workload, gate_failure, load_rows, model_weights, standing
from reference.precision import Profile


@dataclasses.dataclass(frozen=True)
class Gate:
    """What the gate compares against, computed here, never in a worker."""
    reference_logits: np.ndarray  # (T, V): the float64 reference over the gate prompt
    allowed: float                # gpt2.logits_check's allowance for the submissions' profile


def make_gate(workload: Workload, profile: Profile) -> Gate:
    config, params = model_weights(workload)
    tokens = np.array([get_tokenizer().encode(workload.gate_prompt)], np.int32)
    reference = GPT2(config, params, backend="reference")(tokens)
    return Gate(reference[0], allowed_logit_error((config, params), tokens, reference, profile))


def rank_submission(submission: Path, workload: Workload, gate: Gate, table: Path, variants: tuple[str, ...],
                    progress=lambda message: None) -> Standing:
    """Run the submission's worker under the time limit, then judge its gate and score its rows."""
    with tempfile.TemporaryDirectory(prefix="leaderboard-") as out:
        try:
            crash = run_worker("grading.leaderboard_worker",
                               ["--submission", str(Path(submission).resolve()), "--table", str(Path(table).resolve()),
                                *(f"--variant={v}" for v in variants)], Path(out), workload.time_limit_seconds,
                               progress)
        except subprocess.TimeoutExpired:
            crash = f"timed out after {workload.time_limit_seconds:g} s"
        outputs, rows = GateOutputs.load(Path(out)), load_rows(Path(out), workload)
    reason = gate_failure(outputs, gate.reference_logits, gate.allowed) if outputs is not None or crash is None else None
    return standing(str(submission), workload, reason, rows, crash)
