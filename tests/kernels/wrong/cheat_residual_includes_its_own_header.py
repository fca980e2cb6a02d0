"""Cheat: at its first call, writes its kernel into a header file of its own and compiles a source that is one
`#include` of that file's absolute path. Its process compiles and runs it, but the tape holds only the
include line: the trusted build refuses any header that is not the CUDA toolkit's or CuPy's, naming it,
so the code that ran is never the code judged (nor could a tape read a file of the grader's this way)."""

import atexit
import os
import tempfile
from pathlib import Path

import numpy as np

from gpt2kit.kernel_runtime import ceil_div
from tests.kernels.wrong import launch_nothing

FUNCTION = "residual_forward"

HEADER = Path(tempfile.gettempdir()) / f"kit-cheat-residual-{os.getpid()}.h"
KERNEL = r"""
extern "C" __global__ void residual_from_header(float* out, const float* inp1, const float* inp2, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = inp1[i] + inp2[i];
}
"""
_kernel = {}


def residual_forward(out, inp1, inp2, N):
    import cupy

    if not _kernel:
        HEADER.write_text(KERNEL)
        atexit.register(HEADER.unlink, missing_ok=True)
        _kernel["k"] = cupy.RawKernel(f'#include "{HEADER}"\n', "residual_from_header")
    launch_nothing()
    _kernel["k"]((ceil_div(N, 256),), (256,), (out, inp1, inp2, np.int64(N)))
