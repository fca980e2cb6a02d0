"""The leaderboard on the GPU, over a small table: the kit's kernels pass the gate and get a
score (in float32, and with the TF32 matmul under the tf32 profile); a fast but wrong
submission (a matmul that drops its bias) is stopped by the gate and gets none."""

import shutil
from pathlib import Path

import pytest

from grading import leaderboard
from grading.leaderboard import load_workload
from grading.ranking import make_gate, rank_submission
from reference.precision import FP32, TF32

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).parents[2]


def small_table(directory: Path) -> Path:
    text = leaderboard.TABLE_FILE.read_text()
    for old, new in (("batches = [1, 4, 8, 16, 32]", "batches = [1, 4]"), ("new_tokens = [50, 500]", "new_tokens = [16]"),
                     ("time_limit_seconds = 900", "time_limit_seconds = 300")):
        text = text.replace(old, new)
    path = directory / "table.toml"
    path.write_text(text)
    return path


def submission(directory: Path, wrong: str | None = None) -> Path:
    shutil.copytree(ROOT / "kernels", directory / "kernels")
    if wrong:
        with open(directory / "kernels" / "matmul.py", "a") as f:
            f.write(f"\nfrom tests.kernels.wrong.{wrong} import matmul_forward  # noqa: E402,F401\n")
    return directory


@pytest.mark.parametrize("variants, profile", [((), FP32), (("matmul_tf32",), TF32)], ids=["fp32", "tf32"])
def test_the_kits_kernels_pass_the_gate_and_score(tmp_path, variants, profile):
    table = small_table(tmp_path)
    workload = load_workload(table)
    result = rank_submission(submission(tmp_path / "kit"), workload, make_gate(workload, profile), table, variants)
    print("\n" + leaderboard.console_table(result))
    assert result.score is not None and result.score > 0, result.reason
    assert len(result.rows) == 2 * len(workload.prompts)


def test_a_fast_wrong_submission_fails_the_gate(tmp_path):
    table = small_table(tmp_path)
    workload = load_workload(table)
    result = rank_submission(submission(tmp_path / "wrong", "matmul_ignores_bias"), workload, make_gate(workload, FP32),
                             table, ())
    assert result.score is None
    assert result.reason.startswith("failed the correctness gate: logits on the gate prompt off by"), result.reason
