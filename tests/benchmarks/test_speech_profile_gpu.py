"""gpt2kit.benchmarks.speech_profile on the GPU at one utterance of one second: a row per host function the training
step calls, the convolutions' and matmuls' rates, and every call's time in the sum."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpt2kit.model_runtime.ops import MODEL_FUNCTIONS, SPEECH_FUNCTIONS, TRAINING_FUNCTIONS

ROOT = Path(__file__).parents[2]
pytestmark = [pytest.mark.gpu, pytest.mark.calls(*MODEL_FUNCTIONS, *TRAINING_FUNCTIONS, *SPEECH_FUNCTIONS)]


def test_the_table_has_every_host_function_the_step_calls():
    done = subprocess.run([sys.executable, "-m", "gpt2kit.benchmarks.speech_profile", "--batch", "1", "--seconds", "1",
                           "--runs", "2"], capture_output=True, text=True, cwd=ROOT, timeout=300, check=False)
    assert done.returncode == 0, f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    rows = {m[1]: m for m in re.finditer(r"^(\w+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)%(?:\s+([\d.]+)\s+(\d+)%)?$",
                                         done.stdout, re.M)}
    # a base-size step: 7 feature convolutions and the positional one, 12 layers of 4 matmuls, the two projections
    assert int(rows["conv1d_forward"][2]) == int(rows["conv1d_backward"][2]) == 8
    assert int(rows["matmul_forward"][2]) == int(rows["matmul_backward"][2]) == 50
    assert int(rows["ctc_loss_forward_backward"][2]) == 1
    for name in ("conv1d_forward", "conv1d_backward", "matmul_forward", "matmul_backward"):
        assert float(rows[name][5]) > 0, f"{name} has no rate"
    assert rows["group_norm_forward"][5] is None, "group norm is not counted in FLOPs"
    summed = float(re.search(r"^every call, summed\s+\d+\s+([\d.]+)$", done.stdout, re.M)[1])
    assert summed == pytest.approx(sum(float(m[3]) for m in rows.values()), abs=0.01 * len(rows))
    assert "conv1d_forward B1 T16000->3199 1->512 K10 stride5" in done.stdout
