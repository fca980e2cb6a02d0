"""Grading one submission: a worker records, a replayer replays, this process judges.

For each item:
1. the worker (grading.worker), a process that runs the submission, calls its host
   functions on every case under a recording and saves each call's tape: what its own
   kernels did, as data. Whatever else it writes counts for nothing. It runs in a sandbox
   (grading.sandbox): the milestone's worker kit, every kernel body stubbed, on its path, a
   directory of its own, and, where the OS allows, no view of the TA's checkout or of other
   submissions;
2. once the worker has ended (its whole process group killed), the replayer
   (grading.replayer), a process that never imports the submission, compiles the
   tapes' programs itself and replays every case's tape on two sets of inputs drawn
   from the grader's secret seed, which it gets on a pipe, and counts what the
   kernels execute for the technique's evidence;
3. this process draws the same inputs, computes the float64 references, and judges
   the replayed outputs alone, under each variant's precision profile, and the
   technique's evidence from the tapes' programs and the replay's counts.

The secret seed is drawn fresh for every submission unless the TA passes --seed (to
repeat a run: a seed on the grader's command line is one the submission could read).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Callable

import gpt2kit
from gpt2kit.grading.items import Item, Scheme, capped_total
from gpt2kit.grading.channel import Channel, ChannelError
from gpt2kit.grading.provenance import staff_kernels_taped
from gpt2kit.grading.replayer import split_arrays
from gpt2kit.grading.sandbox import Sandbox, WorkerDirectory, worker_sandbox
from gpt2kit.kernel_runtime.device import PRIVATE_KERNEL_CACHES
from gpt2kit.kernel_runtime.errors import KitError
from gpt2kit.kernel_runtime.loader import kernels_directory
from gpt2kit.reference.execution import CUDA_CONTEXT_LOST, Execution, load_records
from gpt2kit.reference.judging import Result, judge
from gpt2kit.reference.registry import build, cases
from gpt2kit.reference.techniques import TECHNIQUES, missing_technique, products_of
from gpt2kit.reference.variants import Variant, first_unwritten, resolve_profile

RECORDING_SEED = 0  # the inputs the worker's calls are recorded on: no secret, since only replays are judged


@dataclasses.dataclass
class ItemGrade:
    item: Item
    score: float
    reason: str
    cases_passed: int = 0
    cases_run: int = 0
    details: list[str] = dataclasses.field(default_factory=list)
    staff_kernels: list[str] = dataclasses.field(default_factory=list)  # the staff's own, taped (grading.provenance)


@dataclasses.dataclass
class SubmissionGrade:
    submission: str
    seed: int
    items: list[ItemGrade]
    menu_cap_points: float = 0.0  # the scheme's: the menu items count together up to this
    milestone: int = 1            # the scheme's: whose weights file made this grade
    isolation: str = ""           # what its workers could read (grading.sandbox's summary line)

    @property
    def score(self) -> float:
        return capped_total([(g.item, g.score) for g in self.items], self.menu_cap_points)

    @property
    def max_score(self) -> float:
        return capped_total([(g.item, g.item.weight) for g in self.items], self.menu_cap_points)


def grade_submission(submission: Path, scheme: Scheme, seed: int, progress: Callable[[str], None] = lambda m: None,
                     sandbox: Sandbox | None = None) -> SubmissionGrade:
    """Grade every item of `scheme`, each worker run in `sandbox` (default: the milestone's, worker_sandbox)."""
    sandbox = sandbox or worker_sandbox(scheme.milestone)
    grades = []
    for item in scheme.items:
        progress(f"  {item.title} ...")
        grade = grade_item(submission, item, scheme, seed, sandbox)
        progress(f"  {item.title}: {grade.score:g}/{item.weight:g} ({grade.reason})")
        grades.append(grade)
    return SubmissionGrade(str(submission), seed, grades, scheme.menu_cap_points, scheme.milestone, sandbox.summary)


def grade_item(submission: Path, item: Item, scheme: Scheme, seed: int, sandbox: Sandbox | None = None) -> ItemGrade:
    """Record the item's calls in a worker (in `sandbox`, default the milestone's), replay them in the replayer
    on the secret seed's inputs, judge here."""
    sandbox = sandbox or worker_sandbox(scheme.milestone)
    with sandbox.directory(submission) as place:
        try:
            crash = run_worker(sandbox, place, ["-m", "gpt2kit.grading.worker", "--submission", str(place.submission),
                                                "--weights", str(place.copy_in(scheme.path)), "--item", item.name,
                                                "--seed", str(RECORDING_SEED), "--out", str(place.work)],
                               scheme.time_limit_seconds)
        except subprocess.TimeoutExpired:
            return with_stub_named(ItemGrade(item, 0.0, f"timed out after {scheme.time_limit_seconds:g} s (a kernel "
                                                        f"that never returns?)", 0, case_count(item, seed)), submission)
        replayed = replay(item, scheme, seed, place.work)
        return with_stub_named(score_item(item, scheme, seed, place.work, replayed, crash), submission)


def with_stub_named(grade: ItemGrade, submission: Path) -> ItemGrade:
    """`grade`, its reason led by the line naming a variant of its item still a starter kit's stub when it lost
    points ("gelu_forward: not written yet (kernels/gelu.py); ..."). The score stays what the cases earned: a
    kernel written under a TODO line left in place is graded by what it computes."""
    if grade.score >= grade.item.weight:
        return grade
    try:
        stub = first_unwritten(grade.item.variants, kernels_directory(submission))
    except KitError:  # no kernels directory: the grade's reason says what its worker found
        return grade
    return dataclasses.replace(grade, reason=f"{stub}; {grade.reason}") if stub else grade


def run_worker(sandbox: Sandbox, place: WorkerDirectory, arguments: list[str], time_limit: float,
               progress: Callable[[str], None] = lambda line: None) -> str | None:
    """Run `python arguments` in `sandbox`, in `place` (grading.sandbox: the worker kit on its path, nothing of
    this kit's checkout), passing each line it writes to stderr to `progress` as it comes; why it died
    (crash_reason), or None. Past `time_limit` seconds it is killed and subprocess.TimeoutExpired raised. It
    runs in a process group of its own, and the whole group is killed when it ends: nothing it started outlives
    it."""
    process = sandbox.popen([sys.executable, *arguments], place, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    lines = []

    def relay():
        for line in process.stderr:
            lines.append(line)
            progress(line.rstrip())

    reader = threading.Thread(target=relay, daemon=True)
    reader.start()
    try:
        returncode = process.wait(timeout=time_limit)
    finally:
        kill_group(process)
        reader.join(timeout=10)
    return crash_reason(sandbox.status(returncode), "".join(lines))


def kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()


@dataclasses.dataclass
class Replayed:
    """What the replayer sent back for an item: per variant, its cases' replays and its counted evidence."""
    frames: dict = dataclasses.field(default_factory=dict)    # (variant, case shape id) -> (fields, arrays)
    counts: dict = dataclasses.field(default_factory=dict)    # variant -> (kernel -> class -> count,
                                                              #   kernel -> classes in its PTX, error)
    crash: str | None = None


def trusted_environment() -> dict[str, str]:
    """The environment of a trusted process (the grader's replayer, the leaderboard's): this kit's checkout on
    its path, its compiled kernels kept in memory."""
    return os.environ | {"PYTHONPATH": str(gpt2kit.PATH_ENTRY)} | PRIVATE_KERNEL_CACHES


def replayer_command(records: Path, scheme: Scheme, item: Item) -> list[str]:
    # -P: not the working directory on the path; -s: not the user's site-packages
    return [sys.executable, "-P", "-s", "-m", "gpt2kit.grading.replayer", "--records", str(records),
            "--weights", str(Path(scheme.path).resolve()), "--item", item.name]


def replay(item: Item, scheme: Scheme, seed: int, records: Path) -> Replayed:
    """Run the replayer on the worker's records, the secret seed on its standard input."""
    replayed, errors = Replayed(), []
    env = trusted_environment()
    with tempfile.TemporaryDirectory(prefix="replay-") as here:
        process = subprocess.Popen(replayer_command(records, scheme, item), stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=here, env=env)
        channel = Channel(process.stdout, process.stdin)

        def collect():
            try:
                while True:  # until the replayer ends and the pipe closes
                    message = channel.receive("case", "counts")
                    fields = message.fields
                    if message.kind == "counts":
                        replayed.counts[fields["variant"]] = (fields["counts"], {k: set(v) for k, v in
                                                                                  fields["static"].items()},
                                                              fields["error"])
                    else:
                        replayed.frames[(fields["variant"], fields["case"])] = (fields, message.arrays)
            except ChannelError:
                pass

        readers = [threading.Thread(target=collect, daemon=True),
                   threading.Thread(target=lambda: errors.extend(process.stderr.read().decode(errors="replace")
                                                                 .splitlines()), daemon=True)]
        for reader in readers:
            reader.start()
        channel.send("seed", seed=seed)
        process.stdin.close()
        try:
            returncode = process.wait(timeout=scheme.time_limit_seconds)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            replayed.crash = (f"the replay timed out after {scheme.time_limit_seconds:g} s (a kernel that never "
                              f"returns?)")
            return replayed
        for reader in readers:
            reader.join(timeout=60)
    crash = crash_reason(returncode, "\n".join(errors))
    replayed.crash = crash and crash.replace("the worker process", "the replay")
    return replayed


def score_item(item: Item, scheme: Scheme, seed: int, records: Path, replayed: Replayed,
               crash: str | None = None) -> ItemGrade:
    """Judge the replays of the worker's records (a directory per variant) against our own references, and
    apply the scheme; the grade names the staff solution's kernels its calls launched (grading.provenance)."""
    expected = case_count(item, seed)
    results, load_errors, cuda_errors, missing_techniques, staff_kernels = [], [], [], [], []
    for variant in item.variants:
        judged = judge_variant(variant, seed, Path(records) / variant.name, replayed)
        results += [(variant.name, r) for r in judged.results]
        load_errors += judged.load_errors
        cuda_errors += judged.cuda_errors
        why = technique_missing(variant, seed, judged.executions, replayed) if variant.technique else None
        if why:
            missing_techniques.append(f"{variant.name}: {why}")
        staff_kernels += staff_kernels_taped(variant.name, (e.tape for e in judged.executions if e.tape))
    passed = sum(r.passed for _, r in results)
    details = [f"{name} {r.case.id}: {r.message}" for name, r in results if not r.passed]
    reason = (load_errors[0] if load_errors else crash if crash else
              f"CUDA error: {cuda_errors[0]}" if cuda_errors else replayed.crash if replayed.crash else
              f"only {len(results)} of {expected} cases ran" if len(results) < expected else None)
    if reason is not None:
        grade = ItemGrade(item, 0.0, reason, passed, expected, details)
    elif passed == expected and missing_techniques:
        grade = ItemGrade(item, 0.0, f"all {passed} cases pass, but {missing_techniques[0]}", passed, expected,
                          missing_techniques)
    elif passed == expected:
        grade = ItemGrade(item, item.weight, f"all {passed} cases pass", passed, passed)
    elif scheme.partial_credit == "fraction" and not missing_techniques:
        grade = ItemGrade(item, item.weight * passed / expected,
                          f"{passed} of {expected} cases pass; first failure: {details[0]}", passed, expected,
                          details)
    else:
        grade = ItemGrade(item, 0.0, f"{expected - passed} of {expected} cases fail; first: {details[0]}",
                          passed, expected, details)
    return dataclasses.replace(grade, staff_kernels=staff_kernels)


@dataclasses.dataclass
class VariantJudgement:
    results: list[Result]          # a case counts once, and only if it is one of ours
    executions: list[Execution]    # the judged calls, with their tapes
    load_errors: list[str]         # the host function could not be loaded
    cuda_errors: list[str]         # a call or its replay died of a CUDA error


def judge_variant(variant: Variant, seed: int, records_dir: Path, replayed: Replayed) -> VariantJudgement:
    """Each of the variant's secret cases, judged under its profile on what the replayer sent back for the
    worker's record of that case (the record alone, when it holds no tape to replay: an error, a refusal)."""
    records = load_records(records_dir)
    by_shape = {}
    for record in records:
        if record.case_id is not None and record.function == variant.function:
            by_shape.setdefault(record.case_id, record)
    judged, executions = [], []
    for case in cases(variant.function, seed):
        record = by_shape.get(case.shape_id)
        if record is None:
            continue
        execution = dataclasses.replace(record, case_id=case.id)
        frame = replayed.frames.get((variant.name, case.shape_id))
        if frame is not None:
            fields, arrays = frame
            execution.outputs, execution.inputs_after, execution.replay_outputs = split_arrays(arrays)
            execution.replay_error = fields["replay_error"]
            if execution.replay_error and not arrays:  # the tape does not replay at all: that is the case's error
                execution.error = execution.error or f"its tape does not replay: {execution.replay_error}"
        elif record.error is None and record.refused is None and record.tape is not None:
            execution.error = "the replay did not reach this case"
        judged.append(judge(build(case), execution, profile=resolve_profile(None, [variant], environ={})))
        executions.append(execution)
    return VariantJudgement(judged, executions, [r.error for r in records if r.case_id is None],
                            [e.error or e.replay_error for e in executions if e.cuda_error])


def technique_missing(variant: Variant, seed: int, executions: list[Execution], replayed: Replayed) -> str | None:
    """Why the variant's calls did not show its technique (its tapes' programs, the replay's counts, the calls
    themselves); None when they did."""
    technique = TECHNIQUES[variant.technique]
    counts = static = None
    if technique.in_ptx:
        counts, static, error = replayed.counts.get(variant.name, (None, None, "the replay sent no counts"))
        if error is not None or counts is None:
            return f"no evidence of {variant.technique} could be counted: {error}"
    products = products_of(variant.function, cases(variant.function, seed)) if technique.passes else 0
    try:
        return missing_technique(variant.technique, executions, counts, products, static)
    except Exception as err:  # its programs do not compile for the course's GPU
        return f"cannot check for {variant.technique}: {err}".splitlines()[0]


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
