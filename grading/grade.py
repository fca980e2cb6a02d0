"""Grading one submission: one worker process per item, judged here against our own references.

The inputs come from a seed the submission cannot know in advance (a fresh secret one
unless the TA passes --seed). The worker reports what each call left behind; this
process rebuilds the same cases, computes the float64 NumPy references and judges.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

from grading.items import Item, Scheme
from reference.execution import CUDA_CONTEXT_LOST, Execution
from reference.judging import judge
from reference.registry import build, cases
from reference.spec import Case

REPO_ROOT = Path(__file__).resolve().parents[1]


@dataclasses.dataclass
class ItemGrade:
    item: Item
    score: float
    reason: str
    cases_passed: int = 0
    cases_run: int = 0
    details: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class SubmissionGrade:
    submission: str
    seed: int
    items: list[ItemGrade]

    @property
    def score(self) -> float:
        return sum(g.score for g in self.items)

    @property
    def max_score(self) -> float:
        return sum(g.item.weight for g in self.items)


def grade_submission(submission: Path, scheme: Scheme, seed: int,
                     progress: Callable[[str], None] = lambda m: None) -> SubmissionGrade:
    grades = []
    for item in scheme.items:
        progress(f"  {item.title} ...")
        grade = grade_item(submission, item, scheme, seed)
        progress(f"  {item.title}: {grade.score:g}/{item.weight:g} ({grade.reason})")
        grades.append(grade)
    return SubmissionGrade(str(submission), seed, grades)


def grade_item(submission: Path, item: Item, scheme: Scheme, seed: int) -> ItemGrade:
    """Run the item's worker process on the submission, then score what it left behind."""
    with tempfile.TemporaryDirectory(prefix=f"grade-{item.name}-") as out:
        command = [sys.executable, "-m", "grading.worker", "--submission", str(Path(submission).resolve()),
                   "--item", item.name, "--seed", str(seed), "--out", out]
        env = os.environ | {"PYTHONPATH": str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=scheme.time_limit_seconds,
                                  cwd=out, env=env)
        except subprocess.TimeoutExpired:
            return ItemGrade(item, 0.0, f"timed out after {scheme.time_limit_seconds:g} s (a kernel that never "
                                        f"returns?)", 0, len(item_cases(item, seed)))
        crash = _crash_reason(done.returncode, done.stderr)
        return score_item(item, scheme, seed, Path(out), crash)


def score_item(item: Item, scheme: Scheme, seed: int, out: Path, crash: str | None = None) -> ItemGrade:
    """Judge the worker's records in `out` against our own references and apply the scheme."""
    expected = item_cases(item, seed)
    records = Execution.load_all(out)
    judged = {}  # by case id: a case counts once, and only if it is one of ours
    for record in records:
        case = expected.get(record.case_id)
        if case is not None and record.function == case.function:
            judged[case.id] = judge(build(case), record)
    results = list(judged.values())
    passed = sum(r.passed for r in results)
    details = [f"{r.case.function} {r.case.id}: {r.message}" for r in results if not r.passed]
    load_errors = [r.error for r in records if r.case_id is None]
    cuda_errors = [r.error for r in records if r.cuda_error]
    reason = (load_errors[0] if load_errors else crash if crash else
              f"CUDA error: {cuda_errors[0]}" if cuda_errors else
              f"only {len(results)} of {len(expected)} cases ran" if len(results) < len(expected) else None)
    if reason is not None:
        return ItemGrade(item, 0.0, reason, passed, len(expected), details)
    if passed == len(expected):
        return ItemGrade(item, item.weight, f"all {passed} cases pass", passed, passed)
    if scheme.partial_credit == "fraction":
        return ItemGrade(item, item.weight * passed / len(expected),
                         f"{passed} of {len(expected)} cases pass; first failure: {details[0]}", passed,
                         len(expected), details)
    return ItemGrade(item, 0.0, f"{len(expected) - passed} of {len(expected)} cases fail; first: {details[0]}",
                     passed, len(expected), details)


def item_cases(item: Item, seed: int) -> dict[str, Case]:
    """Every test case of the item's host functions for this seed, by case id."""
    return {c.id: c for f in item.functions for c in cases(f, seed)}


def _crash_reason(returncode: int, stderr: str) -> str | None:
    """Why the worker died, if it did (a lost CUDA context shows in the records instead)."""
    if returncode < 0:
        return f"the worker process was killed by {signal.Signals(-returncode).name} (a crash in the submission's code?)"
    if returncode not in (0, CUDA_CONTEXT_LOST):
        last = (stderr.strip().splitlines() or ["no output"])[-1]
        return f"the worker process failed (exit {returncode}): {last}"
    return None
