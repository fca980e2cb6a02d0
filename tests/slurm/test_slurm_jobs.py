"""The job scripts in slurm/, submitted unchanged to a real Slurm with `sbatch --wait`.

Only when asked: KIT_SLURM_TESTS=1. Without it they skip whatever cluster is
reachable, so a plain `pytest` on a Delta login node submits nothing to the course's
allocation. CI asks, after starting a one-node cluster shaped like a Delta gpuA40x4
node (.ci/slurm-cluster);
the node has no GPU, so the GPU parts of each job skip with the reason and the rest
runs for real. Each job's working directory is a temporary one, so its named .out
file lands there.
"""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from gpt2kit.grading import reports
from tests.grading.test_grading_cpu import sample_grade

ROOT = Path(__file__).parents[2]
JOB_TIMEOUT = 240  # seconds; sbatch --wait never waits longer (the longest job takes about a minute in CI)


def slurm_ready() -> str | None:
    """None when asked to submit, a gpuA40x4 partition is up and the README's .venv exists, else why not."""
    if os.environ.get("KIT_SLURM_TESTS") != "1":
        return "Slurm job tests submit real jobs: set KIT_SLURM_TESTS=1 to run them"
    if shutil.which("sbatch") is None:
        return "Slurm is not installed (CI starts a cluster with .ci/slurm-cluster start)"
    try:
        states = subprocess.run(["sinfo", "-h", "-p", "gpuA40x4", "-o", "%T"], capture_output=True, text=True,
                                timeout=15).stdout.split()
    except subprocess.TimeoutExpired:
        return "no Slurm controller answers"
    if not {"idle", "mixed", "allocated"} & set(states):
        return "no gpuA40x4 partition is up (CI starts one with .ci/slurm-cluster start)"
    if not (ROOT / ".venv" / "bin" / "python").exists():
        return "the job scripts use the README's .venv, which this checkout lacks"
    return None


pytestmark = pytest.mark.skipif(slurm_ready() is not None, reason=str(slurm_ready()))


def submit(script: str, workdir: Path, *args: str, sbatch_options: tuple = (), export: str = ""):
    """Run one job to its end; returns (exit code, job id, the text of its named .out file)."""
    command = ["timeout", str(JOB_TIMEOUT), "sbatch", "--wait", "--parsable", f"--chdir={workdir}",
               *sbatch_options]
    if export:
        command.append(f"--export=ALL,{export}")
    command += [str(ROOT / "slurm" / script), *args]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=JOB_TIMEOUT + 30)
    job_id = done.stdout.strip().split(";")[0].split()[-1] if done.stdout.strip() else ""
    outputs = sorted(workdir.glob(f"*{job_id}*.out")) if job_id else []
    return done.returncode, job_id, "\n".join(p.read_text() for p in outputs), outputs


def test_verify_kernels_runs_the_kernel_tests(tmp_path):
    # The job's pytest runs one kernel's tests and compile checks; the suite runs them all itself.
    code, job, text, outputs = submit("verify.slurm", tmp_path, "kernels", export="PYTEST_ADDOPTS=-k residual")
    assert code == 0, text
    assert [p.name for p in outputs] == [f"verify-{job}.out"]
    assert re.search(r"\d+ passed, \d+ skipped, \d+ deselected", text) and "== verify.slurm: PASSED" in text
    assert "no GPU here: no NVIDIA GPU or driver" in text
    assert "kernel resources (NVRTC, no GPU needed)" in text  # the compile checks ran


def test_verify_steps_skips_without_a_gpu(tmp_path):
    code, _, text, _ = submit("verify.slurm", tmp_path, export="CHECK=steps")
    assert code == 0, text
    assert "steps: skipped: no NVIDIA GPU or driver on this machine" in text


def test_verify_model_runs_the_model_tests(tmp_path):
    # The job's pytest runs the tests that read the tokenizer's cache and write files in the job's environment;
    # the suite runs the rest of tests/model itself.
    code, _, text, _ = submit("verify.slurm", tmp_path, "model",
                              export="PYTEST_ADDOPTS=-k 'test_tokenizer.py or test_checkpoint.py'")
    assert code == 0, text
    # (those needing an extra the setup lacks skip, saying so)
    assert re.search(r"\d+ passed(, \d+ skipped)?, \d+ deselected", text) and "== verify.slurm: PASSED" in text


def test_verify_refuses_an_unknown_check(tmp_path):
    code, _, text, _ = submit("verify.slurm", tmp_path, "everything")
    assert code == 2 and "verify.slurm: unknown check 'everything'" in text


def test_verify_takes_the_four_sanitizers_and_refuses_others(tmp_path):
    code, _, text, _ = submit("verify.slurm", tmp_path, "kernels", export="SANITIZER=initcheck")
    assert code == 0, text
    assert "compute-sanitizer initcheck: skipped: no NVIDIA GPU or driver on this machine" in text
    code, _, text, _ = submit("verify.slurm", tmp_path, "kernels", export="SANITIZER=asan")
    assert code == 2 and "verify.slurm: unknown SANITIZER 'asan' (none, memcheck, racecheck, synccheck or initcheck)" in text


def test_a_missing_environment_is_one_clear_line(tmp_path):
    kit = tmp_path / "kit"
    shutil.copytree(ROOT / "slurm", kit / "slurm")
    code, _, text, _ = submit("verify.slurm", tmp_path, export=f"KIT_DIR={kit}")
    assert code == 1
    assert f"verify.slurm: no environment at {kit}/.venv: run the README's setup" in text


@pytest.mark.slow  # the job generates with the 124M model on the CPU
def test_generate_tokens_completes_the_prompt(tmp_path):
    code, _, text, _ = submit("generate_tokens.slurm", tmp_path)
    assert code == 0, text
    assert "The meaning of life is" in text
    assert "using a random 124M model" in text  # no weights on the CI node


def test_the_nsight_job_skips_without_a_gpu(tmp_path):
    code, _, text, _ = submit("nsight.slurm", tmp_path)
    assert code == 0, text
    assert "nsight: skipped: no NVIDIA GPU or driver on this machine" in text


def test_grade_class_array_then_gather(tmp_path):
    submissions = []
    for name in ("alice", "bob"):
        shutil.copytree(ROOT / "kernels", tmp_path / name / "kernels")
        submissions.append(str(tmp_path / name))
    class_list = tmp_path / "class.txt"
    class_list.write_text("\n".join(submissions) + "\n")
    results = tmp_path / "results"

    code, job, text, outputs = submit("grade_class.slurm", tmp_path, str(class_list), str(results),
                                      sbatch_options=("--array=1-2",))
    assert code == 0, text
    assert sorted(p.name for p in outputs) == [f"grade-{job}_1.out", f"grade-{job}_2.out"]
    assert f"grading {submissions[0]}: skipped: no NVIDIA GPU" in text
    assert f"grading {submissions[1]}: skipped: no NVIDIA GPU" in text

    for name in ("alice", "bob"):  # what graded tasks would have written on a GPU node
        reports.write_results_json(reports.gradescope_results(sample_grade()), results / name / "results.json")
    code, _, text, _ = submit("grade_class.slurm", tmp_path, str(class_list), str(results))
    assert code == 0, text
    assert "gradebook of 2 submissions" in text
    assert (results / "gradebook.csv").read_text().splitlines()[1].startswith("alice,1,9")
