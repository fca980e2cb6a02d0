"""CUDA plumbing shared by the kit: compiling kernel sources, checking launch arguments.

Every kernel in kernels/ is a CUDA C string compiled at run time by NVRTC through
CuPy. `CudaKernel` wraps one such kernel:

* it compiles lazily, on the first launch, and once per process (sources are cached),
  so importing kernels/ never touches the GPU;
* a compile error is reported as ``kernels/layernorm.py:57: error: ...``, the line of
  the .py file that holds the offending CUDA line, followed by the compiler's text;
* `compile_report` compiles the same source for a named architecture (sm_86, sm_90)
  without any GPU and returns registers, spills and shared memory per kernel.

`check_array` and friends turn a wrong argument into one `KernelArgumentError` line
that names the function, the argument and what was expected.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import re
import secrets
import sys
import types
from pathlib import Path

import numpy as np

try:
    import cupy
except ImportError:  # the NumPy reference and the CPU tests work without CuPy
    cupy = None


class KernelCompileError(RuntimeError):
    """NVRTC rejected a kernel source; the message points at the .py file and line."""


class KernelArgumentError(ValueError):
    """A host function was called with an array of the wrong kind, size or type."""


class GPUUnavailableError(RuntimeError):
    """There is no usable CUDA GPU in this process."""


# --------------------------------------------------------------------------- GPU presence


@functools.lru_cache(maxsize=None)
def gpu_unavailable_reason() -> str | None:
    """None when a CUDA GPU can run kernels here, else one line saying why not."""
    if cupy is None:
        return "CuPy is not installed (pip install -e '.[cuda12]' or '.[cuda13]')"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as err:  # CuPy raises different types for "no driver" and "no device"
        if "InsufficientDriver" in str(err) and not list(Path("/dev").glob("nvidia[0-9]*")):
            return "no NVIDIA GPU or driver on this machine"
        return f"no usable CUDA GPU ({_first_line(err)})"
    if count == 0:
        return "no usable CUDA GPU (the driver reports 0 devices)"
    return None


def require_gpu() -> None:
    reason = gpu_unavailable_reason()
    if reason is not None:
        raise GPUUnavailableError(reason)


def _first_line(err: BaseException) -> str:
    text = str(err).strip() or type(err).__name__
    return text.splitlines()[0]


# --------------------------------------------------------------------------- compiling


@dataclasses.dataclass(frozen=True)
class SourceOrigin:
    """Where a CUDA source string lives: its .py file and the file line of its first line."""

    path: str
    first_line: int

    def file_line(self, source_line: int) -> int:
        return self.first_line + source_line - 1


def _origin_of(source: str, caller_depth: int) -> SourceOrigin:
    path = sys._getframe(caller_depth).f_code.co_filename
    try:
        text = Path(path).read_text()
    except OSError:
        return SourceOrigin(path, 1)
    at = text.find(source)
    first_line = text.count("\n", 0, at) + 1 if at >= 0 else 1
    return SourceOrigin(_short_path(path), first_line)


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

    def __init__(self, source: str, name: str, *, options: tuple[str, ...] = ()):
        if f" {name}(" not in source and f"\n{name}(" not in source:
            raise KernelCompileError(f"kernel {name!r} is not defined in its source string")
        self.source = source
        self.name = name
        self.options = tuple(options)
        self.origin = _origin_of(source, caller_depth=2)
        self._function = None

    def __repr__(self) -> str:
        return f"CudaKernel({self.name!r} from {self.origin.path})"

    def compiled(self):
        """The CuPy RawKernel, compiling the source for this GPU on first use."""
        if self._function is None:
            require_gpu()
            self._function = _compiled_module(self.source, self.options, self.origin).get_function(self.name)
        return self._function

    def __call__(self, grid, block, args, shared_mem: int = 0) -> None:
        (self._function or self.compiled())(grid, block, args, shared_mem=shared_mem)


@functools.lru_cache(maxsize=None)
def _compiled_module(source: str, options: tuple[str, ...], origin: SourceOrigin):
    module = cupy.RawModule(code=source, options=options)
    try:
        module.compile()
    except cupy.cuda.compiler.CompileException as err:
        raise KernelCompileError(
            f"{origin.path}: CUDA compile failed\n{describe_compile_log(err.get_message(), origin)}"
        ) from None
    return module


def kernels_in(module: types.ModuleType) -> list[CudaKernel]:
    """The CudaKernel objects a kernels/ module defines at its top level."""
    return [value for value in vars(module).values() if isinstance(value, CudaKernel)]


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


def compile_report(kernel: CudaKernel, arch: str) -> list[KernelResources]:
    """Compile `kernel`'s source for `arch` (e.g. "sm_86") through NVRTC; no GPU needed.

    Returns the resources of every kernel in the source; raises KernelCompileError
    pointing at the .py line on a compile error.
    """
    from cupy.cuda import nvrtc

    # NVRTC can reuse an earlier identical compilation, and then ptxas does not run and
    # prints no report: an unused symbol of its own makes every report compilation new.
    nonce = f'\nextern "C" __device__ int kit_resource_report_{secrets.token_hex(8)};\n'
    program = nvrtc.createProgram(kernel.source + nonce, kernel.origin.path, [], [])
    try:
        options = [f"-arch={arch}", "-Xptxas=-v", "-std=c++17", *kernel.options]
        try:
            nvrtc.compileProgram(program, options)
        except nvrtc.NVRTCError:
            raise KernelCompileError(
                f"{kernel.origin.path}: CUDA compile for {arch} failed\n"
                + describe_compile_log(nvrtc.getProgramLog(program), kernel.origin)
            ) from None
        log = nvrtc.getProgramLog(program)
        cubin = nvrtc.getCUBIN(program) + b"\0"  # CuPy's getCUBIN drops the final byte
        if not cubin.startswith(b"\x7fELF"):
            raise KernelCompileError(f"{kernel.origin.path}: NVRTC returned no cubin for {arch}")
    finally:
        nvrtc.destroyProgram(program)
    return parse_ptxas_log(log)


# --------------------------------------------------------------------------- argument checks


def check_array(function: str, name: str, array, size: int, dtype=np.float32) -> None:
    """`array` must be a C-contiguous CuPy array of `dtype` holding exactly `size` elements."""
    _check_kind(function, name, array, dtype)
    if array.size != size:
        raise KernelArgumentError(
            f"{function}: {name} has {array.size} elements (shape {array.shape}), expected {size}")


def check_rows(function: str, name: str, array, columns: int, dtype=np.float32) -> int:
    """`array` must be a C-contiguous CuPy matrix with `columns` columns; returns its rows."""
    _check_kind(function, name, array, dtype)
    if array.size == 0 or array.size % columns:
        raise KernelArgumentError(
            f"{function}: {name} (shape {array.shape}) is not a matrix of {columns} columns")
    return array.size // columns


def _check_kind(function: str, name: str, array, dtype) -> None:
    if cupy is None or not isinstance(array, cupy.ndarray):
        raise KernelArgumentError(
            f"{function}: {name} must be a CuPy array on the GPU, got {type(array).__name__}")
    if array.dtype != np.dtype(dtype):
        raise KernelArgumentError(
            f"{function}: {name} must have dtype {np.dtype(dtype).name}, got {array.dtype.name}")
    if not array.flags.c_contiguous:
        raise KernelArgumentError(f"{function}: {name} must be C-contiguous (use cupy.ascontiguousarray)")


def check_dims(function: str, **dims: int) -> None:
    """Every size argument must be a positive Python or NumPy integer."""
    for name, value in dims.items():
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise KernelArgumentError(f"{function}: {name} must be a positive integer, got {value!r}")


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


# --------------------------------------------------------------------------- kernel sets


HOST_FUNCTIONS = {
    "encoder": ("encoder_forward",),
    "layernorm": ("layernorm_forward",),
    "matmul": ("matmul_forward",),
    "attention": ("attention_forward", "softmax_forward"),
    "residual": ("residual_forward",),
    "gelu": ("gelu_forward",),
}


def module_of(function: str) -> str:
    """The kernels/ module that defines a host function (softmax_forward lives in attention.py)."""
    return next(module for module, functions in HOST_FUNCTIONS.items() if function in functions)


def load_kernel_package(path: str | Path | None = None) -> types.SimpleNamespace:
    """The host functions of a kernels/ directory, as a namespace.

    `path` is a kernels/ directory or a directory that contains one; None means this
    repository's own kernels/. Each directory gets a module name of its own, so a
    student's kernels and the kit's can be loaded side by side.
    """
    if path is None:
        modules = {name: importlib.import_module(f"kernels.{name}") for name in HOST_FUNCTIONS}
    else:
        directory = Path(path)
        if (directory / "kernels").is_dir():
            directory = directory / "kernels"
        if not directory.is_dir():
            raise FileNotFoundError(f"no kernels directory at {path}")
        modules = {name: _import_file(directory / f"{name}.py") for name in HOST_FUNCTIONS}
    functions = {}
    for module_name, names in HOST_FUNCTIONS.items():
        for function in names:
            if not hasattr(modules[module_name], function):
                raise AttributeError(f"{modules[module_name].__file__} defines no {function}()")
            functions[function] = getattr(modules[module_name], function)
    return types.SimpleNamespace(**functions)


def _import_file(path: Path) -> types.ModuleType:
    if not path.is_file():
        raise FileNotFoundError(f"missing kernel file {path}")
    unique = "kit_loaded_" + re.sub(r"\W", "_", str(path.resolve().with_suffix("")))
    if unique in sys.modules:
        return sys.modules[unique]
    spec = importlib.util.spec_from_file_location(unique, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[unique] = module
    spec.loader.exec_module(module)
    return module
