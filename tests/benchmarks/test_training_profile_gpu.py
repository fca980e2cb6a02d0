"""gpt2kit.benchmarks.training --profile on the GPU at a small size: after the step table, a row per host function
the kit's launched training step calls, the matmuls' rates, and every call's time in the sum."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpt2kit.model_runtime.ops import MODEL_FUNCTIONS, TRAINING_FUNCTIONS

ROOT = Path(__file__).parents[2]
pytestmark = [pytest.mark.gpu, pytest.mark.calls(*MODEL_FUNCTIONS, *TRAINING_FUNCTIONS)]


def test_the_profile_has_every_host_function_the_step_calls(tmp_path):
    pytest.importorskip("transformers", reason="the benchmark's PyTorch rows need transformers: pip install -e '.[hf]'")
    done = subprocess.run([sys.executable, "-m", "gpt2kit.benchmarks.training", "--model", "random:gpt2-mini",
                           "--batch", "2", "--tokens", "64", "--runs", "2", "--curve-steps", "0", "--no-compile",
                           "--profile", "--out", str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300, check=False)
    assert done.returncode == 0, f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    profile = done.stdout.split("host function by host function")[-1]
    rows = {m[1]: m for m in re.finditer(r"^(\w+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)%(?:\s+([\d.]+)\s+(\d+)%)?$",
                                         profile, re.M)}
    # gpt2-mini: 6 layers of 4 matmuls, and the LM head
    assert int(rows["matmul_forward"][2]) == int(rows["matmul_backward"][2]) == 6 * 4 + 1
    assert int(rows["cross_entropy_forward_backward"][2]) == 1
    assert int(rows["adamw_update"][2]) >= 1
    assert float(rows["matmul_backward"][5]) > 0, "matmul_backward has no rate"
    summed = float(re.search(r"^every call, summed\s+\d+\s+([\d.]+)$", profile, re.M)[1])
    assert summed == pytest.approx(sum(float(m[3]) for m in rows.values()), abs=0.01 * len(rows))
