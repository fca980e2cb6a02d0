"""Compiling and launching the kit's kernels.

Every kernel in kernels/ is a CUDA C string compiled at run time by NVRTC through
CuPy. `CudaKernel` wraps one `extern "C" __global__` function of such a string:

* it compiles lazily, on the first launch, and once per process (sources are cached),
  so importing a kernel module never touches the GPU;
* launch constants are written once, in Python, and reach the source as defines
  (`CudaKernel(SOURCE, "k", defines={"TILE": TILE})` compiles with -DTILE=128);
* a compile error is reported as ``kernels/layernorm.py:57: error: ...``, the line of
  the .py file that holds the offending CUDA line, followed by the compiler's text;
* each launch is taped while a call is being recorded (kernel_runtime.recording);
* a kernel that calls `wait_for_previous_kernel()` is launched to overlap the kernel
  before it on sm_90 and later (kernel_runtime.overlap);
* `compile_report` compiles the same source for a named architecture (sm_86, sm_90)
  without any GPU and returns registers, spills and shared memory per kernel.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import re
import secrets
import sys
import types
from pathlib import Path

from gpt2kit.kernel_runtime import overlap, recording
from gpt2kit.kernel_runtime.device import allow_dynamic_shared, cupy, nvrtc_unavailable_reason, require_gpu
from gpt2kit.kernel_runtime.errors import KernelCompileError
from gpt2kit.kernel_runtime.hermetic import HermeticBuildError, build_options, check_includes
from gpt2kit.kernel_runtime.tape import Program


@dataclasses.dataclass(frozen=True)
class SourceOrigin:
    """Where a CUDA source string lives: its .py file and the file line of its first line."""

    path: str
    first_line: int

    def file_line(self, source_line: int) -> int:
        return self.first_line + source_line - 1


def _origin_of(source: str, caller_depth: int) -> SourceOrigin:
    return source_origin(sys._getframe(caller_depth).f_code.co_filename, source)


def _short_path(path: str) -> str:
    """A path relative to the working directory when it is inside it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return path


_DIAGNOSTIC = re.compile(r"^[^\s()]*\((\d+)\): ", re.MULTILINE)


def describe_compile_log(log: str, origin: SourceOrigin) -> str:
    """Rewrite NVRTC's `name.cu(12): error: ...` lines as `kernels/x.py:68: error: ...`."""

    def to_file_line(match: re.Match) -> str:
        return f"{origin.path}:{origin.file_line(int(match.group(1)))}: "

    return _DIAGNOSTIC.sub(to_file_line, log.replace("\x00", "")).strip()


class CudaKernel:
    """One `extern "C" __global__` function of a CUDA source string, compiled on first use.

    Call it like a CuPy RawKernel: ``kernel(grid, block, args, shared_mem=0)``. It
    launches on CuPy's current stream, so launches can be captured into CUDA graphs.
    """

    def __init__(self, source: str, name: str, *, defines: dict[str, int | float | str] | None = None,
                 options: tuple[str, ...] = (), arch_specific: bool = False):
        if f" {name}(" not in source and f"\n{name}(" not in source:
            raise KernelCompileError(f"kernel {name!r} is not defined in its source string")
        self.source = source
        self.name = name
        self.defines = dict(defines or {})
        self.extra_options = tuple(options)
        self.options = _define_options(self.defines) + self.extra_options
        self.origin = _origin_of(source, caller_depth=2)
        # a kernel that waits for the previous one is compiled after overlap.py's two device functions
        self.waits_for_previous = overlap.waits_for_previous(source)
        if self.waits_for_previous:
            self.origin = dataclasses.replace(self.origin, first_line=self.origin.first_line - overlap.PRELUDE_LINES)
        self.arch_specific = arch_specific  # built for the GPU's "a" target (sm_90a), chosen on such GPUs alone
        self.program = Program(self.compiled_source, self.options, arch_specific=arch_specific)  # what a tape holds
        self._function = None
        self._dynamic_shared = 0  # the most dynamic shared memory its launches have asked for

    def __repr__(self) -> str:
        return f"CudaKernel({self.name!r} from {self.origin.path})"

    def with_defines(self, **changes: int | float | str) -> "CudaKernel":
        """The same kernel compiled with some defines changed (compile errors still name this one's file)."""
        other = copy.copy(self)
        other.defines = {**self.defines, **changes}
        other.options = _define_options(other.defines) + self.extra_options
        other.program = Program(other.compiled_source, other.options, arch_specific=self.arch_specific)
        other._function = None
        other._dynamic_shared = 0
        return other

    @property
    def compiled_source(self) -> str:
        """The source NVRTC compiles: this kernel's own, after overlap.py's prelude when it waits for the previous."""
        return overlap.PRELUDE + self.source if self.waits_for_previous else self.source

    def compiled(self):
        """The CuPy kernel function, compiling the source for this GPU on first use."""
        if self._function is None:
            require_gpu()
            options = self.options + ((f"-arch={arch_specific_target(device_arch())}",) if self.arch_specific else ())
            self._function = _compiled_module(self.compiled_source, options, self.origin).get_function(self.name)
        return self._function

    def __call__(self, grid, block, args, shared_mem: int = 0) -> None:
        function = self._function or self.compiled()
        if shared_mem > self._dynamic_shared:  # past 48 KB less the static arrays, a kernel must opt in
            allow_dynamic_shared(function.kernel.ptr, shared_mem)
            self._dynamic_shared = shared_mem
        if self.waits_for_previous and overlap.launches_overlapped():
            overlap.launch(function.kernel.ptr, grid, block, args, shared_mem=shared_mem)
        else:
            function(grid, block, args, shared_mem=shared_mem)
        recording.tape_launch(self.program, self.name, grid, block, args, shared_mem)


ARCH_SPECIFIC_TARGETS = ("sm_90",)  # architectures with an architecture-specific target ("a") a kernel may need


def arch_specific_target(arch: str) -> str:
    """The architecture-specific target of `arch` (sm_90 -> sm_90a); KernelCompileError where it has none."""
    if arch not in ARCH_SPECIFIC_TARGETS:
        targets = ", ".join(f"{target}a" for target in ARCH_SPECIFIC_TARGETS)
        raise KernelCompileError(f"a kernel built for an architecture-specific target ({targets}) has no build for "
                                 f"{arch}: its module chooses it on such a GPU alone")
    return f"{arch}a"


def build_target(program: Program, arch: str) -> str:
    """What `program` is built for on `arch`: the architecture-specific target where the program needs it."""
    return arch_specific_target(arch) if program.arch_specific else arch


def device_arch() -> str:
    """This GPU's architecture (sm_90), capped at the newest NVRTC knows; asked once per GPU, since launchers ask
    at every launch."""
    return _arch_of(cupy.cuda.Device().id)


@functools.lru_cache(maxsize=None)
def _arch_of(device: int) -> str:
    capability = int(cupy.cuda.Device(device).compute_capability)  # CuPy says "90", or "100" on Blackwell
    newest = max(cupy.cuda.nvrtc.getSupportedArchs())
    return f"sm_{min(capability, newest)}"


def _define_options(defines: dict) -> tuple[str, ...]:
    return tuple(f"-D{key}={value}" for key, value in defines.items())


@functools.lru_cache(maxsize=None)
def _compiled_module(source: str, options: tuple[str, ...], origin: SourceOrigin):
    # CuPy's own class, not cupy.RawModule: a recording may have put a watching
    # subclass there, and CudaKernel tapes its launches itself.
    module = cupy._core.raw.RawModule(code=source, options=options)
    try:
        module.compile()
    except cupy.cuda.compiler.CompileException as err:
        raise KernelCompileError(
            f"{origin.path}: CUDA compile failed\n{describe_compile_log(err.get_message(), origin)}"
        ) from None
    return module


@dataclasses.dataclass(frozen=True)
class ModuleProgram:
    """A program a kernel module compiles, and where its source lies (for compile errors)."""
    program: Program
    origin: SourceOrigin
    as_written: bool = False  # a source string of a module that makes its kernels when first called: the
                              # options it is compiled with then are not known here


def programs_in(module: types.ModuleType) -> list[ModuleProgram]:
    """Every distinct program a kernel module can be seen to compile without running it: its CudaKernels,
    cupy.RawKernels and cupy.RawModules at the top level, in a top-level tuple, list or dict, or held by a
    top-level object (a class of the submission's that wraps a RawKernel); and, where a module holds
    none of those (its kernels are made when first called), each top-level string holding a `__global__`
    function, as it stands."""
    found, path = {}, getattr(module, "__file__", None) or "<module>"
    for item in _kept_in(module):
        if issubclass(type(item), CudaKernel):
            found.setdefault(item.program, item.origin)
        elif cupy is not None and issubclass(type(item), (cupy.RawKernel, cupy.RawModule)) and item.code:
            found.setdefault(Program.of(item), source_origin(path, item.code))
    if found:
        return [ModuleProgram(program, origin) for program, origin in found.items()]
    sources = dict.fromkeys(v for v in list(getattr(module, "__dict__", {}).values())
                            if type(v) is str and "__global__" in v)
    return [ModuleProgram(Program(source), source_origin(path, source), as_written=True) for source in sources]


_NOT_HOLDERS = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType, types.MethodType)


def _kept_in(module: types.ModuleType) -> list:
    """A module's top-level values, the items of its tuples, lists and dicts, and the attributes of its other
    objects. Values are asked their type, never their __class__: a deprecated proxy would warn."""
    found = []
    for value in list(getattr(module, "__dict__", {}).values()):
        kind = type(value)
        if kind is dict:
            found += list(value.values())
        elif kind in (tuple, list):
            found += list(value)
        else:
            found.append(value)
            if not issubclass(kind, _NOT_HOLDERS) and isinstance(getattr(value, "__dict__", None), dict):
                found += list(value.__dict__.values())
    return found


def source_origin(path: str, source: str) -> SourceOrigin:
    """Where `source` lies in the file at `path` (its first line there; 1 when it is not found)."""
    try:
        text = Path(path).read_text()
    except OSError:
        return SourceOrigin(_short_path(path), 1)
    at = text.find(source)
    return SourceOrigin(_short_path(path), text.count("\n", 0, at) + 1 if at >= 0 else 1)


# --------------------------------------------------------------------------- offline report


@dataclasses.dataclass(frozen=True)
class KernelResources:
    name: str
    arch: str
    registers: int
    spill_stores: int
    spill_loads: int
    stack_frame: int
    shared_bytes: int


_PTXAS_FUNCTION = re.compile(r"Compiling entry function '(\w+)' for '(sm_\d+\w?)'")
_PTXAS_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_USAGE = re.compile(r"Used (\d+) registers(.*)")
_PTXAS_SMEM = re.compile(r"(\d+) bytes smem")


def parse_ptxas_log(log: str) -> list[KernelResources]:
    """Registers, spills and shared memory per kernel from `ptxas -v` output."""
    found: list[KernelResources] = []
    name = arch = None
    frame = (0, 0, 0)
    for line in log.splitlines():
        if m := _PTXAS_FUNCTION.search(line):
            name, arch, frame = m.group(1), m.group(2), (0, 0, 0)
        elif m := _PTXAS_FRAME.search(line):
            frame = tuple(int(g) for g in m.groups())
        elif (m := _PTXAS_USAGE.search(line)) and name is not None:
            smem = _PTXAS_SMEM.search(m.group(2))
            found.append(KernelResources(name, arch, int(m.group(1)), frame[1], frame[2], frame[0],
                                         int(smem.group(1)) if smem else 0))
            name = None
    return found


def compile_report(kernel: CudaKernel | ModuleProgram, arch: str) -> list[KernelResources]:
    """Compile a kernel's program (a CudaKernel, or a ModuleProgram) for `arch` (e.g. "sm_86") through
    NVRTC; no GPU needed.

    Returns the resources of every kernel in the source; raises KernelCompileError
    pointing at the .py line on a compile error, and when there is no NVRTC to compile with.
    """
    # NVRTC can reuse an earlier identical compilation, and then ptxas does not run and
    # prints no report: an unused symbol of its own makes every report compilation new.
    nonce = f'\nextern "C" __device__ int kit_resource_report_{secrets.token_hex(8)};\n'
    program = dataclasses.replace(kernel.program, source=kernel.program.source + nonce)

    def report(nvrtc, handle) -> list[KernelResources]:
        cubin = nvrtc.getCUBIN(handle) + b"\0"  # CuPy's getCUBIN drops the final byte
        if not cubin.startswith(b"\x7fELF"):
            raise KernelCompileError(f"{kernel.origin.path}: NVRTC returned no cubin for {arch}")
        return parse_ptxas_log(nvrtc.getProgramLog(handle))

    target = build_target(program, arch)
    return nvrtc_compile(program, kernel.origin, target, [f"-arch={target}", "-Xptxas=-v"], report)


@functools.lru_cache(maxsize=None)
def compile_ptx(program: Program, arch: str, origin: SourceOrigin | None = None) -> tuple[str, dict[str, str]]:
    """The PTX of a program for `arch`'s virtual architecture (sm_86 -> compute_86), built the one way every
    trusted process builds a program (kernel_runtime.hermetic), and each of its name expressions' lowered name;
    no GPU needed. Built once per process: the replay, its instrumented twin and the look at its instructions
    read the very same PTX."""
    def ptx(nvrtc, handle):
        lowered = {name: nvrtc.getLoweredName(handle, name) for name in program.name_expressions}
        return nvrtc.getPTX(handle).rstrip(b"\0").decode(), lowered

    target = build_target(program, arch)
    return nvrtc_compile(program, origin or SourceOrigin("<tape>", 1), target,
                         [f"-arch=compute_{target.removeprefix('sm_')}"], ptx)


def nvrtc_compile(program: Program, origin: SourceOrigin, arch: str, arch_options: list[str], take):
    """Compile `program` through NVRTC as the trusted build does (kernel_runtime.hermetic: its options and
    includes checked, CuPy's include directories) with `arch_options`; take(nvrtc, handle) what is wanted."""
    reason = nvrtc_unavailable_reason()
    if reason is not None:
        raise KernelCompileError(f"{origin.path}: cannot compile for {arch}: {reason}")
    from cupy.cuda import nvrtc

    try:
        check_includes(program.source)
        options = build_options(program.options, arch_options)
    except HermeticBuildError as err:
        raise HermeticBuildError(f"{origin.path}: {err}") from None
    handle = nvrtc.createProgram(program.source, origin.path, [], [])
    try:
        for name in program.name_expressions:
            nvrtc.addNameExpression(handle, name)
        try:
            nvrtc.compileProgram(handle, options)
        except nvrtc.NVRTCError:
            raise KernelCompileError(
                f"{origin.path}: CUDA compile for {arch} failed\n"
                + describe_compile_log(nvrtc.getProgramLog(handle), origin)
            ) from None
        return take(nvrtc, handle)
    finally:
        nvrtc.destroyProgram(handle)
