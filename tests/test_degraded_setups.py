"""The suite on machines that lack something: no CuPy, no NVRTC.

Each runs pytest in a child process whose environment takes one thing away, and
checks that collection succeeds and every affected test skips with one line saying
what is missing and what to install.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpt2kit.kernel_runtime.device import cupy

ROOT = Path(__file__).parents[1]

NO_CUPY = 'raise ModuleNotFoundError("No module named \'cupy\'", name="cupy")\n'

# What a CuPy install without the NVRTC library meets: cuda-pathfinder cannot find it.
NO_NVRTC = '''\
import cuda.pathfinder as pathfinder

_load = pathfinder.load_nvidia_dynamic_lib


def _without_nvrtc(name, *args, **kwargs):
    if name == "nvrtc":
        raise pathfinder.DynamicLibNotFoundError("Failure finding libnvrtc.so")
    return _load(name, *args, **kwargs)


pathfinder.load_nvidia_dynamic_lib = _without_nvrtc
'''



def pytest_in(environment: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
                          capture_output=True, text=True, cwd=ROOT, env={**os.environ, **environment}, timeout=600)


# A test that needs an extra the setup did not install (PyTorch, transformers, matplotlib) skips saying how to add it
EXTRA_MISSING = re.compile(r"README's Setup says how to add|'\.\[(?:hf|experiments)\]'")


def skip_reasons(output: str) -> set[str]:
    """The skip reasons of a run, but those naming a starter kit's host functions not written yet or an extra not
    installed."""
    reasons = set(re.findall(r"^SKIPPED \[\d+\] [^:]+(?::\d+)?: (.*)$", output, re.MULTILINE))
    return {reason for reason in reasons
            if not re.fullmatch(r"[\w, ]+: not written yet \(.*\)", reason) and not EXTRA_MISSING.search(reason)}


# In a starter kit, its stubs fail test_is_written. The cases at GPT-2's and GPT-J's largest sizes run the same code
# as the smaller ones of their function, on larger arrays, for most of the time these take.
LARGEST_SIZES = "T1024 or 50257 or 50304 or C4096"


@pytest.mark.slow  # every test of these that must pass without CuPy runs again, in a child without it
def test_without_cupy_the_kernel_tests_collect_and_skip_saying_what_to_install(tmp_path):
    (tmp_path / "cupy.py").write_text(NO_CUPY)
    done = pytest_in({"PYTHONPATH": str(tmp_path)}, "tests/kernels", "tests/test_kernel_runtime.py",
                     "tests/reference", "tests/test_new_spec.py", "-k", f"not is_written and not ({LARGEST_SIZES})")
    summary = done.stdout.strip().splitlines()[-1]
    assert done.returncode == 0 and "error" not in summary, done.stdout[-3000:] + done.stderr[-2000:]
    install = "CuPy is not installed (pip install -e '.[cuda13]', or '.[cuda12]' for a CUDA 12 driver)"
    assert skip_reasons(done.stdout) == {f"GPU test skipped: {install}", f"compile check skipped: {install}", install}
    assert re.search(r"\d+ passed", summary)  # the NumPy reference and the CPU checks still run


@pytest.mark.skipif(cupy is None, reason="takes NVRTC away from an installed CuPy")
def test_without_nvrtc_the_compile_checks_skip_saying_what_to_install(tmp_path):
    (tmp_path / "sitecustomize.py").write_text(NO_NVRTC)
    done = pytest_in({"PYTHONPATH": str(tmp_path)}, "tests/kernels/test_compile.py")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert skip_reasons(done.stdout) == {
        "compile check skipped: NVRTC cannot be loaded (Failure finding libnvrtc.so; pip install -e '.[cuda13]', "
        "or '.[cuda12]' for a CUDA 12 driver)"}
