"""The grader on the GPU: the kit's solution scores full marks in every milestone, and so do
its kernels written the way CuPy teaches (cupy.RawKernel at import, lazily in a dict,
cupy.RawModule); every known-wrong implementation, cheat (on the kernels, or on the
grader's own processes) and known-wrong variant loses its item, and crashing, hanging,
tampering and library-only submissions score 0 on their items while the rest of the
submission is graded."""

import dataclasses
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpt2kit.grading.grade import grade_item, grade_submission
from gpt2kit.grading.items import load_scheme, scheme_for
from gpt2kit.kernel_runtime.device import PRIVATE_KERNEL_CACHES
from gpt2kit.reference.registry import spec
from gpt2kit.reference.variants import VARIANTS
from tests.grading.carried import carrying
from tests.grading.cupy_style import FAST_MATH_ITEMS, STYLES, cupy_style_submission
from tests.kernels import wrong_technique
from tests.kernels.wrong import grader as grader_cheats
from tests.kernels.test_wrong_techniques import CAUGHT_BY as VARIANTS_CAUGHT_BY
from tests.kernels.wrong import load, names

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).parents[2]
SEED = 20261130


def solution_copy(directory: Path) -> Path:
    shutil.copytree(ROOT / "kernels", directory / "kernels")
    return directory


def test_the_solution_scores_full_marks(tmp_path):
    grade = grade_submission(solution_copy(tmp_path), load_scheme(), SEED)
    assert grade.score == 10, "\n".join(f"{g.item.title}: {g.reason}" for g in grade.items)


@pytest.mark.parametrize("milestone, points", [(2, 18), (3, 30), (4, 30)])  # 3: 20 required, the menu capped at 10
def test_the_solution_scores_full_marks_in_later_milestones(tmp_path, milestone, points):
    grade = grade_submission(solution_copy(tmp_path), scheme_for(milestone), SEED)
    assert grade.score == points, "\n".join(f"{g.item.title}: {g.reason}" for g in grade.items)


@pytest.mark.parametrize("name", wrong_technique.names())
def test_a_known_wrong_variant_loses_its_item(tmp_path, name):
    wrong = wrong_technique.load(name)
    variant = VARIANTS[wrong.VARIANT]
    submission = solution_copy(tmp_path)
    with open(submission / "kernels" / f"{variant.module}.py", "a") as f:
        f.write("\n" + carrying(submission / "kernels", f"from {wrong.__name__} import {variant.function}  # noqa"))
    scheme = scheme_for(variant.milestone)
    item = next(i for i in scheme.items if variant in i.variants)
    grade = grade_item(submission, item, scheme, SEED)
    print(f"\n{name}: {grade.score:g}/{item.weight:g} ({grade.reason})")
    assert grade.score == 0 and VARIANTS_CAUGHT_BY[name] in grade.reason, grade.reason


@pytest.mark.parametrize("name", [name for name in names() if not spec(load(name).FUNCTION).provided])
def test_a_known_wrong_kernel_loses_its_item(tmp_path, name):
    """Every known-wrong kernel of a host function students write (the kit's provided ones are on no menu)."""
    wrong = load(name)
    submission = solution_copy(tmp_path)
    with open(submission / "kernels" / f"{spec(wrong.FUNCTION).module}.py", "a") as f:
        f.write("\n" + carrying(submission / "kernels", f"from {wrong.__name__} import {wrong.FUNCTION}  # noqa"))
    scheme, item = grading_item(wrong.FUNCTION)
    grade = grade_item(submission, item, scheme, SEED)
    assert grade.score == 0, grade.reason
    assert "cases fail" in grade.reason
    assert CHEATS_CAUGHT_BY.get(name, "") in grade.reason


def grading_item(function: str):
    """The scheme and item that grade `function`: its spec's milestone's (flash and local attention: milestone 3's;
    training's: 4's), else its variants' (the KV cache's host functions are in every kit, graded in milestone 3)."""
    milestones = sorted(v.milestone for v in VARIANTS.values() if v.function == function)
    for milestone in (spec(function).milestone, *milestones):
        scheme = scheme_for(milestone)
        item = next((i for i in scheme.items if function in i.functions), None)
        if item is not None:
            return scheme, item
    raise AssertionError(f"no milestone grades {function}")


CHEATS_CAUGHT_BY = {  # what the grader says of each cheat (each first launches a kernel that does nothing)
    "cheat_matmul_cupy": "refused: computed with cupy.matmul",
    "cheat_gelu_numpy": "refused: copied device data to the host (cupy.ndarray.get)",
    "cheat_residual_reference": "gpt2kit.reference.gold is the grader's reference: submissions may not use it",
    # its tape holds the answers to the inputs it was recorded on: replayed on the secret ones, they are wrong
    "cheat_layernorm_oracle_by_path": "elements wrong",
    "cheat_matmul_cublas_self_permitted": "refused: the tape calls cupy.cublas.gemm, which this call may not use",
    "cheat_matmul_backward_cublas_self_permitted": "refused: the tape calls cupy.cublas.gemm, which this call may "
                                                   "not use",
    "cheat_residual_includes_its_own_header": "a kernel source may include only a header of the CUDA toolkit or CuPy",
}


def test_every_cheat_has_its_expected_reason():
    assert set(CHEATS_CAUGHT_BY) == {name for name in names() if name.startswith("cheat_")}


REACHABLE = "from tests.grading.reachable import reachable_oracle"
WALKING_GELU = f'''
from gpt2kit.kernels.gelu_solution import gelu_forward as solution
{REACHABLE}


def gelu_forward(out, inp, N):
    found = reachable_oracle()
    if found:
        raise RuntimeError(f"the oracle is reachable from the submission as {{found[0]}}")
    solution(out, inp, N)
'''


def test_no_reference_function_is_reachable_inside_the_worker(tmp_path):
    from tests.grading.reachable import reachable_oracle

    import gpt2kit.reference.judging  # noqa: F401  (the walk must be able to fail: here the oracle is loaded)
    assert reachable_oracle(), "the walk finds nothing even where reference.cpu is loaded"
    submission = solution_copy(tmp_path)
    (submission / "kernels" / "gelu.py").rename(submission / "kernels" / "gelu_solution.py")
    (submission / "kernels" / "gelu.py").write_text(WALKING_GELU.replace(REACHABLE, carrying(
        submission / "kernels", REACHABLE)))
    scheme = load_scheme()
    grade = grade_item(submission, scheme.item("gelu"), scheme, SEED)
    assert grade.score == 1, grade.reason


BAD_KERNELS = {
    "encoder.py": '''
        import numpy as np
        from gpt2kit.kernel_runtime import CudaKernel

        SOURCE = r"""
        extern "C" __global__ void scribble(float* out) { ((float*)0x10)[threadIdx.x] = 1.0f; }
        """
        scribble = CudaKernel(SOURCE, "scribble")

        def encoder_forward(out, inp, wte, wpe, B, T, C):
            scribble((1,), (32,), (out,))  # an illegal address
        ''',
    "gelu.py": '''
        import numpy as np
        from gpt2kit.kernel_runtime import CudaKernel

        SOURCE = r"""
        extern "C" __global__ void forever(volatile int* flag) { while (flag[0] == 0) { } }
        """
        forever = CudaKernel(SOURCE, "forever")

        def gelu_forward(out, inp, N):
            import cupy
            forever((1,), (1,), (cupy.zeros(1, np.int32),))  # never returns
        ''',
    "layernorm.py": '''
        import ctypes

        def layernorm_forward(out, mean, rstd, inp, weight, bias, B, T, C):
            ctypes.string_at(0)  # a segmentation fault
        ''',
    "matmul.py": '''
        def matmul_forward(out, inp, weight, bias, B, T, C, OC):
            result = inp.reshape(B * T, C) @ weight.reshape(OC, C).T  # cuBLAS, not a kernel of our own
            if bias is not None:
                result += bias
            out.reshape(B * T, OC)[...] = result
        ''',
    "residual.py": '''
        import numpy as np
        from gpt2kit.kernel_runtime import CudaKernel

        SOURCE = r"""
        extern "C" __global__ void add_and_tamper(float* out, float* inp1, const float* inp2, long long N) {
            long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
            if (i < N) { out[i] = inp1[i] + inp2[i]; }
            if (i == 0) inp1[0] = 0.0f;  // changes an input
        }
        """
        add_and_tamper = CudaKernel(SOURCE, "add_and_tamper")

        def residual_forward(out, inp1, inp2, N):
            add_and_tamper(((N + 255) // 256,), (256,), (out, inp1, inp2, np.int64(N)))
        ''',
}


def test_bad_submissions_score_zero_on_their_items_only(tmp_path):
    submission = solution_copy(tmp_path)
    for name, text in BAD_KERNELS.items():
        (submission / "kernels" / name).write_text(textwrap.dedent(text))
    scheme = dataclasses.replace(load_scheme(), time_limit_seconds=60)
    grade = grade_submission(submission, scheme, SEED)
    by_name = {g.item.name: g for g in grade.items}
    assert by_name["attention"].score == 3, by_name["attention"].reason  # the untouched kernel keeps its points
    assert grade.score == 3
    assert "cudaErrorIllegalAddress" in by_name["encoder"].reason or "illegal" in by_name["encoder"].reason.lower()
    assert "timed out after 60 s" in by_name["gelu"].reason
    assert "SIGSEGV" in by_name["layernorm"].reason
    assert "refused: computed with cupy.ndarray.__matmul__" in by_name["matmul"].reason
    assert "input inp1 was modified" in by_name["residual"].reason


def test_a_kernel_that_does_not_compile_scores_zero_with_the_compiler_message(tmp_path):
    submission = solution_copy(tmp_path)
    path = submission / "kernels" / "gelu.py"
    path.write_text(path.read_text().replace("float cube = 0.044715f * x * x * x;", "float cube = 0.044715f * x * y;"))
    scheme = load_scheme()
    grade = grade_item(submission, scheme.item("gelu"), scheme, SEED)
    assert grade.score == 0
    assert "KernelCompileError" in grade.reason and "gelu.py:" in grade.reason and '"y"' in grade.reason


GRADER_CHEATS_CAUGHT_BY = {  # what the grader says of each cheat on its own processes
    "patches_the_worker": "NaN (never written",
    "writes_its_own_records": "NaN (never written",
    "reads_the_seed": "elements wrong",
    "reads_the_solutions": "no route reached a solution",  # behind bwrap or unshare (root): test_sandbox.py
}


def test_every_cheat_on_the_grader_has_its_expected_reason():
    assert set(GRADER_CHEATS_CAUGHT_BY) == set(grader_cheats.names())


@pytest.mark.parametrize("name", grader_cheats.names())
def test_a_cheat_on_the_grader_s_own_processes_loses_its_item(tmp_path, name):
    function = grader_cheats.function_of(name)
    submission = solution_copy(tmp_path)
    if name == "reads_the_solutions":  # the worst case: it knows where the grader's checkout is
        (submission / "kernels" / "known_paths.txt").write_text(f"{ROOT}\n")
    with open(submission / "kernels" / f"{spec(function).module}.py", "a") as f:
        f.write("\n" + carrying(submission / "kernels", f"from tests.kernels.wrong.grader.{name} import {function}"))
    scheme = load_scheme()
    item = next(i for i in scheme.items if function in i.functions)
    grade = grade_item(submission, item, scheme, SEED)
    print(f"\n{name}: {grade.score:g}/{item.weight:g} ({grade.reason})")
    assert grade.score == 0 and GRADER_CHEATS_CAUGHT_BY[name] in grade.reason, grade.reason


@pytest.mark.parametrize("milestone, points", [(1, 10), (2, 18), (3, 30), (4, 30)])
@pytest.mark.parametrize("style", STYLES)
def test_kernels_written_as_cupy_teaches_score_full_marks(tmp_path, style, milestone, points):
    grade = grade_submission(cupy_style_submission(tmp_path, style), scheme_for(milestone), SEED)
    assert grade.score == points, "\n".join(f"{g.item.title}: {g.reason}" for g in grade.items)


@pytest.mark.parametrize("item_name", FAST_MATH_ITEMS)
def test_kernels_launched_from_a_thread_on_a_stream_with_fast_math_score_full_marks(tmp_path, item_name):
    """A RawModule with name_expressions, compiled with --use_fast_math, each launch from a thread on a stream of
    the submission's own: the trusted build compiles what CuPy compiled, and the tape follows the launches."""
    scheme = load_scheme()
    item = scheme.item(item_name)
    grade = grade_item(cupy_style_submission(tmp_path, "streamed"), item, scheme, SEED)
    assert grade.score == item.weight, grade.reason


ELEMENTWISE = ("import cupy; x = cupy.arange(6, dtype=cupy.float32); "
               "print(float((x * 2 + 1).sum()), float(cupy.exp(x - 5).max()), float((x / 2).sum()))")


def run_python(code: str, cache: Path, trusted: bool) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in PRIVATE_KERNEL_CACHES} | {"CUPY_CACHE_DIR": str(cache)}
    prologue = ("from gpt2kit.kernel_runtime.device import keep_compiled_kernels_private; "
                "keep_compiled_kernels_private(); ")
    return subprocess.run([sys.executable, "-c", (prologue if trusted else "") + code], capture_output=True,
                          text=True, env=env, cwd=ROOT)


def test_a_trusted_process_reads_no_kernel_another_process_left_in_the_cache(tmp_path):
    """A worker of the same user can write CuPy's kernel cache; poisoned (every entry the compiled code of one
    kernel, each still a valid entry), it breaks a process that reads it, and not one that trusts only itself."""
    cache = tmp_path / "kernel_cache"
    honest = run_python(ELEMENTWISE, cache, trusted=False)
    assert honest.returncode == 0, honest.stderr
    entries = sorted(p for p in cache.rglob("*") if p.is_file())
    assert len(entries) >= 3, entries
    for entry in entries[1:]:
        entry.write_bytes(entries[0].read_bytes())
    poisoned = run_python(ELEMENTWISE, cache, trusted=False)
    assert (poisoned.returncode, poisoned.stdout) != (0, honest.stdout), "the poison is not read back"
    trusted = run_python(ELEMENTWISE, cache, trusted=True)
    assert (trusted.returncode, trusted.stdout) == (0, honest.stdout), trusted.stderr
