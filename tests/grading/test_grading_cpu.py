"""The grader's logic on the CPU: the scheme, scoring, reports, the handout, no-GPU exit."""

import csv
import dataclasses
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from grading import reports
from grading.grade import ItemGrade, SubmissionGrade, score_item
from grading.handout import LEFTOVER_MARKER, make_handout, strip_solutions
from grading.items import SchemeError, load_scheme
from kernel_runtime.device import gpu_unavailable_reason, nvrtc_unavailable_reason
from reference import gold
from reference.execution import Execution, execute
from reference.registry import build, cases
from tests.readme import bash_blocks

ROOT = Path(__file__).parents[2]
SEED = 123


def test_weights_are_the_course_s():
    scheme = load_scheme()
    assert {i.title: i.weight for i in scheme.items} == {
        "Attention (including Softmax)": 3, "Encoder": 1, "LayerNorm": 2, "MatMul": 2, "Residual": 1, "GELU": 1}
    assert scheme.total_points == 10 and scheme.partial_credit == "none"


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace("weight = 3", "weight = 4"), "add up to 11"),
    (lambda t: t.replace('partial_credit = "none"', 'partial_credit = "some"'), "partial_credit must be one of"),
    (lambda t: t.replace('functions = ["gelu_forward"]', 'functions = []'), "must score each host function"),
])
def test_bad_scheme_is_refused(tmp_path, edit, message):
    path = tmp_path / "weights.toml"
    path.write_text(edit((ROOT / "grading" / "weights.toml").read_text()))
    with pytest.raises(SchemeError, match=message):
        load_scheme(path)


def worker_records(out: Path, implementation, functions, launches=1):
    """What a worker would leave behind after running `implementation(function)` on every case (on NumPy arrays)."""
    for function in functions:
        for case in cases(function, SEED):
            execution = execute(implementation(function), build(case), device="cpu")
            dataclasses.replace(execution, launches=launches).save(out)


def honest(function):
    return getattr(gold, function)


def item(name):
    return load_scheme().item(name)


def test_every_case_passing_scores_the_weight(tmp_path):
    worker_records(tmp_path, honest, ["attention_forward", "softmax_forward"])
    grade = score_item(item("attention"), load_scheme(), SEED, tmp_path)
    assert grade.score == 3 and grade.cases_passed == grade.cases_run == 11


def wrong_when_large(function):
    def call(*args):
        honest(function)(*args)
        if args[0].size > 1000:
            args[0].reshape(-1)[-1] += 1.0  # one wrong element, in the large cases only
    return call


def test_a_wrong_element_costs_the_item_under_none_and_a_share_under_fraction(tmp_path):
    worker_records(tmp_path, wrong_when_large, ["gelu_forward"])
    scheme = load_scheme()
    none = score_item(item("gelu"), scheme, SEED, tmp_path)
    assert none.score == 0 and "cases fail" in none.reason
    fraction = score_item(item("gelu"), dataclasses.replace(scheme, partial_credit="fraction"), SEED, tmp_path)
    assert (fraction.cases_passed, fraction.cases_run) == (3, 5) and fraction.score == pytest.approx(0.6)


def test_no_custom_kernel_scores_zero(tmp_path):
    worker_records(tmp_path, honest, ["residual_forward"], launches=0)
    grade = score_item(item("residual"), load_scheme(), SEED, tmp_path)
    assert grade.score == 0 and "no custom kernel launched" in grade.reason


def test_a_cuda_error_scores_zero_with_the_reason(tmp_path):
    case = cases("encoder_forward", SEED)[0]
    Execution("encoder_forward", case.id, launches=1,
              error="CUDARuntimeError: cudaErrorIllegalAddress: an illegal memory access was encountered").save(tmp_path)
    grade = score_item(item("encoder"), load_scheme(), SEED, tmp_path)
    assert grade.score == 0 and "cudaErrorIllegalAddress" in grade.reason


def test_forged_and_repeated_records_do_not_count(tmp_path):
    worker_records(tmp_path, honest, ["layernorm_forward"])
    records = (tmp_path / "records.jsonl").read_text().splitlines()
    first = json.loads(records[0])
    forged = ([json.dumps(first)] * 20 + [json.dumps(first | {"case_id": "made-up-case"})]
              + [json.dumps(json.loads(r) | {"function": "gelu_forward"}) for r in records[1:]])
    (tmp_path / "records.jsonl").write_text("\n".join(forged) + "\n")
    grade = score_item(item("layernorm"), load_scheme(), SEED, tmp_path)
    assert grade.score == 0 and "only 1 of" in grade.reason


def test_a_crash_scores_zero_with_the_reason(tmp_path):
    grade = score_item(item("matmul"), load_scheme(), SEED, tmp_path, crash="the worker process was killed by SIGSEGV")
    assert grade.score == 0 and "SIGSEGV" in grade.reason


def sample_grade():
    scheme = load_scheme()
    grades = [ItemGrade(i, i.weight if i.name != "gelu" else 0.0, "all 5 cases pass" if i.name != "gelu"
                        else "1 of 5 cases fail; first: gelu N7: out: 1 of 7 elements wrong", 5, 5,
                        [] if i.name != "gelu" else ["gelu N7: out: 1 of 7 elements wrong"]) for i in scheme.items]
    return SubmissionGrade("submissions/alice", 42, grades)


def test_console_table():
    table = reports.console_table(sample_grade())
    assert "seed 42" in table and table.splitlines()[-1].split()[-2:] == ["10", "9.00"]
    assert any(line.startswith("GELU") and " 0.00 " in line for line in table.splitlines())


def test_gradescope_results_format():
    results = reports.gradescope_results(sample_grade())
    assert results["score"] == 9
    assert [t["name"] for t in results["tests"]][:2] == ["Attention (including Softmax)", "Encoder"]
    gelu = results["tests"][-1]
    assert (gelu["score"], gelu["max_score"]) == (0, 1)
    assert gelu["output"].splitlines() == ["1 of 5 cases fail; first: gelu N7: out: 1 of 7 elements wrong",
                                           "failing cases (1):", "- gelu N7: out: 1 of 7 elements wrong"]
    assert set(gelu) == {"name", "score", "max_score", "output"}


def test_gradebook_gathers_every_results_json(tmp_path):
    for name in ("alice", "bob"):
        grade = dataclasses.replace(sample_grade(), submission=name)
        reports.write_results_json(reports.gradescope_results(grade), tmp_path / name / "results.json")
    done = subprocess.run([sys.executable, "-m", "grading", "gather", str(tmp_path)], capture_output=True, text=True,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr
    rows = list(csv.reader(open(tmp_path / "gradebook.csv")))
    assert rows[0][:3] == ["submission", "total", "Attention (including Softmax)"]
    assert [r[0] for r in rows[1:]] == ["alice", "bob"] and rows[1][1] == "9.0"


@pytest.mark.skipif(gpu_unavailable_reason() is None, reason="this machine has a GPU")
def test_without_a_gpu_grading_exits_with_one_line(tmp_path):
    done = subprocess.run([sys.executable, "-m", "grading", str(ROOT)], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"grading: cannot grade without a GPU: {gpu_unavailable_reason()}"]


def test_the_worker_program_loads_no_oracle():
    code = ("import sys, grading.worker; "
            "print(sorted(set(sys.modules) & {'reference.cpu', 'reference.gold', 'reference.judging'}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def grading(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "grading", *args], capture_output=True, text=True, cwd=ROOT)


def test_a_handout_over_an_existing_directory_is_one_line(tmp_path):
    done = grading("handout", str(tmp_path))
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"grading: {tmp_path} already exists; choose a new directory"]


def test_a_handout_where_nothing_can_be_written_is_one_line(tmp_path):
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    done = grading("handout", str(blocked / "kit"))
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"grading: {blocked / 'kit'}: cannot write the handout (Not a directory)"]


def test_a_class_list_that_cannot_be_read_is_one_line(tmp_path):
    missing = tmp_path / "missing.txt"
    done = grading("--class-list", str(missing))
    assert (done.returncode, done.stderr.splitlines()) == (2, [f"grading: --class-list {missing}: no such file"])
    done = grading("--class-list", str(tmp_path))
    assert (done.returncode, done.stderr.splitlines()) == (
        2, [f"grading: --class-list {tmp_path}: cannot read it (Is a directory)"])


def test_a_file_given_as_a_submission_is_named_as_a_file(tmp_path):
    archive = tmp_path / "alice.zip"
    archive.write_bytes(b"PK")
    done = grading(str(archive), str(tmp_path / "bob"))
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"grading: {archive} is a file, not a submission directory (unpack it into "
                                        f"a directory first); no such submission directory: {tmp_path / 'bob'}"]


def test_help_names_every_command():
    done = grading("--help")
    assert done.returncode == 0
    assert "python -m grading gather DIR" in done.stdout and "python -m grading handout OUT_DIR" in done.stdout


def test_strip_solutions_keeps_indentation_and_counts():
    text = "a\n    // BEGIN SOLUTION\n    x = 1;\n    // END SOLUTION\n}\n"
    stripped, count = strip_solutions(text)
    assert count == 1 and stripped == "a\n    // TODO: write this kernel (the comment at the top of this file says " \
                                      "what it computes)\n}\n"


@pytest.fixture(scope="module")
def handout(tmp_path_factory):
    destination = tmp_path_factory.mktemp("handout") / "kit"
    stubbed = make_handout(destination)
    return destination, stubbed


def test_handout_stubs_every_solution_and_leaves_out_staff_files(handout):
    destination, stubbed = handout
    assert len(stubbed) == 6
    for path in (destination / "kernels").glob("*.py"):
        assert LEFTOVER_MARKER.search(path.read_text()) is None, path
    assert "TODO: write this kernel" in (destination / "kernels" / "layernorm.py").read_text()
    assert not (destination / "grading").exists() and not (destination / "tests/kernels/wrong").exists()
    assert (ROOT / "kernels/matmul_tf32.py").exists()  # milestone 2's: not in milestone 1's handout
    assert not (destination / "kernels/matmul_tf32.py").exists()
    assert not (destination / "tests/kernels/test_variants.py").exists()
    assert (destination / "kernels" / "decode.py").read_text() == (ROOT / "kernels" / "decode.py").read_text()
    readme = (destination / "README.md").read_text()
    assert "## Grading (for TAs)" not in readme and "## On Delta" in readme and "staff only" not in readme


def readme_commands(readme: str) -> list[str]:
    """The kit commands of a README's code blocks, optional [bracketed] arguments dropped;
    commands naming a directory of the reader's (DIR, ~/...) are left out."""
    commands = []
    for line in "\n".join(bash_blocks(readme)).splitlines():
        for part in line.split("#")[0].split("&&"):
            command = re.sub(r"\s*\[[^]]*\]", "", part).strip()
            if command.startswith(".venv/bin/python -m ") and not re.search(r"\bDIR\b|~/", command):
                commands.append(command)
    return list(dict.fromkeys(commands))


def kit_paths_mentioned(readme: str, kit: Path) -> set[str]:
    """Every `quoted` name in the README that is a file or directory of `kit` (by path, or by file name)."""
    quoted = {q.rstrip("/") for q in re.findall(r"`([\w./-]+)`", readme)} - {".", ".venv"}  # the reader's own
    names = {p.name for p in kit.rglob("*")}
    return {q for q in quoted if (kit / q).exists() or ("/" not in q and "." in q.strip(".") and q in names)}


def test_handout_readme_mentions_only_what_the_handout_holds(handout):
    destination, _ = handout
    readme = (destination / "README.md").read_text()
    assert kit_paths_mentioned(readme, ROOT) == kit_paths_mentioned(readme, destination)
    for staff_only in ("grading", "wrong/", "test_known_wrong", "KIT_SLURM_TESTS", ".ci/", "<!--"):
        assert staff_only not in readme
    kit_readme = (ROOT / "README.md").read_text()
    assert "tests/kernels/wrong" in kit_paths_mentioned(kit_readme, ROOT)  # the check can see a staff path


@pytest.mark.skipif(gpu_unavailable_reason() is None, reason="checks the GPU-less run (on a GPU the stubs fail, "
                                                             "as test_handout_kernel_tests_fail_cleanly_on_a_gpu checks)")
def test_handout_readme_commands_pass_without_a_gpu(handout):
    """Exactly the handout README's commands, run in the handout with this environment's Python and
    no network: each succeeds, or stops with one line naming what is missing (the GPU of a GPU-only
    tool, the hub of a download)."""
    destination, _ = handout
    commands = readme_commands((destination / "README.md").read_text())
    assert ".venv/bin/python -m pytest" in commands and ".venv/bin/python -m pytest tests/kernels" in commands
    offline = {**os.environ, "HF_HUB_OFFLINE": "1"}
    for command in commands:
        arguments = shlex.split(command)[1:]
        done = subprocess.run([sys.executable, *arguments], capture_output=True, text=True, cwd=destination,
                              stdin=subprocess.DEVNULL, env=offline, timeout=900)
        output = done.stdout[-3000:] + done.stderr[-3000:]
        if arguments[:2] == ["-m", "pytest"]:
            summary = done.stdout.strip().splitlines()[-1]
            assert done.returncode == 0 and "error" not in summary, f"{command}: {output}"
        elif done.returncode != 0:
            missing = gpu_unavailable_reason() if done.returncode == 2 else "the Hugging Face hub"
            assert done.stderr.count("\n") == 1 and missing in done.stderr, f"{command}: {output}"
    compile_check = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/kernels"],
                                   capture_output=True, text=True, cwd=destination, timeout=600)
    if nvrtc_unavailable_reason() is None:  # the student's stubs compile, and the report says so
        assert f"kernel resources (NVRTC, no GPU needed) of {destination / 'kernels'}" in compile_check.stdout


@pytest.mark.gpu
def test_handout_kernel_tests_fail_cleanly_on_a_gpu(handout):
    destination, _ = handout
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/kernels"],
                          capture_output=True, text=True, cwd=destination, timeout=600)
    summary = (done.stdout.strip().splitlines() or ["no output"])[-1]
    assert done.returncode == 1 and "failed" in summary and "error" not in summary, done.stdout[-3000:]
