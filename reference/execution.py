"""Executing one call of a host function on a case, and the record of what it left behind.

`execute(function, problem)` is what the kernel tests run:

1. the case's inputs go to the GPU, every output is filled with NaN (or with its
   starting content, NaN where the call must write), scalars go as they are;
2. the call runs under kernel_runtime.recording: its tape (kernel_runtime.tape) holds
   its kernels' launches and the constants it writes, as data; a CuPy operation that
   computes or copies device data to the host is refused, by name (cuBLAS through
   cupy.cublas is taped instead, when the caller permits it: milestone 2's cuBLAS
   variant);
3. outputs, and inputs as the call left them, come back as host arrays;
4. the tape, read back from its JSON as any other process would read it, is replayed
   (kernel_runtime.replay: its programs compiled anew, none of the caller's Python) on
   the case's other inputs (same sizes, another seed): outputs that do not come from
   the call's own kernels do not follow the new inputs.

The grader splits this in two: its worker only records (`record_call`) and saves the
tapes (`save_records`); its replayer, a process that never imports the submission,
replays each tape (`replay_on`) on two sets of inputs that only it and the grader
know, and those replayed outputs are all that is judged (reference.judging).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Callable

import numpy as np

from gpt2kit.kernel_runtime import recording
from gpt2kit.kernel_runtime.replay import count_instructions, replay
from gpt2kit.kernel_runtime.tape import Tape, TapeError, plain
from gpt2kit.reference.registry import build
from gpt2kit.reference.spec import Problem

RECORDS = "records.jsonl"
CUDA_CONTEXT_LOST = 3  # exit status of a process whose CUDA context a call destroyed; its records say how
MAX_RECORDS_BYTES = 2**30  # a worker's records file past this is not read


@dataclasses.dataclass
class Execution:
    """What one call of a host function left behind, or why it could not run."""

    function: str
    case_id: str | None                  # None: the host function could not even be loaded
    error: str | None = None             # the exception the call raised
    refused: str | None = None           # the first operation refused while it ran
    tape: Tape | None = None             # what it did on the GPU; None: called on NumPy arrays, or no tape
    outputs: dict | None = None          # output name -> host array
    inputs_after: dict | None = None     # input name -> host array, as the call left them
    replay_outputs: dict | None = None   # outputs of the tape replayed on the other inputs
    replay_error: str | None = None

    @property
    def launches(self) -> int | None:
        """Kernels of its own it launched; None: called on NumPy arrays."""
        return None if self.tape is None else len(self.tape.launches)

    @property
    def library_calls(self) -> int:
        return 0 if self.tape is None else len(self.tape.library_calls)

    @property
    def cuda_error(self) -> bool:
        """Whether the call died of a CUDA error (sticky: nothing later in its process can run)."""
        return is_cuda_error(self.error) or is_cuda_error(self.replay_error)


def is_cuda_error(description: str | None) -> bool:
    """Whether an error's description (describe's) is a CUDA error, which leaves its process's context unusable."""
    return description is not None and ("cudaError" in description or "CUDA_ERROR" in description)


def record_call(function: Callable, problem: Problem, permit: tuple[str, ...] = ()) -> Execution:
    """Call `function` on the problem's inputs (on the GPU) under a recording: its error, refusal, tape, and
    outputs and inputs as the call left them."""
    import cupy

    execution = Execution(problem.spec.function, problem.case.id)
    args = call_arguments(problem, cupy)
    try:
        with recording.record(permit, args) as recorded:
            try:
                function(*args.values())
            finally:
                execution.refused, execution.tape = recorded.refused, recorded.tape
        cupy.cuda.runtime.deviceSynchronize()
    except Exception as err:  # a failing submission must produce a record, not a crash
        execution.error = describe(err)
        return execution
    execution.outputs, execution.inputs_after = _collect(args, problem.outputs), _collect(args, problem.inputs())
    return execution


def execute(function: Callable, problem: Problem, device: str = "gpu", permit: tuple[str, ...] = ()) -> Execution:
    """Call `function` on the problem's inputs and collect what it left behind; then replay its tape.

    `permit` names the libraries the call may use (kernel_runtime.recording.LIBRARIES).

    device="cpu" passes NumPy arrays instead of CuPy ones and simply calls `function`
    again on the other inputs: for checking the checks themselves, without a GPU.
    """
    other = build(problem.case.other_inputs())
    if device == "cpu":
        execution = Execution(problem.spec.function, problem.case.id)
        args, other_args = call_arguments(problem, np), call_arguments(other, np)
        try:
            function(*args.values())
            function(*other_args.values())
        except Exception as err:
            execution.error = describe(err)
            return execution
        execution.outputs, execution.inputs_after = _collect(args, problem.outputs), _collect(args, problem.inputs())
        execution.replay_outputs = _collect(other_args, other.outputs)
        return execution

    execution = record_call(function, problem, permit)
    if execution.error is None:
        try:
            execution.replay_outputs, _, _ = replay_on(Tape.from_json(execution.tape.to_json()), other, permit)
        except Exception as err:
            execution.replay_error = describe(err)
    return execution


def replay_on(tape: Tape, problem: Problem, permit: tuple[str, ...] = (), classes=None) -> tuple[dict, dict, dict]:
    """Replay `tape` on the problem's inputs (fresh device arrays, outputs at their starting content), its
    library steps only those `permit` allows: its outputs, and its inputs as the replay left them, as host
    arrays; with instruction `classes`, the replay runs its programs instrumented (the same PTX) and the third
    item is what they executed (kernel -> class -> count, kernel_runtime.replay.count_instructions), else {}.
    A tape recorded on other sizes is refused."""
    import cupy

    args = call_arguments(problem, cupy)
    scalars = {k: v for k, v in args.items() if not isinstance(v, cupy.ndarray)}
    if {k: plain(v) for k, v in scalars.items()} != tape.scalars:
        raise TapeError(f"the tape was recorded with {tape.scalars}, not {scalars}")
    arrays = {k: v for k, v in args.items() if isinstance(v, cupy.ndarray)}
    counts = {}
    if classes:
        counts = count_instructions(tape, arrays, classes, permit)
    else:
        replay(tape, arrays, permit=permit)
    cupy.cuda.runtime.deviceSynchronize()
    return _collect(args, problem.outputs), _collect(args, problem.inputs()), counts


# --------------------------------------------------------------------------- the worker's records


def save_records(executions: list[Execution], directory: Path) -> None:
    """What a worker hands on: per call, its case, error, refusal and tape (no outputs: those are replayed)."""
    with open(Path(directory) / RECORDS, "a") as log:
        for e in executions:
            log.write(json.dumps({"function": e.function, "case": e.case_id, "error": e.error, "refused": e.refused,
                                  "tape": e.tape.to_json() if e.tape is not None else None}) + "\n")


def load_records(directory: Path) -> list[Execution]:
    """The records a worker saved in `directory`, each tape checked as it is read (one that does not read is
    kept as the call's error); a line that is no record is skipped, and so is a file too large to be a worker's."""
    path = Path(directory) / RECORDS
    if not path.exists() or path.stat().st_size > MAX_RECORDS_BYTES:
        return []
    executions = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            raw = json.loads(line)
            execution = Execution(str(raw["function"]), None if raw["case"] is None else str(raw["case"]),
                                  _text(raw["error"]), _text(raw["refused"]))
        except (ValueError, TypeError, KeyError, AttributeError):
            continue
        if raw["tape"] is not None:
            try:
                execution.tape = Tape.from_json(str(raw["tape"]))
            except TapeError as err:
                execution.error = execution.error or str(err)
        executions.append(execution)
    return executions


def _text(value) -> str | None:
    return None if value is None else str(value)[:2000]


def call_arguments(problem: Problem, xp) -> dict:
    """The call's arguments in order: inputs copied to `xp` (numpy or cupy), outputs at their
    starting content (NaN, or their initial content), in-place outputs the very input arrays."""
    args = {}
    for name, value in problem.args.items():
        if name in problem.spec.written:
            args[name] = starting_output(problem, name, value, xp)
        elif isinstance(value, np.ndarray):
            args[name] = xp.array(value)
        else:
            args[name] = value
    for output, source in problem.arguments.same_array.items():
        args[output] = args[source]
    return args


def starting_output(problem: Problem, name: str, shape, xp, dtype=np.float32):
    """An output as the call finds it: its initial content, else NaN everywhere (never written shows). An integer
    output (token ids, counts) keeps its initial content's dtype, where a value no answer holds marks what the
    call must write. An output the case leaves out (None: matmul_backward's dbias without a bias) stays None."""
    if shape is None:
        return None
    if name in problem.arguments.initial:
        initial = problem.arguments.initial[name]
        return xp.array(initial, dtype=initial.dtype if initial.dtype.kind in "iu" else dtype)
    return xp.full(shape, np.nan, dtype=dtype)


def _collect(args: dict, names) -> dict:
    return {name: (args[name].get() if hasattr(args[name], "get") else np.array(args[name])) for name in names}


def describe(err: BaseException) -> str:
    """An exception as one line: its type and up to three lines of its message."""
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {' | '.join(lines[:3]) if lines else type(err).__name__}"
