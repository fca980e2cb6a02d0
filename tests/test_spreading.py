"""The suite spread over processes (tests/spreading.py, tests/conftest.py): only the whole suite on a
machine without a GPU, the compile report whole, each program compiled once in a run (tests/compile_reports.py),
and the slow tests first and named in the README."""

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpt2kit.kernel_runtime.compiler import CudaKernel
from gpt2kit.kernel_runtime.errors import KernelCompileError
from tests import compile_reports
from tests.compile_reports import Compiling
from tests.readme import READMES
from tests.spreading import MAX_WORKERS, ONE_THREAD, suite_workers

ROOT = Path(__file__).parents[1]
EXTRAS = ("torch", "transformers")  # what the hf extra's tests import


def pytest_run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=600)


@pytest.mark.parametrize("whole_suite, gpu_reason, nested, cpus, workers", [
    (True, "no NVIDIA GPU or driver on this machine", False, 2, 2),
    (True, "no NVIDIA GPU or driver on this machine", False, 64, MAX_WORKERS),  # a shared login node
    (True, None, False, 16, 0),  # a GPU: its tests keep one process
    (False, "no NVIDIA GPU or driver on this machine", False, 16, 0),  # pytest tests/kernels
    (True, "no NVIDIA GPU or driver on this machine", True, 16, 0),  # a pytest run inside a test
    (True, "no NVIDIA GPU or driver on this machine", False, 1, 0),
])
def test_only_the_whole_suite_without_a_gpu_is_spread(whole_suite, gpu_reason, nested, cpus, workers):
    assert suite_workers(whole_suite, gpu_reason, nested, cpus) == workers


def test_each_process_of_a_spread_run_computes_with_one_thread():
    """Spread, as the whole suite is without a GPU, this test looks at its own process; run alone, it runs itself
    again in a spread run."""
    if "PYTEST_XDIST_WORKER" in os.environ:
        assert {name: os.environ.get(name) for name in ONE_THREAD} == ONE_THREAD
        return
    done = pytest_run("-q", "-n", "2", f"{__file__}::test_each_process_of_a_spread_run_computes_with_one_thread")
    assert done.returncode == 0 and "bringing up nodes" in done.stdout, done.stdout[-3000:]


REPORT_ROW = re.compile(r"^\w+ +sm_\d+( +\d+){5}$", re.MULTILINE)


def kernel_rows(output: str) -> list[str]:
    """The rows of the compile report's table, sorted."""
    assert "kernel resources (NVRTC, no GPU needed) of " in output, f"no compile report: {output[-3000:]}"
    return sorted(m.group(0) for m in REPORT_ROW.finditer(output))


@pytest.mark.nvrtc
def test_a_spread_run_reports_every_kernel_it_compiled():
    """Each process compiles a share of the kernels; the process that prints gathers every report."""
    selection = ("tests/kernels/test_compile.py", "-k", "gelu or residual")  # 4 tests: each process gets some
    spread, alone = (pytest_run("-q", *selection, "-n", n) for n in ("2", "0"))
    assert spread.returncode == 0 and alone.returncode == 0, spread.stdout[-3000:] + alone.stdout[-3000:]
    assert "bringing up nodes" in spread.stdout and "bringing up nodes" not in alone.stdout
    assert kernel_rows(spread.stdout) == kernel_rows(alone.stdout) != []


@pytest.mark.nvrtc
def test_a_run_compiles_each_program_once_and_keeps_no_compile_error(tmp_path, monkeypatch):
    """A process compiles each program once, on its Compiling's threads, and leaves the report in the run's
    directory, where another process of the run (here another Compiling) reads it. A changed define is another
    program; a program that fails to compile fails every time."""
    monkeypatch.setenv(compile_reports.RUN_DIRECTORY, str(tmp_path))
    compiled, compile_report = [], compile_reports.compile_report
    monkeypatch.setattr(compile_reports, "compile_report",
                        lambda program, arch: compiled.append(program.program) or compile_report(program, arch))
    kernel = CudaKernel('extern "C" __global__ void sized(float* out) { out[threadIdx.x] = SIZE; }', "sized",
                        defines={"SIZE": 1})
    programs, broken = [kernel, kernel.with_defines(SIZE=2)], kernel.with_defines(SIZE="undefined_name")
    here, elsewhere = Compiling(threads=2), Compiling(threads=2)
    for program in programs * 2:
        here.start(program, "sm_86")
    reports = [here.report(program, "sm_86") for program in programs]
    assert [elsewhere.report(program, "sm_86") for program in programs] == reports and reports[0][0].name == "sized"
    assert len(compiled) == 2 and len(list(tmp_path.iterdir())) == 2
    for process in (here, elsewhere):
        with pytest.raises(KernelCompileError, match="undefined_name"):
            process.report(broken, "sm_86")
        process.close()
    assert len(compiled) == 4 and len(list(tmp_path.iterdir())) == 2


# The suite's order of collection, each test marked slow or not: one collection of the whole suite.
COLLECTION_ORDER = """
import sys, pytest
class Order:
    def pytest_collection_finish(self, session):
        for item in session.items:
            print(("slow " if "slow" in item.keywords else "fast ") + item.nodeid)
sys.exit(pytest.main(["--collect-only", "-q", "-p", "no:xdist", "-p", "no:cacheprovider"], plugins=[Order()]))
"""


def test_the_slow_tests_run_first_and_the_readme_says_why_each_is_slow():
    done = subprocess.run([sys.executable, "-c", COLLECTION_ORDER], capture_output=True, text=True, cwd=ROOT,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    order = [line.split(" ", 1) for line in done.stdout.splitlines() if line.startswith(("slow ", "fast "))]
    slow = [test for mark, test in order if mark == "slow"]
    assert slow and [test for _, test in order[:len(slow)]] == slow
    listed = {test for readme in READMES.values() if readme.exists()  # a starter kit has no staff README
              for test in re.findall(r"^- `(test_[^`]+)`", readme.read_text(), re.MULTILINE)}
    collected = {test.split("::")[-1].split("[")[0] for test in slow}
    assert collected <= listed, f"slow, and not named in a README: {sorted(collected - listed)}"
    # a module that needs an extra this setup lacks (PyTorch, transformers) is skipped whole, its slow tests too
    assert collected == listed or not all(map(importlib.util.find_spec, EXTRAS)), sorted(listed - collected)
