"""The leaderboard on the GPU. Over a small table: the kit's kernels pass the gate, every
token checks and they get a score (in float32, and with the TF32 matmul under the tf32
profile); a fast but wrong submission (a matmul that drops its bias) is stopped by the
gate; the cheats of tests/kernels/wrong/leaderboard/ lose their score with the reason
(wrong after the gate, float16 weights kept after the gate, cuBLAS granted after the
gate) or gain nothing (work on a side stream, clocks slowed in the worker, results
written by the submission: none of the worker's code runs while the replayer times).
Over the course's table: the kit's milestone-1 and milestone-3 kernels score within 10%
of grading/README.md's H200 numbers (on an H200, in a pytest run of one process: other
processes on the GPU would slow them)."""

import os
import shutil
from pathlib import Path

import pytest

from gpt2kit.grading import leaderboard
from gpt2kit.grading.leaderboard import load_workload
from gpt2kit.grading.ranking import commands, make_judge, rank_submission
from gpt2kit.reference.variants import resolve_profile, variant_named
from tests.grading.carried import carrying

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).parents[2]
MILESTONE_3 = ("attention_flash", "layernorm_matmul", "layernorm_matmul_gelu", "matmul_residual", "matmul_split_k")
README_H200_SCORES = {(): 2_903, MILESTONE_3: 8_773}  # tok/s, grading/README.md's leaderboard bullet
PLAUSIBLE = 50_000  # tok/s: above any small-table score here, far below what a clock slowed 1000x would claim


def small_table(directory: Path, batches: str = "[1, 4]") -> Path:
    text = leaderboard.TABLE_FILE.read_text()
    for old, new in (("batches = [1, 4, 8, 16, 32]", f"batches = {batches}"),
                     ("new_tokens = [50, 500]", "new_tokens = [16, 64]"),
                     ("time_limit_seconds = 900", "time_limit_seconds = 300")):
        text = text.replace(old, new)
    path = directory / "table.toml"
    path.write_text(text)
    return path


def submission(directory: Path, wrong: str | None = None) -> Path:
    """A copy of the kit's kernels, its matmul replaced by tests.kernels.wrong.<wrong>'s."""
    shutil.copytree(ROOT / "kernels", directory / "kernels")
    if wrong:
        with open(directory / "kernels" / "matmul.py", "a") as f:
            f.write("\n" + carrying(directory / "kernels", f"from tests.kernels.wrong.{wrong} import matmul_forward"))
    return directory


def rank(submission_dir: Path, table: Path, variants: tuple[str, ...] = (), seed: int = 0):
    judge = make_judge(load_workload(table), resolve_profile(None, [variant_named(v) for v in variants], environ={}))
    result = rank_submission(submission_dir, commands(table, variants), judge, seed, progress=print)
    print("\n" + leaderboard.console_table(result))
    return result


@pytest.mark.parametrize("variants", [(), ("matmul_tf32",)], ids=["fp32", "tf32"])
def test_the_kits_kernels_pass_the_gate_and_every_token_and_score(tmp_path, variants):
    table = small_table(tmp_path)
    result = rank(submission(tmp_path / "kit"), table, variants)
    assert result.score is not None and result.score > 0, result.reason
    assert len(result.rows) == 2 * 2 * 3 and not any(r.refused for r in result.rows)


def test_a_fast_wrong_submission_fails_the_gate(tmp_path):
    result = rank(submission(tmp_path / "wrong", "matmul_ignores_bias"), small_table(tmp_path))
    assert result.score is None
    assert result.reason.startswith("failed the correctness gate: logits on the gate prompt off by"), result.reason


def test_a_submission_wrong_after_the_gate_loses_its_score(tmp_path):
    # the worker tapes the calls of a prompt of 15 tokens past the 1,000th matmul call (the gate makes about 930)
    result = rank(submission(tmp_path / "wrong", "leaderboard.matmul_wrong_after_gate"), small_table(tmp_path))
    assert result.score is None and ": wrong tokens: " in result.reason, result.reason


@pytest.mark.parametrize("cheat, reason", [
    ("matmul_float16_after_gate", "its tapes were refused: matmul_forward(B=4, T=1, C=768, OC=2304): its kernels read "
                                  "memory the call was not given (an array kept from an earlier call or from import)"),
    ("matmul_cublas_after_gate", "its tapes were refused: matmul_forward(B=4, T=7, C=768, OC=2304): refused: the tape "
                                 "calls cupy.cublas.gemm, which this call may not use (it permits no library"),
])
def test_cheaper_arithmetic_or_a_library_after_the_gate_loses_its_score_naming_it(tmp_path, cheat, reason):
    result = rank(submission(tmp_path / cheat, f"leaderboard.{cheat}"), small_table(tmp_path))
    assert result.score is None and result.reason.startswith(reason), result.reason


@pytest.mark.parametrize("cheat", ["matmul_side_stream", "clock_time_travel", "writes_results"])
def test_a_submission_s_streams_clocks_and_files_gain_nothing(tmp_path, cheat):
    table = small_table(tmp_path)
    result = rank(submission(tmp_path / cheat, f"leaderboard.{cheat}"), table)
    assert result.score is not None and result.score < PLAUSIBLE, result.reason
    assert all(r.seconds > 1e-4 and r.refused is None for r in result.rows)  # the forged rows claim a nanosecond


@pytest.mark.parametrize("variants", list(README_H200_SCORES), ids=["milestone1", "milestone3"])
def test_the_kits_kernels_score_as_the_readme_says(tmp_path, variants):
    if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
        pytest.skip("a score measured while other pytest processes share the GPU is not the README's: run "
                    "this test without -n")
    result = rank(submission(tmp_path / "kit"), leaderboard.TABLE_FILE, variants)
    assert result.score is not None, result.reason
    import cupy

    device = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    if "H200" not in device:
        pytest.skip(f"the README's scores are an H200's, not a {device}'s: {result.score:.0f} tok/s")
    assert result.score == pytest.approx(README_H200_SCORES[variants], rel=0.10)
