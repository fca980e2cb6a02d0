"""Kernels written the way CuPy teaches (tests/grading/cupy_style.py: the kit's own, as cupy.RawKernel at
import, lazily in a dict, or cupy.RawModule) get from the students' own checks what the kit's kernels get:
they compile in the compile checks (or, made only when first called and needing the options they are then
given, are left to the GPU tests with the compiler's reason), and on a GPU they show their techniques as
the grader judges them. tests/grading/test_grader_gpu.py grades them: full marks in every milestone."""

import subprocess
import sys
from pathlib import Path

import pytest

from tests.grading.cupy_style import STYLES, cupy_style_submission

ROOT = Path(__file__).parents[2]


def kernel_tests(submission: Path, *arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *arguments,
                           "--kernels", str(submission)], cwd=ROOT, capture_output=True, text=True)


@pytest.mark.nvrtc
@pytest.mark.parametrize("style", STYLES)
def test_the_compile_checks_see_their_kernels(tmp_path, style):
    done = kernel_tests(cupy_style_submission(tmp_path, style), "tests/kernels/test_compile.py", "-k", "gelu or matmul")
    assert done.returncode == 0, done.stdout[-3000:]
    summary = done.stdout.strip().splitlines()[-1]
    if style == "at_import":  # every kernel is there to be compiled, with its options
        assert "skipped" not in summary and "defines no kernel" not in done.stdout, summary
    else:  # gelu's source compiles as it stands; matmul's needs the defines it is given when first called
        assert "makes its kernels when first called" in done.stdout and "passed" in summary, done.stdout[-3000:]


@pytest.mark.gpu
@pytest.mark.parametrize("style", STYLES)
def test_their_techniques_show_in_the_students_own_checks(tmp_path, style):
    done = kernel_tests(cupy_style_submission(tmp_path, style), "tests/kernels/test_variants.py", "-k",
                        "show_its_technique")
    assert done.returncode == 0, done.stdout[-3000:]
