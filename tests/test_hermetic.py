"""The trusted build is hermetic and one: a taped program's options and includes are checked before
NVRTC reads it, it finds only the CUDA toolkit's headers and CuPy's, and every trusted look at it
(the PTX the technique check reads, the PTX a replay loads) is the same build. Replays take only the
library steps their caller permits and only the scratch a call's arrays justify. No GPU needed."""

import pytest

from gpt2kit.kernel_runtime.compiler import compile_ptx
from gpt2kit.kernel_runtime.errors import KernelCompileError
from gpt2kit.kernel_runtime.hermetic import HermeticBuildError, check_includes, check_options
from gpt2kit.kernel_runtime.replay import SCRATCH_FLOOR, replay
from gpt2kit.kernel_runtime.tape import Buffer, Library, Program, Tape, TapeError
from gpt2kit.reference.techniques import static_classes

KERNEL = 'extern "C" __global__ void k(float* out) { out[0] = VALUE; }\n'


@pytest.mark.parametrize("options", [
    ("-DTILE=64", "-DNAME=a b", "-UOLD"), ("--use_fast_math",), ("-use_fast_math", "-ftz=false", "--fmad=true"),
    ("-std=c++17",), ("--maxrregcount=64",), ("-lineinfo", "--extra-device-vectorization", "-default-device"),
    ("--expt-relaxed-constexpr", "-w", "--diag-suppress=177,550"),
])
def test_the_options_a_kernel_needs_are_allowed(options):
    check_options(options)


@pytest.mark.parametrize("option", [
    "-I/tmp", "--include-path=/tmp", "-include", "--pre-include=/tmp/x.h", "-arch=sm_90", "-rdc=true",
    "--relocatable-device-code=true", "-Xptxas=-v", "-D", "-D1X=2", "--dopt=on", "",
])
def test_an_option_that_reaches_a_file_or_changes_the_build_is_refused_by_name(option):
    with pytest.raises(HermeticBuildError, match="the compile option .* is not one a replay compiles with"):
        check_options(("-DTILE=64", option))


@pytest.mark.parametrize("source", [
    "#include <cuda_fp16.h>\n", '#include "cupy/complex.cuh"\n', "  #  include <mma.h> // a comment\n",
    "#if __has_include(<cuda_bf16.h>)\n#endif\n", "#if defined(__has_include)\n#endif\n",
    '// #include "/etc/passwd"\n', '/* #include "/etc/passwd"\n */\n', 'const char* s = "#include \\"/x\\"";\n',
    "int n = 1'000'000; // #include </etc/passwd>\n",
])
def test_headers_by_their_literal_names_are_allowed(source):
    check_includes(source + KERNEL)


@pytest.mark.parametrize("source", [
    '#include "/tmp/kernel.h"\n', "#include </etc/passwd>\n", '#include "../../grading/x.h"\n',
    '#include "cupy/../../../secret.h"\n', "#define H \"/tmp/k.h\"\n#include H\n", "#include_next <x/../../y>\n",
    '#inc\\\nlude "/tmp/k.h"\n', '%:include "/tmp/k.h"\n', '# /* a comment */ include "/tmp/k.h"\n',
    '#if __has_include("/tmp/k.h")\n#endif\n', '/* one */ #include "/tmp/k.h"\n',
    # the preprocessor reads 1'0 as a number, then '/*' as a character literal: the include is real
    "int a = 1'0'/*';\n#include \"/tmp/k.h\"\n// */\n",
    # a raw string undoes splicing inside it: refused whole
    'const char* s = R"(/*)";\n#include "/tmp/k.h"\n// */\n',
])
def test_an_include_that_could_read_another_file_is_refused_naming_it(source):
    with pytest.raises(HermeticBuildError) as refused:
        check_includes(source + KERNEL)
    assert len(str(refused.value).splitlines()) == 1


@pytest.mark.nvrtc
def test_the_build_reads_no_header_beside_the_source_or_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / "answer.h").write_text("#define VALUE 42.0f\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(KernelCompileError, match='open source file "answer.h"'):
        compile_ptx(Program('#include "answer.h"\n' + KERNEL), "sm_86")
    with pytest.raises(HermeticBuildError, match="no absolute path"):
        compile_ptx(Program(f'#include "{tmp_path / "answer.h"}"\n' + KERNEL), "sm_86")


@pytest.mark.nvrtc
def test_the_build_has_cupy_s_and_the_toolkit_s_headers_as_cupy_compiles_with_them():
    ptx, _ = compile_ptx(Program("#include <cuda_fp16.h>\n#include <cupy/complex.cuh>\n"
                                 "#if __has_include(<cupy/complex.cuh>)\n#define VALUE 1.0f\n#endif\n" + KERNEL),
                         "sm_86")
    assert ".entry k(" in ptx


WHICH_BUILD = r"""
#if __has_include(<cupy/complex.cuh>)
extern "C" __global__ void k(float* out) { out[threadIdx.x] = 1.0f; }
#else
extern "C" __global__ void k(float* out) {
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    unsigned a[4] = {0u, 0u, 0u, 0u}, b[2] = {0u, 0u};
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};" : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    out[threadIdx.x] = d[0];
}
#endif
"""


@pytest.mark.nvrtc
def test_the_technique_check_looks_at_the_build_the_replay_runs():
    """A source that asks which build it is in gets CuPy's headers in every trusted build, so the PTX the technique
    check reads is the plain kernel a replay runs, never a tensor-core one shown only to the check."""
    assert static_classes([(Program(WHICH_BUILD), "k")]) == {"k": set()}


def library_tape(*buffers) -> Tape:
    return Tape(buffers=list(buffers), steps=[Library("cupy.cublas.gemm", ("N", "T"), ())])


def test_a_library_step_replays_only_where_the_caller_permits_its_library():
    with pytest.raises(TapeError, match=r"refused: the tape calls cupy\.cublas\.gemm, which this call may not use "
                                        r"\(it permits no library; its own kernels must compute\)"):
        replay(library_tape(), {})


def test_a_tape_s_scratch_is_bounded_by_the_call_s_arrays():
    with pytest.raises(TapeError, match=f"asks for {2**36:,} bytes of scratch; a call on these arrays may have at "
                                        f"most {SCRATCH_FLOOR:,}"):
        replay(Tape(buffers=[Buffer(2**36)]), {})
