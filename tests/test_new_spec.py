"""Adding a host function takes its kernel module, its references and one spec: nothing else.

In a copy of the kit, a new host function scale_forward (out = alpha * inp) gets
kernels/scale.py, a reference in reference/cpu.py and in reference/gold.py, and
reference/specs/scale.py. Then, with no other file touched, it has its test cases
(and its argument checks), its compile check, its quick-check row, its benchmark row,
and the honest float32 computation passes its bounds; declared graded, the grader
refuses a weights.toml that does not score it. On a GPU its kernel tests run and pass.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpt2kit.kernel_runtime.device import nvrtc_unavailable_reason
from tests import KIT_PACKAGES


ROOT = Path(__file__).parents[1]
PACKAGES = (*KIT_PACKAGES, "tests")

KERNEL_MODULE = '''"""Scale: out = alpha * inp, elementwise over N floats."""

import numpy as np

from gpt2kit.kernel_runtime import CudaKernel, ceil_div, check_array, check_dims

BLOCK_SIZE = 128

SCALE_SOURCE = r"""
extern "C" __global__ void __launch_bounds__(BLOCK_SIZE) scale_forward_kernel(float* out, const float* inp,
                                                                              float alpha, long long N) {
    long long i = (long long)blockIdx.x * BLOCK_SIZE + threadIdx.x;
    if (i < N) out[i] = alpha * inp[i];
}
"""
scale_forward_kernel = CudaKernel(SCALE_SOURCE, "scale_forward_kernel", defines=dict(BLOCK_SIZE=BLOCK_SIZE))


def scale_forward(out, inp, alpha, N):
    check_dims("scale_forward", N=N)
    check_array("scale_forward", "out", out, N)
    check_array("scale_forward", "inp", inp, N)
    scale_forward_kernel((ceil_div(N, BLOCK_SIZE),), (BLOCK_SIZE,), (out, inp, np.float32(alpha), np.int64(N)))
'''

CPU_REFERENCE = '''

def scale_forward(out, inp, alpha, N):
    out.reshape(N)[...] = np.float32(alpha) * inp.reshape(N).astype(np.float64)
'''

GOLD_REFERENCE = '''

def scale_forward(out, inp, alpha, N):
    xp = array_module(inp)  # numpy or cupy: gold also runs where there is no CuPy
    xp.multiply(inp.reshape(N), xp.float32(alpha), out=out.reshape(N))
'''

SPEC_MODULE = '''"""scale_forward(out, inp, alpha, N): out = alpha * inp."""

from gpt2kit.reference.numerics import half_ulp
from gpt2kit.reference.spec import Arguments, Spec, normal


def build(case, rng):
    N = case.size["N"]
    return Arguments(dict(out=(N,), inp=normal(rng, N), alpha=-0.7, N=N))


def error_bound(x, e):
    return {"out": half_ulp(e["out"])}  # one correctly rounded product


SPEC = Spec(
    function="scale_forward", module="scale", outputs=("out",), build=build, error_bound=error_bound,
    cases=(dict(N=1), dict(N=129), dict(N=100_003)), quick=dict(N=1000), benchmark=(dict(N=2**24),),
    traffic=lambda s: 8 * s["N"], graded=GRADED,
)
'''


def kit_with_scale(directory: Path, graded: bool) -> Path:
    for name in PACKAGES:
        if (ROOT / name).exists():  # a student's kit has no grading/
            shutil.copytree(ROOT / name, directory / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", directory)
    (directory / "kernels" / "scale.py").write_text(KERNEL_MODULE)
    with open(directory / "reference" / "cpu.py", "a") as f:
        f.write(CPU_REFERENCE)
    with open(directory / "reference" / "gold.py", "a") as f:
        f.write(GOLD_REFERENCE)
    (directory / "reference" / "specs" / "scale.py").write_text(SPEC_MODULE.replace("GRADED", str(graded)))
    return directory


def run(kit: Path, *args: str) -> subprocess.CompletedProcess:
    """`python args` in the kit, its packages first (then whatever this run's PYTHONPATH holds: a setup without
    CuPy stays without it)."""
    path = os.pathsep.join(filter(None, (str(kit), os.environ.get("PYTHONPATH"))))
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=kit, timeout=600,
                          env=os.environ | {"PYTHONPATH": path})


@pytest.fixture(scope="module")
def kit(tmp_path_factory):
    return kit_with_scale(tmp_path_factory.mktemp("kit"), graded=False)


def test_it_gets_its_test_cases_and_argument_checks(kit):
    done = run(kit, "-m", "pytest", "--collect-only", "-q", "tests/kernels")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    collected = done.stdout.splitlines()
    for test in ("test_kernels.py::test_matches_numpy_reference[scale_forward-N129-",
                 "test_kernels.py::test_matches_gold[scale_forward-N100003-",
                 "test_kernels.py::test_a_second_call_in_the_same_process_passes_too[scale_forward-N1-",
                 "test_arguments.py::test_bad_argument_is_named[scale_forward-float64]",
                 "test_compile.py::test_compiles_without_spills[scale-sm_90]"):
        assert any(test in line for line in collected), f"no {test} among the collected tests"


def test_its_kernel_compiles_and_its_bounds_admit_float32(kit):
    done = run(kit, "-m", "pytest", "-q", "tests/kernels/test_compile.py", "tests/reference/test_checks.py",
               "-k", "scale")
    assert done.returncode == 0, done.stdout[-3000:]
    if nvrtc_unavailable_reason() is None:
        assert "5 passed" in done.stdout and "scale_forward_kernel" in done.stdout  # 2 arches, 3 cases; the report
    else:  # the 3 cases; each arch's compile skips, saying what to install
        assert "3 passed, 2 skipped" in done.stdout and "compile check skipped" in done.stdout, done.stdout[-3000:]


def test_it_gets_its_quick_check_and_benchmark_rows(kit):
    code = ("from gpt2kit.reference.verify import quick_cases; from gpt2kit.benchmarks.kernels import workloads; "
            "print([c.id for c in quick_cases(0) if c.function == 'scale_forward'], "
            "[row[-1].id for row in workloads() if row[1].function == 'scale_forward'])")
    done = run(kit, "-c", code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith("['N1000-seed") and "['N16777216-seed" in done.stdout


@pytest.mark.skipif(not (ROOT / "grading").exists(), reason="this kit has no grader")
def test_declared_graded_the_grader_wants_it_scored(tmp_path):
    graded_kit = kit_with_scale(tmp_path, graded=True)
    done = run(graded_kit, "-c", "from gpt2kit.grading.items import load_scheme; load_scheme()")
    assert "must score each host function students write once" in done.stderr and "scale_forward" in done.stderr


@pytest.mark.gpu
def test_on_the_gpu_its_kernel_tests_pass(kit):
    done = run(kit, "-m", "pytest", "-q", "tests/kernels", "-k",
               "scale and not compile and not rescale and not no_scale and not unscaled")
    assert done.returncode == 0, done.stdout[-3000:]
    # 3 cases x (numpy, gold), a second call of the smallest, 4 kinds of bad argument, and it is written
    assert "12 passed" in done.stdout, done.stdout[-3000:]
