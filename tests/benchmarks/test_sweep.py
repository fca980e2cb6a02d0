"""The configuration sweep of the fused decode kernels without a GPU: its compile-only table."""

import subprocess
import sys
from pathlib import Path

import pytest

from gpt2kit.benchmarks.sweep import BLOCKS, PIECES
from gpt2kit.kernel_runtime import gpu_unavailable_reason

ROOT = Path(__file__).parents[2]
pytestmark = pytest.mark.skipif(not (ROOT / "kernels" / "fused_gemv.py").exists(),
                                reason="this kit has no kernels/fused_gemv.py (milestone 3)")


def sweep(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpt2kit.benchmarks.sweep", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=600)


def table_rows(stdout: str) -> list[list[str]]:
    """The tuning rows of a kind's table: the kit's mark (* or nothing), PIECES, BLOCKS, then per build and
    architecture its registers and spilled bytes, then the timings."""
    return [[line[0], *line[1:].split()] for line in stdout.splitlines()
            if line[:1] in ("*", " ") and line[2:].strip()[:1].isdigit()]


@pytest.mark.nvrtc
def test_compile_only_prints_every_tuning_as_launched_with_the_kits_marked_and_spill_free():
    """One row and five rows launch two builds: for chunks of 1 row (the module's own build), and of 5 rows in
    an 8-row chunk's layout (two columns a warp, half the pieces a column). Both are printed as launched."""
    from gpt2kit.kernel_runtime.compiler import compile_report
    from gpt2kit.kernel_runtime.loader import use_kernels
    from gpt2kit.reference.registry import kernel_module

    done = sweep("--compile-only", "--kind", "residual", "--batch", "1", "5")
    assert done.returncode == 0, done.stderr
    assert "regs R1 sm_86" in done.stdout and "regs R5 sm_90" in done.stdout
    rows = table_rows(done.stdout)
    assert len(rows) == len(PIECES) * len(BLOCKS)
    printed = {(int(row[1]), int(row[2])): [int(v) for v in row[3:]] for row in rows}
    kits = [(int(row[1]), int(row[2])) for row in rows if row[0] == "*"]
    assert len(kits) == 1
    resources = printed[kits[0]]
    assert len(resources) == 2 * 2 * 2  # 2 builds x 2 architectures x (registers, spilled bytes)
    assert all(0 < registers <= 255 for registers in resources[0::2]) and resources[1::2] == [0, 0, 0, 0]

    use_kernels()
    fused_gemv = kernel_module("fused_gemv")
    for pieces, blocks in (kits[0], (8, 2)):  # (8, 2): 96 registers in the module's build, 128 launched on sm_90
        kernel = fused_gemv.fused_kernel(False, False, True, tuning=dict(PIECES=pieces, BLOCKS=blocks))
        launched = [compile_report(fused_gemv.kernel_for_rows(kernel, 5), arch)[0] for arch in ("sm_86", "sm_90")]
        assert printed[pieces, blocks][4:] == [v for r in launched for v in (r.registers, r.spill_stores + r.spill_loads)]


@pytest.mark.skipif(gpu_unavailable_reason() is None, reason="this machine has a GPU")
def test_timing_without_a_gpu_is_one_line():
    done = sweep("--kind", "residual")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"gpt2kit.benchmarks.sweep: cannot time kernels: {gpu_unavailable_reason()}"]


def test_an_unknown_model_is_one_line_naming_the_choices():
    done = sweep("--model", "gpt-3", "--compile-only")
    assert done.returncode == 2
    assert done.stdout == "" and len(done.stderr.strip().splitlines()) == 1
    assert "gpt-3" in done.stderr and "gpt-j-6b" in done.stderr
