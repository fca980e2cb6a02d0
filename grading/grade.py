"""Grading one submission: one worker process per item, judged here against our own references.

The inputs come from a seed the submission cannot know in advance (a fresh secret one
unless the TA passes --seed). The worker reports what each call of each of the item's
variants left behind, and what its technique's evidence shows; this process rebuilds
the same cases, computes the float64 NumPy references and judges each variant under
its precision profile.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Callable

from grading.items import Item, Scheme, capped_total
from grading.worker import TECHNIQUE_FILE
from reference.execution import CUDA_CONTEXT_LOST, Execution
from reference.judging import Result, judge
from reference.registry import build, cases
from reference.variants import Variant, resolve_profile

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
    menu_cap_points: float = 0.0  # the scheme's: the menu items count together up to this
    milestone: int = 1            # the scheme's: whose weights file made this grade

    @property
    def score(self) -> float:
        return capped_total([(g.item, g.score) for g in self.items], self.menu_cap_points)

    @property
    def max_score(self) -> float:
        return capped_total([(g.item, g.item.weight) for g in self.items], self.menu_cap_points)


def grade_submission(submission: Path, scheme: Scheme, seed: int,
                     progress: Callable[[str], None] = lambda m: None) -> SubmissionGrade:
    grades = []
    for item in scheme.items:
        progress(f"  {item.title} ...")
        grade = grade_item(submission, item, scheme, seed)
        progress(f"  {item.title}: {grade.score:g}/{item.weight:g} ({grade.reason})")
        grades.append(grade)
    return SubmissionGrade(str(submission), seed, grades, scheme.menu_cap_points, scheme.milestone)


def grade_item(submission: Path, item: Item, scheme: Scheme, seed: int) -> ItemGrade:
    """Run the item's worker process on the submission, then score what it left behind."""
    with tempfile.TemporaryDirectory(prefix=f"grade-{item.name}-") as out:
        try:
            crash = run_worker("grading.worker", ["--submission", str(Path(submission).resolve()),
                                                  "--weights", str(Path(scheme.path).resolve()), "--item", item.name,
                                                  "--seed", str(seed)], Path(out), scheme.time_limit_seconds)
        except subprocess.TimeoutExpired:
            return ItemGrade(item, 0.0, f"timed out after {scheme.time_limit_seconds:g} s (a kernel that never "
                                        f"returns?)", 0, case_count(item, seed))
        return score_item(item, scheme, seed, Path(out), crash)


def run_worker(module: str, arguments: list[str], out: Path, time_limit: float,
               progress: Callable[[str], None] = lambda line: None) -> str | None:
    """Run `python -m module arguments --out out` in `out`, with this kit on its path, passing each line it
    writes to stderr to `progress` as it comes; why it died (crash_reason), or None. Past `time_limit`
    seconds it is killed and subprocess.TimeoutExpired raised."""
    command = [sys.executable, "-m", module, *arguments, "--out", str(out)]
    env = os.environ | {"PYTHONPATH": str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=out,
                               env=env)
    lines = []

    def relay():
        for line in process.stderr:
            lines.append(line)
            progress(line.rstrip())

    reader = threading.Thread(target=relay, daemon=True)
    reader.start()
    try:
        returncode = process.wait(timeout=time_limit)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise
    finally:
        reader.join(timeout=10)
    return crash_reason(returncode, "".join(lines))


def score_item(item: Item, scheme: Scheme, seed: int, out: Path, crash: str | None = None) -> ItemGrade:
    """Judge the worker's records in `out` (a directory per variant) against our own references, and
    apply the scheme."""
    expected = case_count(item, seed)
    results, load_errors, cuda_errors, missing_techniques = [], [], [], []
    for variant in item.variants:
        judged = judge_variant(variant, seed, Path(out) / variant.name)
        results += [(variant.name, r) for r in judged.results]
        load_errors += judged.load_errors
        cuda_errors += judged.cuda_errors
        why = technique_missing(variant, Path(out)) if variant.technique else None
        if why:
            missing_techniques.append(f"{variant.name}: {why}")
    passed = sum(r.passed for _, r in results)
    details = [f"{name} {r.case.id}: {r.message}" for name, r in results if not r.passed]
    reason = (load_errors[0] if load_errors else crash if crash else
              f"CUDA error: {cuda_errors[0]}" if cuda_errors else
              f"only {len(results)} of {expected} cases ran" if len(results) < expected else None)
    if reason is not None:
        return ItemGrade(item, 0.0, reason, passed, expected, details)
    if passed == expected and missing_techniques:
        return ItemGrade(item, 0.0, f"all {passed} cases pass, but {missing_techniques[0]}", passed, expected,
                         missing_techniques)
    if passed == expected:
        return ItemGrade(item, item.weight, f"all {passed} cases pass", passed, passed)
    if scheme.partial_credit == "fraction" and not missing_techniques:
        return ItemGrade(item, item.weight * passed / expected,
                         f"{passed} of {expected} cases pass; first failure: {details[0]}", passed, expected, details)
    return ItemGrade(item, 0.0, f"{expected - passed} of {expected} cases fail; first: {details[0]}",
                     passed, expected, details)


@dataclasses.dataclass
class VariantJudgement:
    results: list[Result]      # a case counts once, and only if it is one of ours
    load_errors: list[str]     # the host function could not be loaded
    cuda_errors: list[str]     # a call died of a CUDA error


def judge_variant(variant: Variant, seed: int, records_dir: Path) -> VariantJudgement:
    """Each of the variant's cases the worker recorded in `records_dir`, judged under its profile."""
    expected = {c.id: c for c in cases(variant.function, seed)}
    records = Execution.load_all(records_dir)
    judged = {}
    for record in records:
        case = expected.get(record.case_id)
        if case is not None and record.function == case.function:
            judged[case.id] = judge(build(case), record, profile=resolve_profile(None, [variant], environ={}))
    return VariantJudgement(list(judged.values()), [r.error for r in records if r.case_id is None],
                            [r.error for r in records if r.cuda_error])


def technique_missing(variant: Variant, out: Path) -> str | None:
    """Why the variant's calls did not show its technique, from the worker's evidence; None when they did."""
    try:
        evidence = json.loads((out / variant.name / TECHNIQUE_FILE).read_text())
    except (OSError, ValueError):
        evidence = {}
    if not isinstance(evidence, dict) or evidence.get("technique") != variant.technique:
        return f"no evidence of {variant.technique} was recorded"
    return evidence.get("missing")


def case_count(item: Item, seed: int) -> int:
    """How many cases the item's variants have for this seed."""
    return sum(len(cases(v.function, seed)) for v in item.variants)


def crash_reason(returncode: int, stderr: str) -> str | None:
    """Why the worker died, if it did (a lost CUDA context shows in the records instead)."""
    if returncode < 0:
        return f"the worker process was killed by {signal.Signals(-returncode).name} (a crash in the submission's code?)"
    if returncode not in (0, CUDA_CONTEXT_LOST):
        last = (stderr.strip().splitlines() or ["no output"])[-1]
        return f"the worker process failed (exit {returncode}): {last}"
    return None
