"""The tape of a recorded call, as plain data: what the call did on the GPU, and nothing else.

A recording (kernel_runtime.recording) turns one call of a host function into a Tape:

* buffers: the device memory its steps touch. A buffer with a `name` is one of the
  call's own arrays (out, inp, ...): whoever replays the tape supplies it. A buffer
  without one is scratch (memory the call allocated, or, marked `kept`, an array it
  kept from elsewhere: an earlier call, its import): only its size is on the tape,
  and a replay starts it full of 0xFF bytes (NaN as float32), so nothing the call
  left there earlier comes along;
* programs: each CUDA source exactly as it was compiled, with its compile options,
  name expressions and backend;
* steps, in the order the call made them:
    Launch   one kernel of a program, with its grid, block, dynamic shared memory and
             arguments, each a Pointer (a buffer and a byte offset into it) or a Scalar
             (a NumPy dtype and its bytes);
    Write    a constant written into a region of a buffer (a fill, cupy.zeros, a copy
             of host data to the GPU), with its bytes;
    Library  a permitted library operation (cuBLAS, through cupy.cublas), by name,
             with each array as a region of a buffer;
* the call's scalar arguments (its sizes), so that a replay on other sizes is refused.

A tape holds no Python of the caller's and nothing computed from the call's inputs
but what the steps above compute on the GPU: replayed on other inputs
(kernel_runtime.replay), it gives those inputs' answers only if the call's own
kernels compute them.

A tape is JSON (`to_json`, `Tape.from_json`). `from_json` trusts nothing it reads:
every index, offset, size, dtype and name is checked, and a bad tape is one TapeError
line, so the grader can read tapes that a submission's process wrote.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
import re

import numpy as np

from gpt2kit.kernel_runtime.errors import KitError

DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32",
          "float64", "complex64", "complex128")
LIBRARY_OPERATIONS = {  # what a Library step may call: cupy.cublas's array-level functions
    f"cupy.cublas.{name}" for name in ("asum", "axpy", "dgmm", "dot", "dotc", "dotu", "geam", "gemm", "gemv", "ger",
                                       "gerc", "geru", "iamax", "iamin", "nrm2", "sbmv", "scal", "syrk")}
MAX_BUFFER_BYTES = 2**36      # 64 GiB: more than any GPU the course uses holds
MAX_ENTRIES = 1_000_000       # buffers, programs or steps on one tape
MAX_DIMENSION = 2**31 - 1


class TapeError(KitError):
    """A tape that cannot be read or replayed as it is."""


@dataclasses.dataclass(frozen=True)
class Buffer:
    nbytes: int
    name: str | None = None  # one of the call's arrays; None: scratch
    kept: bool = False       # scratch the call did not allocate: memory it kept from before the call


# a compile option that names an architecture-specific target (Hopper's sm_90a), as a RawKernel is given it
ARCH_SPECIFIC_OPTION = re.compile(r"(?:-arch|--gpu-architecture)[= ]sm_\d+a")


@dataclasses.dataclass(frozen=True)
class Program:
    """One compilation: a CUDA source and how it was compiled."""
    source: str
    options: tuple[str, ...] = ()
    name_expressions: tuple[str, ...] = ()
    backend: str = "nvrtc"
    cooperative: bool = False  # compiled and launched for cooperative groups
    arch_specific: bool = False  # built for the GPU's architecture-specific target (sm_90a: wgmma), runs there alone

    @classmethod
    def of(cls, raw) -> Program:
        """The program of a cupy.RawKernel or cupy.RawModule made from source (raw.code); an -arch option naming an
        architecture-specific target (-arch=sm_90a) makes it arch_specific, the option itself not kept."""
        options = tuple(raw.options)
        arch_specific = tuple(o for o in options if ARCH_SPECIFIC_OPTION.fullmatch(o))
        return cls(raw.code, tuple(o for o in options if o not in arch_specific),
                   tuple(getattr(raw, "name_expressions", None) or ()), raw.backend,
                   bool(raw.enable_cooperative_groups), bool(arch_specific))


@dataclasses.dataclass(frozen=True)
class Pointer:
    buffer: int
    offset: int  # bytes


@dataclasses.dataclass(frozen=True)
class Scalar:
    dtype: str
    bits: str  # its bytes, in hex

    @classmethod
    def of(cls, value: np.generic) -> Scalar:
        return cls(value.dtype.name, value.tobytes().hex())

    def value(self) -> np.generic:
        return np.frombuffer(bytes.fromhex(self.bits), self.dtype)[0]


@dataclasses.dataclass(frozen=True)
class Region:
    """An array in a buffer: where it starts, its shape, strides (bytes) and dtype."""
    buffer: int
    offset: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: str

    @property
    def span(self) -> tuple[int, int]:
        """The lowest and one past the highest byte it touches, from the buffer's start."""
        if 0 in self.shape:
            return self.offset, self.offset
        low = self.offset + sum(s * (n - 1) for s, n in zip(self.strides, self.shape) if s < 0)
        high = self.offset + sum(s * (n - 1) for s, n in zip(self.strides, self.shape) if s > 0)
        return low, high + np.dtype(self.dtype).itemsize


@dataclasses.dataclass(frozen=True)
class Launch:
    program: int
    kernel: str  # its name, or its name expression
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int
    args: tuple[Pointer | Scalar, ...]


@dataclasses.dataclass(frozen=True)
class Write:
    region: Region
    data: bytes  # the region's bytes in C order, or one element's when `repeated`
    repeated: bool = False


@dataclasses.dataclass(frozen=True)
class Library:
    operation: str                 # one of LIBRARY_OPERATIONS
    args: tuple                    # each a Region or a plain value (str, int, float, bool, None)
    kwargs: tuple[tuple[str, object], ...]
    result: Region | None = None   # where the array it returned lies, when it returned one


def library_of(operation: str) -> str:
    """The library whose permission a Library step needs: cupy.cublas.gemm -> cublas
    (kernel_runtime.recording.LIBRARIES' keys)."""
    return operation.split(".")[1]


def plain(value):
    """A call's scalar argument as a tape's JSON holds it (a NumPy scalar as the Python number)."""
    return value.item() if isinstance(value, np.generic) else value


@dataclasses.dataclass
class Tape:
    buffers: list[Buffer] = dataclasses.field(default_factory=list)
    programs: list[Program] = dataclasses.field(default_factory=list)
    steps: list[Launch | Write | Library] = dataclasses.field(default_factory=list)
    scalars: dict[str, object] = dataclasses.field(default_factory=dict)  # the call's scalar arguments

    @property
    def launches(self) -> list[Launch]:
        return [step for step in self.steps if isinstance(step, Launch)]

    @property
    def library_calls(self) -> list[Library]:
        return [step for step in self.steps if isinstance(step, Library)]

    def kernels_launched(self) -> list[tuple[Program, str]]:
        """(program, kernel name) of each kernel it launches, each once, in order of first launch."""
        return list(dict.fromkeys((self.programs[launch.program], launch.kernel) for launch in self.launches))

    def to_json(self) -> str:
        return json.dumps({"buffers": [[b.nbytes, b.name, b.kept] for b in self.buffers],
                           "programs": [dataclasses.asdict(p) for p in self.programs],
                           "steps": [_step_to_json(step) for step in self.steps],
                           "scalars": self.scalars})

    @classmethod
    def from_json(cls, text: str) -> Tape:
        try:
            return _read_tape(json.loads(text))
        except TapeError:
            raise
        except (ValueError, TypeError, KeyError, IndexError, AttributeError) as err:
            raise TapeError(f"unreadable tape: {type(err).__name__}: {err}".splitlines()[0]) from None


# --------------------------------------------------------------------------- JSON


def _region_to_json(region: Region) -> dict:
    return {"region": [region.buffer, region.offset, list(region.shape), list(region.strides), region.dtype]}


def _value_to_json(value) -> dict:
    return _region_to_json(value) if isinstance(value, Region) else {"value": value}


def _step_to_json(step) -> dict:
    if isinstance(step, Launch):
        args = [{"pointer": [a.buffer, a.offset]} if isinstance(a, Pointer) else {"scalar": [a.dtype, a.bits]}
                for a in step.args]
        return {"launch": [step.program, step.kernel, list(step.grid), list(step.block), step.shared_mem, args]}
    if isinstance(step, Write):
        return {"write": [_region_to_json(step.region), base64.b64encode(step.data).decode(), step.repeated]}
    return {"library": [step.operation, [_value_to_json(a) for a in step.args],
                        [[k, _value_to_json(v)] for k, v in step.kwargs],
                        _region_to_json(step.result) if step.result else None]}


def _read_tape(raw: dict) -> Tape:
    if not isinstance(raw, dict):
        raise TapeError("unreadable tape: not a JSON object")
    buffers = [_read_buffer(entry) for entry in _entries(raw["buffers"], "buffers")]
    named = [b.name for b in buffers if b.name is not None]
    if len(set(named)) != len(named):
        raise TapeError("bad tape: two buffers with one name")
    programs = [_read_program(p) for p in _entries(raw["programs"], "programs")]
    tape = Tape(buffers, programs, [], _read_scalars(raw["scalars"]))
    tape.steps = [_read_step(step, tape) for step in _entries(raw["steps"], "steps")]
    return tape


def _read_buffer(raw) -> Buffer:
    nbytes, name, *kept = raw  # [nbytes, name] or [nbytes, name, kept]
    if len(kept) > 1:
        raise TapeError(f"bad tape: buffer {raw!r}")
    return Buffer(_integer(nbytes, "buffer size", 0, MAX_BUFFER_BYTES), _name(name), bool(kept and kept[0]))


def _entries(value, what: str) -> list:
    if not isinstance(value, list) or len(value) > MAX_ENTRIES:
        raise TapeError(f"bad tape: {what} must be a list of at most {MAX_ENTRIES}")
    return value


def _integer(value, what: str, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise TapeError(f"bad tape: {what} {value!r} is not an integer in [{low}, {high}]")
    return value


def _name(value) -> str | None:
    if value is not None and not (isinstance(value, str) and value.isidentifier()):
        raise TapeError(f"bad tape: buffer name {value!r}")
    return value


def _strings(value, what: str) -> tuple[str, ...]:
    if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        raise TapeError(f"bad tape: {what} must be a list of strings")
    return tuple(value)


def _read_program(raw: dict) -> Program:
    if not isinstance(raw.get("source"), str) or raw.get("backend") not in ("nvrtc", "nvcc"):
        raise TapeError("bad tape: a program needs a source string and the backend nvrtc or nvcc")
    return Program(raw["source"], _strings(raw["options"], "options"),
                   _strings(raw["name_expressions"], "name_expressions"), raw["backend"], bool(raw["cooperative"]),
                   bool(raw.get("arch_specific", False)))


def _read_scalars(raw) -> dict:
    if not isinstance(raw, dict) or not all(isinstance(v, (int, float, str)) or v is None for v in raw.values()):
        raise TapeError("bad tape: scalars must map names to numbers")
    return raw


def _dtype(value) -> str:
    if value not in DTYPES:
        raise TapeError(f"bad tape: dtype {value!r} (known: {', '.join(DTYPES)})")
    return value


def _buffer_index(value, tape: Tape) -> int:
    return _integer(value, "buffer index", 0, len(tape.buffers) - 1)


def _read_region(raw, tape: Tape) -> Region:
    buffer, offset, shape, strides, dtype = raw["region"]
    region = Region(_buffer_index(buffer, tape), _integer(offset, "offset", 0, MAX_BUFFER_BYTES),
                    tuple(_integer(n, "dimension", 0, MAX_DIMENSION) for n in shape),
                    tuple(_integer(s, "stride", -MAX_BUFFER_BYTES, MAX_BUFFER_BYTES) for s in strides), _dtype(dtype))
    low, high = region.span
    if len(region.shape) != len(region.strides) or low < 0 or high > tape.buffers[region.buffer].nbytes:
        raise TapeError(f"bad tape: a region of bytes [{low}, {high}) outside buffer {region.buffer} "
                        f"({tape.buffers[region.buffer].nbytes} bytes)")
    return region


def _read_value(raw, tape: Tape):
    if "region" in raw:
        return _read_region(raw, tape)
    value = raw["value"]
    if not (value is None or isinstance(value, (str, bool, int, float))):
        raise TapeError(f"bad tape: a library argument {value!r} is neither an array nor a plain value")
    return value


def _dims(value) -> tuple[int, int, int]:
    dims = tuple(_integer(d, "grid or block size", 1, MAX_DIMENSION) for d in value)
    if not 1 <= len(dims) <= 3:
        raise TapeError(f"bad tape: grid or block {value!r} must have 1 to 3 sizes")
    return dims + (1,) * (3 - len(dims))


def _read_step(raw: dict, tape: Tape):
    (kind, fields), = raw.items()
    if kind == "launch":
        program, kernel, grid, block, shared_mem, args = fields
        _integer(program, "program index", 0, len(tape.programs) - 1)
        if not isinstance(kernel, str) or not kernel:
            raise TapeError("bad tape: a launch without a kernel name")
        return Launch(program, kernel, _dims(grid), _dims(block), _integer(shared_mem, "shared memory", 0, 2**31),
                      tuple(_read_argument(a, tape) for a in args))
    if kind == "write":
        region, data, repeated = fields
        region, data = _read_region(region, tape), base64.b64decode(data, validate=True)
        itemsize, count = np.dtype(region.dtype).itemsize, math.prod(region.shape)
        if len(data) != (itemsize if repeated else itemsize * count):
            raise TapeError(f"bad tape: a write of {len(data)} bytes into a region of {count} {region.dtype}")
        return Write(region, data, bool(repeated))
    if kind == "library":
        operation, args, kwargs, result = fields
        if operation not in LIBRARY_OPERATIONS:
            raise TapeError(f"bad tape: {operation!r} is not a library operation a tape may hold")
        return Library(operation, tuple(_read_value(a, tape) for a in args),
                       tuple((str(k), _read_value(v, tape)) for k, v in kwargs),
                       _read_region(result, tape) if result is not None else None)
    raise TapeError(f"bad tape: unknown step {kind!r}")


def _read_argument(raw: dict, tape: Tape) -> Pointer | Scalar:
    if "pointer" in raw:
        buffer, offset = raw["pointer"]
        buffer = _buffer_index(buffer, tape)
        return Pointer(buffer, _integer(offset, "pointer offset", 0, tape.buffers[buffer].nbytes))
    dtype, bits = raw["scalar"]
    if not isinstance(bits, str) or len(bytes.fromhex(bits)) != np.dtype(_dtype(dtype)).itemsize:
        raise TapeError(f"bad tape: scalar bytes {bits!r} for a {dtype}")
    return Scalar(dtype, bits)
