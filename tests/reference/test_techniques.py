"""Technique checks on compiled code (NVRTC, no GPU): each technique shows in a kernel that
uses it and not in one that only claims it. The samples are small kernels written for
this test, all in one source, as a kernel module with several kernels has them."""

import sys
import types

import pytest

from kernel_runtime import CudaKernel
from reference.techniques import TECHNIQUES, evidence, launched_kernels, missing_evidence, missing_technique

pytestmark = pytest.mark.nvrtc

SAMPLES = r"""
// a "TF32" matmul that is plain float32, one output per thread: no tensor cores, no tiles
extern "C" __global__ void plain_matmul(float* out, const float* a, const float* w, int C, int OC) {
    int row = blockIdx.y, o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= OC) return;
    float acc = 0.0f;
    for (int k = 0; k < C; k++) acc += a[row * C + k] * w[o * C + k];
    out[row * OC + o] = acc;
}

// one m16n8k8 TF32 product on the tensor cores (a warp's fragments, loaded plainly)
extern "C" __global__ void tensor_core_tile(float* d, const float* a, const float* b) {
    int lane = threadIdx.x % 32;
    unsigned a_frag[4], b_frag[2];
    for (int i = 0; i < 4; i++) asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(a_frag[i]) : "f"(a[lane * 4 + i]));
    for (int i = 0; i < 2; i++) asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(b_frag[i]) : "f"(b[lane * 2 + i]));
    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a_frag[0]), "r"(a_frag[1]), "r"(a_frag[2]), "r"(a_frag[3]), "r"(b_frag[0]), "r"(b_frag[1]));
    for (int i = 0; i < 4; i++) d[lane * 4 + i] = c[i];
}

// a tile staged in shared memory
extern "C" __global__ void staged_tile(float* out, const float* in) {
    __shared__ float tile[256];
    int i = blockIdx.x * 256 + threadIdx.x;
    tile[threadIdx.x] = in[i];
    __syncthreads();
    out[i] = tile[255 - threadIdx.x];
}

// a "reduction" that is one thread walking a whole row
extern "C" __global__ void serial_row_sum(float* out, const float* in, int C) {
    if (threadIdx.x != 0) return;
    float sum = 0.0f;
    for (int c = 0; c < C; c++) sum += in[blockIdx.x * C + c];
    out[blockIdx.x] = sum;
}

// a row summed by a warp's shuffles
extern "C" __global__ void shuffled_row_sum(float* out, const float* in, int C) {
    float sum = 0.0f;
    for (int c = threadIdx.x; c < C; c += 32) sum += in[blockIdx.x * C + c];
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (threadIdx.x == 0) out[blockIdx.x] = sum;
}
"""

NAMES = ("plain_matmul", "tensor_core_tile", "staged_tile", "serial_row_sum", "shuffled_row_sum")
# at the top level, as a kernel module defines them: where the calls' launched kernels are looked up
plain_matmul, tensor_core_tile, staged_tile, serial_row_sum, shuffled_row_sum = (CudaKernel(SAMPLES, n) for n in NAMES)
KERNELS = [plain_matmul, tensor_core_tile, staged_tile, serial_row_sum, shuffled_row_sum]

SHOWN = {  # sample -> the techniques its code shows
    "plain_matmul": set(),
    "tensor_core_tile": {"tensor_cores"},
    "staged_tile": {"shared_memory", "reduction"},  # a barrier between shared stores and loads reads as either
    "serial_row_sum": set(),
    "shuffled_row_sum": {"reduction"},
}


PTX_TECHNIQUES = sorted(name for name, t in TECHNIQUES.items() if t.in_ptx)


@pytest.mark.parametrize("technique", PTX_TECHNIQUES)
def test_each_technique_shows_where_it_is_used_only(technique):
    found = evidence(KERNELS, technique)
    assert found == {name: technique in SHOWN[name] for name in NAMES}


def named(*names):
    return [k for k in KERNELS if k.name in names]


def test_missing_evidence_names_the_kernels_and_what_was_looked_for():
    assert missing_evidence(named("tensor_core_tile", "plain_matmul"), "tensor_cores") is None
    assert missing_evidence(named("plain_matmul"), "tensor_cores") == (
        "no evidence of tensor cores: none of plain_matmul has tensor-core instructions (mma.sync, wmma.mma or "
        "wgmma) in its PTX")


def launched(*names, library_calls=0):
    return types.SimpleNamespace(case_id=f"case-{len(names)}", kernels_launched=list(names),
                                 library_calls=library_calls)


def test_the_kernels_looked_at_are_the_ones_the_calls_launched():
    assert missing_technique("tensor_cores", [launched("plain_matmul"), launched("tensor_core_tile")]) is None
    assert missing_technique("tensor_cores", [launched("plain_matmul"), launched("staged_tile")]).startswith(
        "no evidence of tensor cores: none of plain_matmul, staged_tile has")
    assert missing_technique("reduction", [launched("made_elsewhere")]) == (
        "cannot inspect the compiled code of made_elsewhere: write each kernel as a kernel_runtime.CudaKernel at the "
        "top level of its module")
    found, unknown = launched_kernels(["shuffled_row_sum", "made_elsewhere"])
    assert [k.name for k in found] == ["shuffled_row_sum"] and unknown == ["made_elsewhere"]


def test_cublas_shows_in_the_calls_of_every_case():
    assert missing_technique("cublas", [launched(library_calls=1), launched("bias", library_calls=2)]) is None
    assert missing_technique("cublas", [launched(library_calls=1), launched("bias_rows_kernel")]) == (
        "no evidence of cublas: 1 of 2 cases made no cuBLAS call (through cupy.cublas), first case-1")


def calls(*launches):
    return [types.SimpleNamespace(case_id=f"case-{i}", launches=n) for i, n in enumerate(launches)]


def test_fused_shows_in_one_launch_per_call():
    assert missing_technique("fused", calls(1, 1, 1)) is None
    assert missing_technique("fused", calls(1, 2, 3)) == (
        "no evidence of fused: 2 of 3 cases launched 2 kernels in one call, not one kernel launched per call (the "
        "layernorm, GELU or residual add inside the matmul's kernel); first case-1")


CALLS = r"""
__device__ __noinline__ float shuffled_sum(float value) {
    for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
    return value;
}

__device__ __noinline__ float twice_shuffled(float value) { return 2.0f * shuffled_sum(value); }

extern "C" __global__ void calls_a_reduction(float* out, const float* in) {
    out[threadIdx.x] = twice_shuffled(in[threadIdx.x]);
}

extern "C" __global__ void calls_nothing(float* out, const float* in) { out[threadIdx.x] = 2.0f * in[threadIdx.x]; }
"""


def test_a_device_function_counts_for_the_kernels_that_call_it_only():
    kernels = [CudaKernel(CALLS, "calls_a_reduction"), CudaKernel(CALLS, "calls_nothing")]
    assert evidence(kernels, "reduction") == {"calls_a_reduction": True, "calls_nothing": False}


DECOY = r"""
// named as the shuffled sample, written as the serial one
extern "C" __global__ void shuffled_row_sum(float* out, const float* in, int C) {
    if (threadIdx.x != 0) return;
    float sum = 0.0f;
    for (int c = 0; c < C; c++) sum += in[blockIdx.x * C + c];
    out[blockIdx.x] = sum;
}
"""


def test_a_launched_name_two_kernels_share_shows_a_technique_only_if_both_do(monkeypatch):
    decoys = types.ModuleType("decoys")
    decoys.shuffled_row_sum = CudaKernel(DECOY, "shuffled_row_sum")
    monkeypatch.setitem(sys.modules, "decoys", decoys)
    found, _ = launched_kernels(["shuffled_row_sum"])
    assert len(found) == 2
    assert missing_technique("reduction", [launched("shuffled_row_sum")]) is not None
    monkeypatch.delitem(sys.modules, "decoys")
    assert missing_technique("reduction", [launched("shuffled_row_sum")]) is None
