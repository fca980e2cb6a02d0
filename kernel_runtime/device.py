"""Whether this process can run CUDA kernels, and the one line that says why not."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

from kernel_runtime.errors import GPUUnavailableError

try:
    import cupy
except ImportError:  # the NumPy reference and the CPU tests work without CuPy
    cupy = None


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
        return f"no usable CUDA GPU ({first_line(err)})"
    if count == 0:
        return "no usable CUDA GPU (the driver reports 0 devices)"
    return None


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


def first_line(err: BaseException) -> str:
    text = str(err).strip() or type(err).__name__
    return text.splitlines()[0]
