"""Technique checks on compiled code (NVRTC, no GPU): each technique shows in a kernel that
uses it and not in one that only claims it, and only the kernels the calls' tapes launched
are looked at. The samples are small kernels written for this test, all in one source, as
a kernel module with several kernels has them."""

import types

import pytest

from gpt2kit.kernel_runtime.replay import instrument
from gpt2kit.kernel_runtime.tape import Launch, Library, Program, Tape
from gpt2kit.reference.techniques import (CLASSES, TECHNIQUES, classes_in_ptx, missing_technique,
                                          static_classes)

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
SAMPLES_PROGRAM = Program(SAMPLES)

SHOWN = {  # sample -> the techniques its code shows
    "plain_matmul": set(),
    "tensor_core_tile": {"tensor_cores", "3xtf32"},  # in the code alike: the counts tell them apart
    "staged_tile": {"shared_memory", "reduction"},  # a barrier between shared stores and loads reads as either
    "serial_row_sum": set(),
    "shuffled_row_sum": {"reduction"},
}


PTX_TECHNIQUES = sorted(name for name, t in TECHNIQUES.items() if t.in_ptx)


@pytest.mark.parametrize("technique", PTX_TECHNIQUES)
def test_each_technique_shows_where_it_is_used_only(technique):
    found = static_classes([(SAMPLES_PROGRAM, name) for name in NAMES])
    assert {name: TECHNIQUES[technique].shown_by(classes) for name, classes in found.items()} == {
        name: technique in SHOWN[name] for name in NAMES}


def launched(*names, program=SAMPLES_PROGRAM, library_calls=0):
    """A recorded call whose tape launched kernels `names` of `program` (and made library calls)."""
    steps = [Launch(0, name, (1, 1, 1), (32, 1, 1), 0, ()) for name in names]
    steps += [Library("cupy.cublas.gemm", (), ())] * library_calls
    tape = Tape(programs=[program], steps=steps)
    return types.SimpleNamespace(case_id=f"case-{len(names)}", tape=tape, launches=len(names),
                                 library_calls=library_calls)


def test_missing_evidence_names_the_kernels_and_what_was_looked_for():
    assert missing_technique("tensor_cores", [launched("tensor_core_tile", "plain_matmul")]) is None
    assert missing_technique("tensor_cores", [launched("plain_matmul")]) == (
        "no evidence of tensor cores: none of plain_matmul has tensor-core instructions (mma.sync, wmma.mma or "
        "wgmma) in its compiled code")


def test_the_kernels_looked_at_are_the_ones_the_calls_launched():
    assert missing_technique("tensor_cores", [launched("plain_matmul"), launched("tensor_core_tile")]) is None
    assert missing_technique("tensor_cores", [launched("plain_matmul"), launched("staged_tile")]).startswith(
        "no evidence of tensor cores: none of plain_matmul, staged_tile has")


def test_a_kernel_defined_beside_the_launched_one_shows_nothing():
    # the source holds a tensor-core kernel, but the call launched the plain one only
    assert missing_technique("tensor_cores", [launched("plain_matmul")]) is not None


def test_executed_counts_decide_once_the_code_shows_the_technique():
    calls = [launched("tensor_core_tile")]
    assert missing_technique("tensor_cores", calls, {"tensor_core_tile": {"tensor_core": 0}}) == (
        "no evidence of tensor cores: tensor-core instructions (mma.sync, wmma.mma or wgmma) are in the compiled "
        "code, but the graded cases never executed them in one kernel (code that does not run shows nothing)")
    assert missing_technique("tensor_cores", calls, {"tensor_core_tile": {"tensor_core": 32}}, products=100) == (
        "no evidence of tensor cores: its tensor-core instructions did 32 multiply-adds, 32.0% of the graded "
        "cases' 100 (they must do at least 50% of them)")
    assert missing_technique("tensor_cores", calls, {"tensor_core_tile": {"tensor_core": 64}}, products=100) is None
    # three passes: one TF32 pass's worth of products is not enough
    assert missing_technique("3xtf32", calls, {"tensor_core_tile": {"tensor_core": 100}}, products=100) == (
        "no evidence of 3xtf32: its tensor-core instructions did 100 multiply-adds, 100.0% of the graded "
        "cases' 100 (they must do at least 50% of them, 3 times each: 150%)")
    assert missing_technique("3xtf32", calls, {"tensor_core_tile": {"tensor_core": 150}}, products=100) is None
    # a reduction shows in one kernel: a shuffle here and shared memory there is not one
    reductions = [launched("staged_tile", "shuffled_row_sum")]
    assert missing_technique("reduction", reductions, {"staged_tile": {"shared_store": 5, "barrier": 0,
                                                                       "shared_load": 5},
                                                       "shuffled_row_sum": {"shuffle": 0}}) is not None
    assert missing_technique("reduction", reductions, {"staged_tile": {}, "shuffled_row_sum": {"shuffle": 5}}) is None


def test_cublas_shows_in_the_calls_of_every_case():
    assert missing_technique("cublas", [launched(library_calls=1), launched("bias", library_calls=2)]) is None
    assert missing_technique("cublas", [launched(library_calls=1), launched("bias_rows_kernel")]) == (
        "no evidence of cublas: 1 of 2 cases made no cuBLAS call (through cupy.cublas), first case-1")


def calls(*launches, library_calls=0):
    return [types.SimpleNamespace(case_id=f"case-{i}", launches=n, library_calls=library_calls)
            for i, n in enumerate(launches)]


def test_fused_shows_in_one_launch_per_call_and_no_library_step():
    assert missing_technique("fused", calls(1, 1, 1)) is None
    assert missing_technique("fused", calls(1, 2, 3)) == (
        "no evidence of fused: 2 of 3 cases launched 2 kernels in one call, not one kernel launched per call and no "
        "library step (the layernorm, GELU or residual add inside the matmul's kernel); first case-1")
    assert missing_technique("fused", calls(1, 1, library_calls=1)) == (  # one kernel beside a cuBLAS product
        "no evidence of fused: 2 of 2 cases made 1 library call beside its kernel in one call, not one kernel "
        "launched per call and no library step (the layernorm, GELU or residual add inside the matmul's kernel); "
        "first case-0")


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
    found = static_classes([(Program(CALLS), "calls_a_reduction"), (Program(CALLS), "calls_nothing")])
    assert "shuffle" in found["calls_a_reduction"] and "shuffle" not in found["calls_nothing"]


DECOY = r"""
// named as the shuffled sample, written as the serial one
extern "C" __global__ void shuffled_row_sum(float* out, const float* in, int C) {
    if (threadIdx.x != 0) return;
    float sum = 0.0f;
    for (int c = 0; c < C; c++) sum += in[blockIdx.x * C + c];
    out[blockIdx.x] = sum;
}
"""


def test_the_launched_program_is_judged_not_another_of_the_same_name():
    assert missing_technique("reduction", [launched("shuffled_row_sum", program=Program(DECOY))]) is not None
    assert missing_technique("reduction", [launched("shuffled_row_sum")]) is None


def test_classes_are_read_from_instructions_not_comments_or_names():
    ptx = """.version 8.0
.target sm_86
.address_size 64

.visible .entry k(
\t.param .u64 k_param_0
)
{
\t.reg .pred %p<2>;
\t// shfl.sync in a comment, and a label named after ex2.approx
$L_ex2:
\t@%p1 st.shared.f32 [%r1], %f1;
\tret;
}
"""
    assert classes_in_ptx(ptx, "k") == {"shared_store"}


BRACED_ASM = r"""
// an inline asm block closed at a line's start, as a multi-line asm string leaves it, before the kernel's shuffles
extern "C" __global__ void shuffles_after_a_block(float* out, const float* in) {
    float sum = in[threadIdx.x];
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %0, 0;\n}\n" :: "r"(threadIdx.x));
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    out[threadIdx.x] = sum;
}
"""


def test_a_kernel_is_read_to_its_own_closing_brace_past_an_asm_block():
    found = static_classes([(Program(BRACED_ASM), "shuffles_after_a_block")])
    assert "shuffle" in found["shuffles_after_a_block"], found


def test_every_instruction_of_a_class_is_counted_past_an_asm_block():
    ptx = """.version 8.0
.target sm_86
.address_size 64

.visible .entry k(
\t.param .u64 k_param_0
)
{
\t{
.reg .pred p;
shfl.sync.bfly.b32 %r1, %r2, 16, 31, -1;
}
\tshfl.sync.bfly.b32 %r3, %r1, 8, 31, -1;
\t{ // a vector operand's braces on the same line
\tmov.b64 %rd1, {%r1, %r3};
}
\tshfl.sync.bfly.b32 %r4, %r3, 4, 31, -1;
\tret;
}
"""
    text, counters, _ = instrument(ptx, (CLASSES["shuffle"],))
    assert counters == [("k", "shuffle")] and text.count("red.global.add.u64 [kit_counts+0], 1") == 3, text
