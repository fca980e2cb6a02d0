"""The README's first lines ask gpt2kit/kernel_runtime/install_target.py what to install: run as a file, as they run it,
with nothing but a stand-in nvidia-smi on PATH (or none), it prints the requirement for that driver and says why."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
SCRIPT = ROOT / "gpt2kit" / "kernel_runtime" / "install_target.py"

# what nvidia-smi's header shows, cut to the line the script reads
SMI_HEADER = "| NVIDIA-SMI 580.65.06   Driver Version: 580.65.06   CUDA Version: {cuda}     |"


def run_with_driver(tmp_path: Path, cuda: str | None, *extras: str) -> subprocess.CompletedProcess:
    """The script run as the README runs it, where nvidia-smi reports CUDA `cuda` (None: no nvidia-smi at all)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if cuda is not None:
        smi = bin_dir / "nvidia-smi"
        smi.write_text(f"#!/bin/sh\necho '{SMI_HEADER.format(cuda=cuda)}'\n")
        smi.chmod(0o755)
    return subprocess.run([sys.executable, str(SCRIPT), *extras], capture_output=True, text=True, cwd=ROOT,
                          env={"PATH": str(bin_dir)}, timeout=60)


@pytest.mark.parametrize("cuda, extras, requirement", [
    ("13.0", (), ".[cuda13]"),
    ("13.0", ("test",), ".[cuda13,test]"),
    ("14.1", ("test",), ".[cuda13,test]"),      # a newer driver runs the newest build
    ("12.4", (), ".[cuda12]"),
    ("12.4", ("test", "hf"), ".[cuda12,test,hf]"),
    (None, (), "."),                           # no GPU: NumPy alone
    (None, ("test",), ".[nvrtc13,test]"),      # no GPU, tests: NVRTC for the compile checks
    ("11.8", ("test",), ".[nvrtc13,test]"),    # a driver older than every CUDA build: as without a GPU
], ids=lambda value: str(value))
def test_it_prints_the_requirement_for_the_driver_and_says_why(tmp_path, cuda, extras, requirement):
    done = run_with_driver(tmp_path, cuda, *extras)
    assert done.returncode == 0, done.stderr
    assert done.stdout == requirement + "\n"
    reason, = done.stderr.splitlines()
    expected_reason = "no NVIDIA driver" if cuda is None else f"CUDA {cuda.split('.')[0]} driver"
    assert reason.startswith(f"installing {requirement}: ") and expected_reason in reason


def test_an_nvidia_smi_that_shows_no_cuda_version_counts_as_no_gpu(tmp_path):
    """A driver that fails (no device found, a broken install) prints no version: install for the CPU."""
    done = run_with_driver(tmp_path, "N/A", "test")
    assert done.stdout == ".[nvrtc13,test]\n"
