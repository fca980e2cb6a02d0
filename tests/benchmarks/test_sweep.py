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


@pytest.mark.nvrtc
def test_compile_only_prints_every_tuning_with_the_kits_marked_and_spill_free():
    done = sweep("--compile-only", "--kind", "residual")
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines() if line[:1] in ("*", " ") and line[2:].strip()[:1].isdigit()]
    assert len(rows) == len(PIECES) * len(BLOCKS)
    kits = [row[1:] for row in rows if row[0] == "*"]
    assert len(kits) == 1
    pieces, blocks, regs_86, spill_86, regs_90, spill_90 = map(int, kits[0])
    assert (spill_86, spill_90) == (0, 0) and 0 < regs_86 <= 255 and 0 < regs_90 <= 255


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
