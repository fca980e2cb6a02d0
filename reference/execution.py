"""Executing one call of a host function on a case, and the record of what it left behind.

`execute(function, problem)` is what the tests and the grader's worker run:

1. the case's inputs go to the GPU, every output is filled with NaN (or with its
   starting content, NaN where the call must write), scalars go as they are;
2. the call runs under kernel_runtime.recording: the kernels it launches and the
   constants it writes are taped, and a CuPy operation that computes or copies device
   data to the host is refused, by name (cuBLAS through cupy.cublas is taped and
   counted instead, when the caller permits it: milestone 2's cuBLAS variant);
3. outputs, and inputs as the call left them, come back as host arrays;
4. the tape is replayed on the case's other inputs (same sizes, another seed), written
   into the same buffers: outputs that do not come from the call's own kernels do not
   follow the new inputs.

The result is an `Execution`: a typed record that also owns its storage, one JSON line
in records.jsonl plus one .npz of arrays per case, which is how the grader's worker
hands its results to the grader. Judging is reference.judging's, in another process.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Callable

import numpy as np

from kernel_runtime import recording
from reference.registry import build
from reference.spec import Problem

RECORDS = "records.jsonl"
CUDA_CONTEXT_LOST = 3  # exit status of a worker whose CUDA context a call destroyed; its records say how


@dataclasses.dataclass
class Execution:
    """What one call of a host function left behind, or why it could not run."""

    function: str
    case_id: str | None                  # None: the host function could not even be loaded
    error: str | None = None             # the exception the call raised
    refused: str | None = None           # the first operation refused while it ran
    launches: int | None = None          # kernels of its own it launched; None: called on NumPy arrays
    kernels_launched: list | None = None  # their names, each once
    library_calls: int = 0               # permitted library calls (cuBLAS) it made
    outputs: dict | None = None          # output name -> host array
    inputs_after: dict | None = None     # input name -> host array, as the call left it
    replay_outputs: dict | None = None   # outputs of the taped launches replayed on the other inputs
    replay_error: str | None = None

    @property
    def cuda_error(self) -> bool:
        """Whether the call died of a CUDA error (sticky: nothing later in its process can run)."""
        return self.error is not None and ("cudaError" in self.error or "CUDA_ERROR" in self.error)

    _ARRAYS = {"out_": "outputs", "in_": "inputs_after", "replay_": "replay_outputs"}

    def save(self, directory: Path) -> None:
        """Append this record to directory/records.jsonl, its arrays to directory/<case id>.npz."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                  if f.name not in self._ARRAYS.values()}
        arrays = {prefix + name: array for prefix, field in self._ARRAYS.items()
                  for name, array in (getattr(self, field) or {}).items()}
        if arrays:
            np.savez(Path(directory) / f"{self.case_id}.npz", **arrays)
        with open(Path(directory) / RECORDS, "a") as log:
            log.write(json.dumps(fields) + "\n")

    @classmethod
    def load_all(cls, directory: Path) -> list[Execution]:
        """Every record saved in `directory`; a line that does not parse is no record."""
        path = Path(directory) / RECORDS
        executions = []
        for line in (path.read_text().splitlines() if path.exists() else []):
            try:
                fields = json.loads(line)
                execution = cls(**{k: v for k, v in fields.items() if k not in cls._ARRAYS.values()})
            except (ValueError, TypeError):
                continue
            arrays = Path(directory) / f"{execution.case_id}.npz"
            if execution.case_id is not None and arrays.exists():
                with np.load(arrays) as saved:
                    for prefix, field in cls._ARRAYS.items():
                        found = {k[len(prefix):]: saved[k] for k in saved.files if k.startswith(prefix)}
                        setattr(execution, field, found or None)
            executions.append(execution)
        return executions


def execute(function: Callable, problem: Problem, device: str = "gpu", permit: tuple[str, ...] = ()) -> Execution:
    """Call `function` on the problem's inputs and collect what it left behind; then replay it.

    `permit` names the libraries the call may use (kernel_runtime.recording.LIBRARIES).

    device="cpu" passes NumPy arrays instead of CuPy ones and simply calls `function`
    again on the other inputs: for checking the checks themselves, without a GPU.
    """
    execution = Execution(problem.spec.function, problem.case.id)
    other = build(problem.case.other_inputs())
    if device == "cpu":
        args, other_args = call_arguments(problem, np), call_arguments(other, np)
        try:
            function(*args.values())
            function(*other_args.values())
        except Exception as err:
            execution.error = describe(err)
            return execution
        execution.outputs, execution.inputs_after = _collect(args, problem.spec.outputs), _collect(args, problem.inputs())
        execution.replay_outputs = _collect(other_args, other.spec.outputs)
        return execution

    import cupy

    args = call_arguments(problem, cupy)
    try:
        with recording.record(permit) as tape:
            try:
                function(*args.values())
            finally:
                execution.refused, execution.launches = tape.refused, tape.launches
                execution.kernels_launched, execution.library_calls = tape.kernels_launched, tape.library_calls
        cupy.cuda.runtime.deviceSynchronize()
    except Exception as err:  # a failing submission must produce a record, not a crash
        execution.error = describe(err)
        return execution
    execution.outputs, execution.inputs_after = _collect(args, problem.spec.outputs), _collect(args, problem.inputs())
    try:
        _load(args, other)
        tape.replay()
        cupy.cuda.runtime.deviceSynchronize()
    except Exception as err:
        execution.replay_error = describe(err)
        return execution
    execution.replay_outputs = _collect(args, problem.spec.outputs)
    return execution


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
    """An output as the call finds it: its initial content, else NaN everywhere (never written shows)."""
    if name in problem.arguments.initial:
        return xp.array(problem.arguments.initial[name], dtype=dtype)
    return xp.full(shape, np.nan, dtype=dtype)


def _load(args: dict, other: Problem) -> None:
    """Put the other problem's inputs and starting outputs into the same device buffers."""
    aliased = set(other.arguments.same_array)
    for name, value in other.args.items():
        if name in aliased:
            continue
        if name in other.spec.written:
            value = other.arguments.initial.get(name)
            if value is None:
                args[name].fill(np.nan)
                continue
        if isinstance(value, np.ndarray):
            if value.shape != args[name].shape:
                raise ValueError(f"{other.case.id}: its {name} has another shape than the recorded call's")
            args[name].set(np.ascontiguousarray(value, dtype=args[name].dtype))
        elif value != args[name]:
            raise ValueError(f"{other.case.id}: its {name} differs from the recorded call's")


def _collect(args: dict, names) -> dict:
    return {name: (args[name].get() if hasattr(args[name], "get") else np.array(args[name])) for name in names}


def describe(err: BaseException) -> str:
    """An exception as one line: its type and up to three lines of its message."""
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {' | '.join(lines[:3]) if lines else type(err).__name__}"
