"""gpt2kit.kernel_runtime.device.captured on a GPU: scratch that a host function takes from cupy.empty while it is
captured stays the graph's. Taken from CuPy's shared pool, the scratch would go back to the pool when the capture
drops it, the next array of that size would get the same memory, and every replay would overwrite that array."""

import numpy as np
import pytest

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernel_runtime.device import captured

pytestmark = pytest.mark.gpu

SOURCE = r"""
extern "C" __global__ void twice_through_scratch(float* out, float* scratch, const float* inp, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) scratch[i] = 2.0f * inp[i];
    if (i < n) out[i] = scratch[i];
}
"""
twice = CudaKernel(SOURCE, "twice_through_scratch")
N = 1 << 16


def doubled(out, inp):
    """A host function with a scratch of its own, as CuPy teaches: allocated at the call, dropped at its end."""
    import cupy

    scratch = cupy.empty(N, np.float32)
    twice((N // 256,), (256,), (out, scratch, inp, np.int32(N)))


def test_what_a_captured_call_allocates_is_not_handed_to_later_arrays():
    import cupy

    rng = np.random.default_rng(7)
    inp, out = cupy.asarray(rng.standard_normal(N, dtype=np.float32)), cupy.zeros(N, np.float32)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        doubled(out, inp)  # launched first: the kernel is loaded before the capture
        graph, _ = captured(stream, lambda: doubled(out, inp))
        later = [cupy.full(N, 7.0, np.float32) for _ in range(4)]  # the size the scratch had, on its stream
        for _ in range(3):
            out.fill(np.nan)
            graph.launch(stream)
        stream.synchronize()
    np.testing.assert_array_equal(out.get(), 2 * inp.get())
    for array in later:
        np.testing.assert_array_equal(array.get(), np.full(N, 7.0, np.float32))
