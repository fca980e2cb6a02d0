"""Replaying a tape (kernel_runtime.tape) on arrays of one's own, and counting what its kernels execute.

`replay(tape, arrays, permit)` runs a tape's steps on `arrays` (its named buffers, by
name) and on scratch buffers of its own, full of 0xFF bytes. Nothing of the code that
made the tape runs: each program is built here from its source by the one trusted
build (kernel_runtime.compiler.compile_ptx: hermetic, kernel_runtime.hermetic), its PTX
loaded with the driver, and launched with the tape's grid, block, shared memory and
arguments; constants are written from the tape's bytes. A library step calls its
allow-listed cupy.cublas function only if `permit` names its library (the caller's
item allows it, whatever the recording process claimed); otherwise the replay is
refused, naming the step. A tape's scratch is bounded by the call's own arrays
(scratch_limit), so a forged tape cannot ask for more memory than a call could need.
`PreparedTape(tape, ...)` is the same replay built once and run on many calls' arrays
(the leaderboard's model, whose every host-function call is a replay): its scratch is
kept and filled with 0xFF bytes again at every run, and CUDA graphs can capture it.

`count_instructions(tape, arrays, classes, permit)` replays the same way with every
program's PTX (the very same PTX) instrumented: after each instruction of a class
(say, tensor-core mma), an atomic add to a counter of that class and function, so
what the replay executes is counted, per kernel, and what only sits in the code counts
nothing. Its outputs are left in `arrays`, to be judged like any replay's. A class can
weigh its instructions (a tensor-core instruction counts the multiply-adds it does per
thread).

The grader's replayer runs this in a process of its own, on inputs only it knows;
the kernel tests run it in theirs.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import math
import re
from typing import Callable

import numpy as np

from gpt2kit.kernel_runtime import overlap
from gpt2kit.kernel_runtime import tape as tapes
from gpt2kit.kernel_runtime.compiler import compile_ptx, device_arch
from gpt2kit.kernel_runtime.device import allow_dynamic_shared, cupy

SCRATCH_FLOOR = 256 * 2**20   # scratch any call may have, whatever its sizes
SCRATCH_PER_BYTE = 64         # and this many bytes more per byte of the call's own arrays (attention's T x T
                              # scores per head are the largest the kit's calls keep, at 12x their inputs)


def replay(tape: tapes.Tape, arrays: dict, functions: Callable | None = None, permit: tuple[str, ...] = ()) -> None:
    """Run `tape`'s steps on `arrays` (CuPy arrays by buffer name) and scratch of its own, its library steps
    only those of the libraries `permit` names (keys of kernel_runtime.recording.LIBRARIES).
    `functions(program) -> name -> function` builds a program (default: the trusted build, loaded once)."""
    check_scratch(tape, arrays)
    PreparedTape(tape, functions, permit).run(arrays)


class PreparedTape:
    """A tape made ready to run on the arrays of many calls: its library steps checked against `permit`, its
    kernels built (by `functions`, as replay's) and loaded, its constants on the device. Every run queues its
    steps on the current stream and starts its scratch (allocated at the first run, then kept) full of 0xFF
    bytes again, so nothing one run leaves there reaches the next; after the first, a run allocates nothing,
    so a CUDA graph can capture it, and its kernels that wait for the previous one overlap it there as the kit's
    own launches do (kernel_runtime.overlap)."""

    def __init__(self, tape: tapes.Tape, functions: Callable | None = None, permit: tuple[str, ...] = ()):
        _check_library_steps(tape, permit)
        functions = functions or compiled_functions
        self.tape, self.scratch = tape, None
        self.steps = [self._prepared(step, functions) for step in tape.steps]

    def _prepared(self, step, functions: Callable):
        if isinstance(step, tapes.Launch):
            program = self.tape.programs[step.program]
            function = functions(program)(step.kernel)
            if step.shared_mem:
                allow_dynamic_shared(function.ptr, step.shared_mem)
            args = [(a.buffer, a.offset) if isinstance(a, tapes.Pointer) else a.value() for a in step.args]
            # launched as CudaKernel launches it: a kernel that waits for the previous one overlaps it in a graph
            overlapped = (overlap.waits_for_previous(program.source) and not program.cooperative
                          and all(isinstance(a, tuple) or overlap.passes(a) for a in args))
            return functools.partial(self._launch, function, step, args, program.cooperative, overlapped)
        if isinstance(step, tapes.Write):
            values = np.frombuffer(step.data, step.region.dtype)
            constant = values[0] if step.repeated else cupy.asarray(values.reshape(step.region.shape))
            return functools.partial(self._write, step.region, constant)
        return functools.partial(_call_library, step)

    def run(self, arrays: dict) -> None:
        """The tape's steps on `arrays` (CuPy arrays by buffer name), on the current stream."""
        if self.scratch is None:
            self.scratch = [cupy.empty(max(b.nbytes, 1), np.uint8) if b.name is None else None
                            for b in self.tape.buffers]
        for scratch in self.scratch:
            if scratch is not None:
                cupy.cuda.runtime.memsetAsync(scratch.data.ptr, 0xFF, scratch.nbytes,
                                              cupy.cuda.get_current_stream().ptr)
        memory = [scratch if scratch is not None else _named(buffer, arrays)
                  for buffer, scratch in zip(self.tape.buffers, self.scratch)]
        for step in self.steps:
            step(memory)

    @staticmethod
    def _launch(function, step: tapes.Launch, args: list, cooperative: bool, overlapped: bool, memory: list) -> None:
        values = tuple(np.uint64(memory[a[0]].data.ptr + a[1]) if isinstance(a, tuple) else a for a in args)
        if overlapped and overlap.launches_overlapped():
            overlap.launch(function.ptr, step.grid, step.block, values, shared_mem=step.shared_mem)
        else:
            function(step.grid, step.block, values, shared_mem=step.shared_mem, enable_cooperative_groups=cooperative)

    @staticmethod
    def _write(region: tapes.Region, constant, memory: list) -> None:
        view = _view(region, memory)
        if isinstance(constant, np.generic):
            view.fill(constant)
        else:
            view[...] = constant


def scratch_limit(arrays: dict) -> int:
    """The most scratch a replay gives a call on `arrays`."""
    return SCRATCH_FLOOR + SCRATCH_PER_BYTE * sum(array.nbytes for array in arrays.values())


def check_scratch(tape: tapes.Tape, arrays: dict) -> None:
    """TapeError when `tape` asks for more scratch than a call on `arrays` may have (scratch_limit)."""
    asked, limit = sum(b.nbytes for b in tape.buffers if b.name is None), scratch_limit(arrays)
    if asked > limit:
        raise tapes.TapeError(f"the tape asks for {asked:,} bytes of scratch; a call on these arrays may have at "
                              f"most {limit:,}")


def _check_library_steps(tape: tapes.Tape, permit: tuple[str, ...]) -> None:
    for step in tape.library_calls:
        if tapes.library_of(step.operation) not in permit:
            allowed = f"it permits only {', '.join(permit)}" if permit else "it permits no library"
            raise tapes.TapeError(f"refused: the tape calls {step.operation}, which this call may not use ({allowed}"
                                  f"; its own kernels must compute)")


def _named(buffer: tapes.Buffer, arrays: dict):
    array = arrays.get(buffer.name)
    if array is None:
        raise tapes.TapeError(f"the tape names an array {buffer.name!r} that the call does not have")
    if array.nbytes != buffer.nbytes:
        raise tapes.TapeError(f"the tape's {buffer.name} has {buffer.nbytes} bytes, the call's {array.nbytes}")
    return array


def _view(region: tapes.Region, memory: list):
    return cupy.ndarray(region.shape, region.dtype, memory[region.buffer].data + region.offset, region.strides)


def _call_library(step: tapes.Library, memory: list) -> None:
    def value(item):
        return _view(item, memory) if isinstance(item, tapes.Region) else item

    operation = getattr(importlib.import_module("cupy.cublas"), step.operation.removeprefix("cupy.cublas."))
    result = operation(*map(value, step.args), **{k: value(v) for k, v in step.kwargs})
    if step.result is not None:
        target = _view(step.result, memory)
        if target.data.ptr != result.data.ptr:
            target[...] = result


@functools.lru_cache(maxsize=None)
def _loaded(program: tapes.Program) -> tuple:
    ptx, lowered = compile_ptx(program, device_arch())
    module = cupy.cuda.function.Module()
    module.load(ptx.encode() + b"\0")
    return module, lowered


def compiled_functions(program: tapes.Program) -> Callable:
    """name -> the kernel function of `program` (a cupy.cuda.function.Function), built by the trusted build for
    this GPU (once per process)."""
    def function(name: str):
        module, lowered = _loaded(program)
        return module.get_function(lowered.get(name, name))
    return function


# --------------------------------------------------------------------------- counting executed instructions


@dataclasses.dataclass(frozen=True)
class InstructionClass:
    """Instructions to count: those whose PTX text matches `pattern`, each weighing weight(text) per thread."""
    name: str
    pattern: str
    weight: Callable[[str], int] = lambda text: 1


def count_instructions(tape: tapes.Tape, arrays: dict, classes: tuple[InstructionClass, ...],
                       permit: tuple[str, ...] = ()) -> dict:
    """Replay `tape` on `arrays` with its programs instrumented: {kernel name: {class name: weighed count}} of
    what its launches executed (device functions count for every kernel that calls them)."""
    arch = device_arch()
    instrumented = {program: _instrumented(program, arch, classes) for program in tape.programs}
    replay(tape, arrays, lambda program: instrumented[program].function, permit)
    counts = {}
    for program, kernel in tape.kernels_launched():
        totals = counts.setdefault(kernel, {c.name: 0 for c in classes})
        for name, value in instrumented[program].counts(kernel).items():
            totals[name] += value
    return counts


class _Instrumented:
    """A program compiled to PTX with counters after every instruction of the classes, and loaded."""

    def __init__(self, ptx: str, lowered: dict, classes: tuple[InstructionClass, ...]):
        self.lowered = lowered
        text, self.counters, self.calls = instrument(ptx, classes)
        self.module = cupy.cuda.function.Module()
        self.module.load(text.encode() + b"\0")  # its counters start at 0

    def function(self, kernel: str):
        return self.module.get_function(self.lowered.get(kernel, kernel))

    def counts(self, kernel: str) -> dict:
        if not self.counters:
            return {}
        values = np.zeros(len(self.counters), np.uint64)
        address = self.module.get_global_var("kit_counts")  # an address, or a MemoryPointer in some CuPy versions
        cupy.cuda.runtime.memcpy(values.ctypes.data, getattr(address, "ptr", address), values.nbytes,
                                 cupy.cuda.runtime.memcpyDeviceToHost)
        entry, totals = self.lowered.get(kernel, kernel), {}
        functions = {entry, *reachable(entry, self.calls)}
        for (function, name), value in zip(self.counters, values):
            if function in functions:
                totals[name] = totals.get(name, 0) + int(value)
        return totals


def _instrumented(program: tapes.Program, arch: str, classes) -> _Instrumented:
    ptx, lowered = compile_ptx(program, arch)
    return _Instrumented(ptx, lowered, classes)


_FUNCTION = re.compile(r"\.(?:entry|func)\s+(?:\([^)]*\)\s*)?(\w+)\s*\(")
_CALL = re.compile(r"\bcall(?:\.uni)?\s+(?:\([^)]*\)\s*,\s*)?(\w+)")
_GUARD = re.compile(r"^(@!?%?\w+)\s+")


def functions_of(ptx: str) -> dict[str, tuple[int, int]]:
    """Each function defined in `ptx` (entries and device functions) -> the span of its body, braces included."""
    found = {}
    for match in _FUNCTION.finditer(ptx):
        close = ptx.find(")", match.end())
        body = min((i for i in (ptx.find("{", close), ptx.find(";", close)) if i >= 0), default=-1)
        if body < 0 or ptx[body] == ";":  # a declaration: no body here
            continue
        found[match.group(1)] = (body, _closing_brace(ptx, body) + 1)
    return found


_BRACE_OR_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/|[{}]", re.S)


def _closing_brace(ptx: str, opening: int) -> int:
    """Where the brace opened at `opening` closes: braces counted, comments skipped, since an inline asm block's
    own braces and a vector operand's may stand anywhere, at a line's start too (the end of `ptx` if none)."""
    depth = 0
    for token in _BRACE_OR_COMMENT.finditer(ptx, opening):
        depth += {"{": 1, "}": -1}.get(token.group(), 0)
        if depth == 0:
            return token.start()
    return len(ptx) - 1


def calls_of(ptx: str, spans: dict[str, tuple[int, int]]) -> dict[str, set[str]]:
    """Each function of `spans` (functions_of's) -> the functions its body calls."""
    return {function: set(_CALL.findall(ptx[start:end])) for function, (start, end) in spans.items()}


def statement(piece: str) -> tuple[str | None, str]:
    """A `;`-ended piece of a PTX line as (its guard such as "@%p1", or None; its instruction, "" where the piece
    is a declaration, a label or a brace alone)."""
    text = piece.strip().lstrip("{").strip()
    guard = _GUARD.match(text)
    instruction = text[guard.end():] if guard else text
    return (guard.group(1) if guard else None), ("" if instruction.startswith(".") else instruction)


def instructions_of(body: str) -> list[str]:
    """The instructions of a PTX function body, comments left out, guards taken off."""
    return [statement(piece)[1] for line in body.split("\n") for piece in line.split("//", 1)[0].split(";")[:-1]]


def reachable(function: str, calls: dict[str, set[str]]) -> set[str]:
    """The device functions `function` calls, directly or through each other."""
    seen, pending = set(), list(calls.get(function, ()))
    while pending:
        name = pending.pop()
        if name not in seen:
            seen.add(name)
            pending += calls.get(name, ())
    return seen


def instrument(ptx: str, classes: tuple[InstructionClass, ...]) -> tuple[str, list, dict]:
    """`ptx` with `red.global.add.u64 [kit_counts+8i], weight` after each instruction of a class, under the
    instruction's own guard; the counters' (function, class) in order; and which functions call which."""
    counters, pieces, done, spans = [], [], 0, functions_of(ptx)
    for function, (start, end) in sorted(spans.items(), key=lambda item: item[1]):
        pieces += [ptx[done:start], _count_in(ptx[start:end], function, classes, counters)]
        done = end
    text = "".join(pieces) + ptx[done:]
    if counters:
        text = re.sub(r"^(\.address_size[^\n]*\n)", rf"\1.global .align 8 .u64 kit_counts[{len(counters)}];\n", text,
                      count=1, flags=re.M)
    return text, counters, calls_of(ptx, spans)


def _count_in(body: str, function: str, classes, counters: list) -> str:
    index = {}

    def counter(name: str) -> int:
        if (function, name) not in index:
            index[(function, name)] = len(counters)
            counters.append((function, name))
        return index[(function, name)]

    lines = body.split("\n")
    for number, line in enumerate(lines):
        code = line.split("//", 1)[0]
        statements = code.split(";")
        if len(statements) < 2:
            continue
        for i, piece in enumerate(statements[:-1]):
            guard, instruction = statement(piece)
            for c in classes:
                if instruction and re.search(c.pattern, instruction):
                    statements[i] += (f"; {guard + ' ' if guard else ''}red.global.add.u64 "
                                      f"[kit_counts+{8 * counter(c.name)}], {c.weight(instruction)}")
        lines[number] = ";".join(statements) + line[len(code):]
    return "\n".join(lines)


def multiply_adds(instruction: str) -> int:
    """The multiply-adds one thread's share of a tensor-core instruction does (its shape m x n x k over the
    32 threads of a warp, or the 128 of a warpgroup for wgmma)."""
    shape = re.search(r"\.m(\d+)n(\d+)k(\d+)\b", instruction)
    if shape is None:
        return 0
    threads = 128 if instruction.startswith("wgmma") else 32
    return max(1, math.prod(int(g) for g in shape.groups()) // threads)
