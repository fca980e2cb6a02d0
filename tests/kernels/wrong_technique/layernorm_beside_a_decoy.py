"""A "reduction" layernorm that launches a one-thread-per-row kernel, and keeps at the top of its module a
never-launched kernel of the same name that does reduce with warp shuffles: only the launched program counts."""

from gpt2kit.kernel_runtime import CudaKernel
from tests.kernels.wrong_technique.layernorm_one_thread_per_row import SOURCE, layernorm_forward  # noqa: F401

VARIANT = "layernorm_reduction"

DECOY_SOURCE = r"""
extern "C" __global__ void layernorm_serial_rows(float* out, const float* in) {
    float value = in[threadIdx.x];
    for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
    out[threadIdx.x] = value;
}
"""
decoy = CudaKernel(DECOY_SOURCE, "layernorm_serial_rows")
