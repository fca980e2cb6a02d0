"""Overlapping a kernel with the one before it (programmatic dependent launch, sm_90 and later).

A decode step is a chain of small kernels, each a few microseconds, and each normally
starts only when the one before it has finished and its blocks have drained. A kernel
whose source calls `wait_for_previous_kernel()` declares where it first needs the
previous kernel's results; `CudaKernel` then launches it so that its blocks may start
while the previous kernel is still running: they launch, and do what depends on
nothing before them (say, start fetching their weights into L2), then wait there.
`let_next_kernel_start()` lets the next such kernel launch that early.

The rule for a kernel that calls it: nothing before `wait_for_previous_kernel()` may
read what an earlier kernel writes, or write anything at all. Every earlier kernel of
the stream has finished, and its writes are visible, once the wait returns.

Only launches captured into a CUDA graph overlap. Launched one by one, the kernels wait
for the host anyway, and the extended launch (cuLaunchKernelEx through ctypes) costs
the host more than CuPy's. On GPUs before sm_90 both calls compile to nothing and
launches are ordinary, as they are everywhere inside `overlapping_launches(False)` (to
measure what overlap gives).
"""

import contextlib
import ctypes
import functools
import re

import numpy as np

from gpt2kit.kernel_runtime.device import cupy

_WAIT_CALL = re.compile(r"\bwait_for_previous_kernel\s*\(")

PRELUDE = r"""__device__ __forceinline__ void wait_for_previous_kernel() {  // gpt2kit/kernel_runtime/overlap.py
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void let_next_kernel_start() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;");
#endif
}
"""
PRELUDE_LINES = PRELUDE.count("\n")

_PROGRAMMATIC_STREAM_SERIALIZATION = 6  # CUlaunchAttributeID (cuda.h)
_enabled = True


class _LaunchAttribute(ctypes.Structure):  # CUlaunchAttribute: an id, then a 64-byte union at offset 8
    _fields_ = [("id", ctypes.c_int), ("value", ctypes.c_int * 17)]


class _LaunchConfig(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared_mem", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attributes", ctypes.POINTER(_LaunchAttribute)),
                ("attribute_count", ctypes.c_uint)]


_ATTRIBUTE = _LaunchAttribute(_PROGRAMMATIC_STREAM_SERIALIZATION)
_ATTRIBUTE.value[1] = 1  # programmaticStreamSerializationAllowed (the union starts 4 bytes into `value`)

_SCALARS = {np.dtype(np.int32): ctypes.c_int32, np.dtype(np.uint32): ctypes.c_uint32,
            np.dtype(np.int64): ctypes.c_int64, np.dtype(np.uint64): ctypes.c_uint64,
            np.dtype(np.float32): ctypes.c_float, np.dtype(np.float64): ctypes.c_double}


def waits_for_previous(source: str) -> bool:
    """Whether a CUDA source calls wait_for_previous_kernel() (and is compiled after PRELUDE)."""
    return _WAIT_CALL.search(source) is not None


@contextlib.contextmanager
def overlapping_launches(enabled: bool):
    """Inside the block, kernels that wait for the previous one launch overlapped (True) or ordinarily."""
    global _enabled
    before, _enabled = _enabled, enabled
    try:
        yield
    finally:
        _enabled = before


def launches_overlapped() -> bool:
    """Whether a kernel that waits for the previous one is launched to overlap it here and now: on sm_90
    and later, while the current stream is being captured into a CUDA graph."""
    return _enabled and device_supports_overlap() and _capturing()


def _capturing() -> bool:
    try:
        return cupy.cuda.get_current_stream().is_capturing()
    except cupy.cuda.runtime.CUDARuntimeError:  # the legacy stream, while another stream captures
        return False


def device_supports_overlap() -> bool:
    """Whether this GPU can overlap a kernel with the one before it (sm_90 and later)."""
    return _device_supports(cupy.cuda.Device().id)


@functools.cache
def _device_supports(device: int) -> bool:
    return int(cupy.cuda.Device(device).compute_capability) >= 90


@functools.cache
def _launch_kernel_ex():
    driver = ctypes.CDLL("libcuda.so.1")
    launch = driver.cuLaunchKernelEx
    launch.argtypes = [ctypes.POINTER(_LaunchConfig), ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                       ctypes.c_void_p]
    launch.restype = ctypes.c_int
    return launch


def passes(scalar: np.generic) -> bool:
    """Whether an overlapped launch can pass the NumPy scalar `scalar` as a kernel argument."""
    return scalar.dtype in _SCALARS


def _argument(value):
    if isinstance(value, cupy.ndarray):
        return ctypes.c_void_p(value.data.ptr)
    if isinstance(value, np.generic) and value.dtype in _SCALARS:
        return _SCALARS[value.dtype](value.item())
    raise TypeError(f"an overlapped launch takes CuPy arrays and NumPy scalars, not {type(value).__name__}")


def launch(kernel: int, grid, block, args, shared_mem: int = 0) -> None:
    """Launch `kernel` (a CUfunction handle: a CuPy RawKernel's .kernel.ptr, a loaded Function's .ptr) on the
    current stream, allowed to overlap the kernel before it."""
    grid, block = (tuple(dims) + (1,) * (3 - len(dims)) for dims in (grid, block))
    values = [_argument(arg) for arg in args]
    pointers = (ctypes.c_void_p * max(1, len(values)))(*[ctypes.addressof(v) for v in values])
    config = _LaunchConfig((ctypes.c_uint * 3)(*grid), (ctypes.c_uint * 3)(*block), shared_mem,
                           cupy.cuda.get_current_stream().ptr, ctypes.pointer(_ATTRIBUTE), 1)
    status = _launch_kernel_ex()(ctypes.byref(config), kernel, pointers, None)
    if status != 0:
        from cupy_backends.cuda.api import driver

        driver.check_status(status)  # raises CuPy's error for a failed launch, named as a plain launch's is
