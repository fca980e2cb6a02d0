"""Whether this process can run CUDA kernels (or only compile them), and the one line
that says why not."""

from __future__ import annotations

import atexit
import functools
import gc
import importlib.util
import os
import shutil
import sys
import tempfile
from pathlib import Path

from gpt2kit.kernel_runtime.errors import GPUUnavailableError


def first_line(err: BaseException) -> str:
    text = str(err).strip() or type(err).__name__
    return text.splitlines()[0]


INSTALL_CUPY = "pip install -e '.[cuda13]', or '.[cuda12]' for a CUDA 12 driver"


def _cupy_kernel_cache_or_memory() -> None:
    """CuPy makes its kernel cache's directory ($CUPY_CACHE_DIR, else ~/.cupy/kernel_cache) as it is imported,
    and the import fails where it cannot (a read-only home). There, compiled kernels stay in memory instead, and
    CuPy is given an empty directory of its own, removed at exit."""
    cache = os.environ.get("CUPY_CACHE_DIR") or os.path.expanduser("~/.cupy/kernel_cache")
    try:
        os.makedirs(cache, exist_ok=True)
    except OSError:
        placeholder = tempfile.mkdtemp(prefix="kit-cupy-cache-")
        atexit.register(shutil.rmtree, placeholder, ignore_errors=True)
        os.environ.update(CUPY_CACHE_DIR=placeholder, CUPY_CACHE_IN_MEMORY="1")


if importlib.util.find_spec("cupy") is not None:
    _cupy_kernel_cache_or_memory()
try:
    import cupy
    CUPY_MISSING = None
except ImportError as err:  # the NumPy reference and the CPU tests work without CuPy
    cupy = None
    if isinstance(err, ModuleNotFoundError) and err.name == "cupy":
        CUPY_MISSING = f"CuPy is not installed ({INSTALL_CUPY})"
    else:  # installed, but a CUDA library it needs is missing or does not match
        cause = err.__cause__ or err
        CUPY_MISSING = f"CuPy cannot be imported ({type(cause).__name__}: {first_line(cause)})"


PRIVATE_KERNEL_CACHES = {"CUPY_CACHE_IN_MEMORY": "1", "CUDA_CACHE_DISABLE": "1"}


def keep_compiled_kernels_private() -> None:
    """Keep what this process compiles in its own memory: CuPy's kernel cache on disk (and the driver's JIT
    cache, when this runs before CUDA starts) is a directory any process of the same user can write, so a
    process that must trust what it runs (the grader's, the leaderboard's ranking) never reads compiled code
    back from it. Child processes inherit it."""
    os.environ.update(PRIVATE_KERNEL_CACHES)


@functools.lru_cache(maxsize=None)
def gpu_unavailable_reason() -> str | None:
    """None when a CUDA GPU can run kernels here, else one line saying why not."""
    if cupy is None:
        return CUPY_MISSING
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as err:  # CuPy raises different types for "no driver" and "no device"
        if "InsufficientDriver" in str(err) and not list(Path("/dev").glob("nvidia[0-9]*")):
            return "no NVIDIA GPU or driver on this machine"
        return f"no usable CUDA GPU ({first_line(err)})"
    if count == 0:
        return "no usable CUDA GPU (the driver reports 0 devices)"
    return None


@functools.lru_cache(maxsize=None)
def nvrtc_unavailable_reason() -> str | None:
    """None when NVRTC can compile kernels here (no GPU needed), else one line saying what to install."""
    if cupy is None:
        return CUPY_MISSING  # NVRTC comes with CuPy's install line
    try:
        from cupy.cuda import nvrtc
        nvrtc.getVersion()
    except Exception as err:  # a missing library shows as ImportError, OSError or CuPy's own errors
        return f"NVRTC cannot be loaded ({first_line(err)}; {INSTALL_CUPY})"
    return None


def multiprocessor_count() -> int:
    """The current GPU's SMs, which a launcher sizes its grid by."""
    return _attribute(cupy.cuda.Device().id, "MultiProcessorCount")


def threads_per_multiprocessor() -> int:
    """The most threads the current GPU's SM holds at once (2048 on an H100, 1536 on an A40)."""
    return _attribute(cupy.cuda.Device().id, "MaxThreadsPerMultiProcessor")


def l2_cache_bytes() -> int:
    """The current GPU's L2 cache size, which a launcher that reads its data twice sizes its grid by."""
    return _attribute(cupy.cuda.Device().id, "L2CacheSize")


def shared_bytes_per_block() -> int:
    """The most shared memory, static and dynamic, a block of the current GPU may have once its kernel opts in
    (227 KB on an H100, 99 KB on an A40; 48 KB without opting in)."""
    return _attribute(cupy.cuda.Device().id, "MaxSharedMemoryPerBlockOptin")


def shared_bytes_per_multiprocessor() -> int:
    """The shared memory an SM of the current GPU shares among the blocks it holds."""
    return _attribute(cupy.cuda.Device().id, "MaxSharedMemoryPerMultiprocessor")


_MAX_DYNAMIC_SHARED_SIZE = 8  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES


def allow_dynamic_shared(function: int, nbytes: int) -> None:
    """Let the kernel at `function` (a CUfunction) launch with `nbytes` of dynamic shared memory: its cap starts at
    48 KB less its static arrays, and is raised here (never lowered: a kernel launched at several sizes keeps the
    largest)."""
    if nbytes > cupy.cuda.driver.funcGetAttribute(_MAX_DYNAMIC_SHARED_SIZE, function):
        cupy.cuda.driver.funcSetAttribute(function, _MAX_DYNAMIC_SHARED_SIZE, nbytes)


@functools.cache
def _attribute(device: int, name: str) -> int:
    return cupy.cuda.Device(device).attributes[name]


def require_gpu() -> None:
    reason = gpu_unavailable_reason()
    if reason is not None:
        raise GPUUnavailableError(reason)


def exit_without_gpu(program: str, cannot: str = "cannot run kernels") -> None:
    """A command's first step: without a usable GPU, say so in one line and exit with status 2."""
    reason = gpu_unavailable_reason()
    if reason is not None:
        print(f"{program}: {cannot}: {reason}", file=sys.stderr)
        raise SystemExit(2)


class CapturedGraph:
    """A CUDA graph and the memory its capture allocated. What a host function allocates while it is captured
    (scratch from cupy.empty, as CuPy teaches) comes from a memory pool of the graph's own, as a PyTorch graph's
    private pool: every replay writes that memory again, so it must stay the graph's, never handed to another
    array by CuPy's shared pool once the capture has dropped it. The pool lives as long as the graph."""

    def __init__(self, graph, pool):
        self.graph, self.pool = graph, pool

    def launch(self, stream=None) -> None:
        self.graph.launch(stream)


def give_back_memory() -> None:
    """What was dropped (arrays, graphs and their pools) back to the device, not kept in CuPy's shared pool: work
    that follows, another library's allocator among them, finds it free, and cudaMemGetInfo counts it free."""
    gc.collect()
    cupy.cuda.Device().synchronize()
    cupy.get_default_memory_pool().free_all_blocks()


def captured(stream, launch, pool=None):
    """launch()'s launches captured on `stream` as a CUDA graph, not run: (CapturedGraph, what launch returned).
    The caller must be in `stream` (`with stream:`), so that the launches go to it. pool: the memory pool its
    scratch comes from, shared with other graphs that never run at the same time as this one (one stream's);
    None: a pool of its own."""
    pool = pool if pool is not None else cupy.cuda.MemoryPool()
    with cupy.cuda.using_allocator(pool.malloc):
        stream.begin_capture()
        try:
            result = launch()
        finally:
            graph = stream.end_capture()
    return CapturedGraph(graph, pool), result
