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

import numpy as np
import pytest

from grading import reports
from grading.grade import ItemGrade, SubmissionGrade, grade_submission, score_item
from grading.handout import LEFTOVER_MARKER, MILESTONE_FILES, make_handout, strip_solutions
from grading.items import SchemeError, load_scheme, scheme_for
from grading.worker import TECHNIQUE_FILE
from kernel_runtime.device import gpu_unavailable_reason, nvrtc_unavailable_reason
from reference import gold
from reference.execution import Execution, execute
from reference.registry import build, cases
from reference.variants import DECLARED, VARIANTS
from tests.readme import bash_blocks

ROOT = Path(__file__).parents[2]
SEED = 123


def test_weights_are_the_course_s():
    scheme = load_scheme()
    assert {i.title: i.weight for i in scheme.items} == {
        "Attention (including Softmax)": 3, "Encoder": 1, "LayerNorm": 2, "MatMul": 2, "Residual": 1, "GELU": 1}
    assert scheme.total_points == 10 and scheme.partial_credit == "none"


def test_milestone_2_weights_are_the_course_s():
    scheme = scheme_for(2)
    assert {i.title: (i.weight, [v.name for v in i.variants]) for i in scheme.items} == {
        "Shared-memory and register tiling": (6, ["matmul_tiled"]), "Tensor cores (TF32)": (5, ["matmul_tf32"]),
        "cuBLAS": (4, ["matmul_cublas"]), "Reduction": (3, ["layernorm_reduction", "softmax_reduction"])}
    assert scheme.total_points == 18 and scheme.milestone == 2 and scheme.partial_credit == "none"
    profiles = {v.name: (v.profile_name, v.technique, v.permit) for i in scheme.items for v in i.variants}
    assert profiles["matmul_tf32"] == ("tf32", "tensor_cores", ())
    assert profiles["matmul_cublas"] == ("fp32", "cublas", ("cublas",))  # the only one that may call cuBLAS
    assert all(permit == () for name, (_, _, permit) in profiles.items() if name != "matmul_cublas")


def test_milestone_3_weights_are_the_course_s_required_items_and_a_capped_menu():
    scheme = scheme_for(3)
    required = {i.title: (i.weight, [v.name for v in i.variants]) for i in scheme.items if not i.menu}
    assert required == {
        "FlashAttention": (6, ["attention_flash"]), "Local attention (window 128)": (2, ["attention_local"]),
        "KV cache": (12, ["kv_cache_append", "decode_attention", "encoder_at_positions"])}
    menu = {i.name: [v.name for v in i.variants] for i in scheme.items if i.menu}
    assert menu == {"fused_layernorm_matmul": ["layernorm_matmul"], "fused_bias_gelu": ["layernorm_matmul_gelu"],
                    "fused_residual": ["matmul_residual"], "split_k": ["matmul_split_k"]}
    assert scheme.total_points == 30 and scheme.menu_cap_points == 10 and scheme.milestone == 3
    assert {v.technique for i in scheme.items for v in i.variants} == {"flash", "fused", "split_k", None}


def test_menu_items_count_up_to_their_cap():
    scheme = scheme_for(3)
    menu_weight = sum(i.weight for i in scheme.items if i.menu)
    assert menu_weight > scheme.menu_cap_points  # else the cap would never bite
    full = SubmissionGrade("s", SEED, [ItemGrade(i, i.weight, "") for i in scheme.items], scheme.menu_cap_points)
    assert (full.score, full.max_score) == (30, 30)
    only_menu = SubmissionGrade("s", SEED, [ItemGrade(i, i.weight if i.menu else 0.0, "") for i in scheme.items],
                                scheme.menu_cap_points)
    assert only_menu.score == 10
    one_menu_item = [ItemGrade(i, i.weight if i.name == "fused_residual" or not i.menu else 0.0, "")
                     for i in scheme.items]
    assert SubmissionGrade("s", SEED, one_menu_item, scheme.menu_cap_points).score == 23
    assert "menu items count up to 10 points" in reports.console_table(full)
    assert reports.gradescope_results(full)["score"] == 30


@pytest.mark.parametrize("file, edit, message", [
    ("weights.toml", lambda t: t.replace("weight = 3", "weight = 4"), "add up to 11"),
    ("weights.toml", lambda t: t.replace('partial_credit = "none"', 'partial_credit = "some"'),
     "partial_credit must be one of"),
    ("weights.toml", lambda t: t.replace('functions = ["gelu_forward"]', 'functions = []'),
     "must score each host function"),
    ("weights_m2.toml", lambda t: t.replace('variants = ["matmul_cublas"]', 'variants = []'),
     "must score each milestone-2 variant once"),
    ("weights_m2.toml", lambda t: t.replace('"matmul_cublas"', '"matmul_cuda"'), "no known variant 'matmul_cuda'"),
    ("weights_m3.toml", lambda t: t.replace("menu_cap_points = 10", "menu_cap_points = 9"), "add up to 29"),
    ("weights_m3.toml", lambda t: t.replace("menu_cap_points = 10\n", "").replace("total_points = 30",
                                                                                  "total_points = 20"),
     "menu items need menu_cap_points"),
])
def test_bad_scheme_is_refused(tmp_path, file, edit, message):
    path = tmp_path / file
    path.write_text(edit((ROOT / "grading" / file).read_text()))
    with pytest.raises(SchemeError, match=message):
        load_scheme(path)


def test_a_milestone_without_a_scheme_is_one_line():
    done = grading("--milestone", "4", str(ROOT))
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "--milestone: invalid choice: 4" in done.stderr


def worker_records(out: Path, implementation, functions, launches=1, variant=None):
    """What a worker would leave behind after running `implementation(function)` on every case (on NumPy
    arrays), in the directory of `variant` (default: the function, as milestone 1's plain variant)."""
    for function in functions:
        (out / (variant or function)).mkdir(parents=True, exist_ok=True)
        for case in cases(function, SEED):
            execution = execute(implementation(function), build(case), device="cpu")
            dataclasses.replace(execution, launches=launches).save(out / (variant or function))


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
    (tmp_path / "encoder_forward").mkdir()
    Execution("encoder_forward", case.id, launches=1,
              error="CUDARuntimeError: cudaErrorIllegalAddress: an illegal memory access was encountered").save(
        tmp_path / "encoder_forward")
    grade = score_item(item("encoder"), load_scheme(), SEED, tmp_path)
    assert grade.score == 0 and "cudaErrorIllegalAddress" in grade.reason


def test_forged_and_repeated_records_do_not_count(tmp_path):
    worker_records(tmp_path, honest, ["layernorm_forward"])
    log = tmp_path / "layernorm_forward" / "records.jsonl"
    records = log.read_text().splitlines()
    first = json.loads(records[0])
    forged = ([json.dumps(first)] * 20 + [json.dumps(first | {"case_id": "made-up-case"})]
              + [json.dumps(json.loads(r) | {"function": "gelu_forward"}) for r in records[1:]])
    log.write_text("\n".join(forged) + "\n")
    grade = score_item(item("layernorm"), load_scheme(), SEED, tmp_path)
    assert grade.score == 0 and "only 1 of" in grade.reason


def test_a_crash_scores_zero_with_the_reason(tmp_path):
    grade = score_item(item("matmul"), load_scheme(), SEED, tmp_path, crash="the worker process was killed by SIGSEGV")
    assert grade.score == 0 and "SIGSEGV" in grade.reason


def m2_item(name):
    return scheme_for(2).item(name)


def technique_evidence(out: Path, variant: str, technique: str, missing: str | None) -> None:
    (out / variant / TECHNIQUE_FILE).write_text(json.dumps({"technique": technique, "missing": missing}))


def test_a_variant_scores_under_its_profile_and_with_its_technique_shown(tmp_path, monkeypatch):
    worker_records(tmp_path, lambda f: tf32_matmul, ["matmul_forward"], variant="matmul_tf32")
    technique_evidence(tmp_path, "matmul_tf32", "tensor_cores", None)
    monkeypatch.setenv("KIT_PROFILE", "fp32")  # the TA's shell: a grade is judged under the variant's own
    grade = score_item(m2_item("tf32"), scheme_for(2), SEED, tmp_path)
    assert grade.score == 5, grade.reason
    as_fp32 = dataclasses.replace(m2_item("tf32"), variants=(dataclasses.replace(
        m2_item("tf32").variants[0], profile_name="fp32"),))
    assert score_item(as_fp32, scheme_for(2), SEED, tmp_path).score == 0  # the profile is what lets TF32 pass


def tf32_matmul(out, inp, weight, bias, B, T, C, OC):
    """An honest TF32 matmul on NumPy: inputs cut to TF32's 10-bit mantissa, products summed in float64."""
    def tf32(x):
        return (x.astype(np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)
    result = tf32(inp).reshape(B * T, C) @ tf32(weight).reshape(OC, C).T
    out[...] = (result + (bias if bias is not None else 0.0)).reshape(out.shape)


@pytest.mark.parametrize("missing", ["no evidence of tensor cores: none of matmul_forward_kernel has tensor-core "
                                     "instructions (mma.sync, wmma.mma or wgmma) in its PTX", "absent"])
def test_a_variant_passing_every_case_without_its_technique_scores_zero_with_the_reason(tmp_path, missing):
    worker_records(tmp_path, honest, ["matmul_forward"], variant="matmul_tf32")
    if missing != "absent":
        technique_evidence(tmp_path, "matmul_tf32", "tensor_cores", missing)
    grade = score_item(m2_item("tf32"), scheme_for(2), SEED, tmp_path)
    assert grade.score == 0 and grade.cases_passed == grade.cases_run
    expected = missing if missing != "absent" else "no evidence of tensor_cores was recorded"
    assert grade.reason.endswith(f"cases pass, but matmul_tf32: {expected}")


def test_an_item_of_two_variants_needs_both(tmp_path):
    worker_records(tmp_path, honest, ["layernorm_forward"], variant="layernorm_reduction")
    worker_records(tmp_path, honest, ["softmax_forward"], variant="softmax_reduction")
    technique_evidence(tmp_path, "layernorm_reduction", "reduction", None)
    technique_evidence(tmp_path, "softmax_reduction", "reduction", None)
    assert score_item(m2_item("reduction"), scheme_for(2), SEED, tmp_path).score == 3
    technique_evidence(tmp_path, "softmax_reduction", "reduction", "no evidence of reduction: ...")
    grade = score_item(m2_item("reduction"), scheme_for(2), SEED, tmp_path)
    assert grade.score == 0 and "softmax_reduction: no evidence of reduction" in grade.reason


def sample_grade():
    scheme = load_scheme()
    grades = [ItemGrade(i, i.weight if i.name != "gelu" else 0.0, "all 5 cases pass" if i.name != "gelu"
                        else "1 of 5 cases fail; first: gelu N7: out: 1 of 7 elements wrong", 5, 5,
                        [] if i.name != "gelu" else ["gelu N7: out: 1 of 7 elements wrong"]) for i in scheme.items]
    return SubmissionGrade("submissions/alice", 42, grades)


def test_console_table():
    table = reports.console_table(sample_grade())
    assert "(milestone 1, seed 42)" in table and table.splitlines()[-1].split()[-2:] == ["10", "9.00"]
    assert any(line.startswith("GELU") and " 0.00 " in line for line in table.splitlines())


def test_gradescope_results_format():
    results = reports.gradescope_results(sample_grade())
    assert results["score"] == 9 and results["output"] == "milestone 1: 9 of 10 points"
    assert results["extra_data"] == {"milestone": 1}  # stored by Gradescope, shown to no one
    assert [t["name"] for t in results["tests"]][:2] == ["Attention (including Softmax)", "Encoder"]
    gelu = results["tests"][-1]
    assert (gelu["score"], gelu["max_score"]) == (0, 1)
    assert gelu["output"].splitlines() == ["1 of 5 cases fail; first: gelu N7: out: 1 of 7 elements wrong",
                                           "failing cases (1):", "- gelu N7: out: 1 of 7 elements wrong"]
    assert set(gelu) == {"name", "score", "max_score", "output"}


def test_a_grade_carries_the_milestone_of_its_scheme(monkeypatch, tmp_path):
    monkeypatch.setattr("grading.grade.grade_item", lambda submission, item, scheme, seed: ItemGrade(item, 0.0, ""))
    made = grade_submission(tmp_path, scheme_for(2), SEED)
    assert made.milestone == 2 and reports.gradescope_results(made)["extra_data"] == {"milestone": 2}
    assert "(milestone 2, seed 123)" in reports.console_table(made)


def full_marks(milestone: int, name: str) -> SubmissionGrade:
    scheme = scheme_for(milestone)
    return SubmissionGrade(name, SEED, [ItemGrade(i, i.weight, "all cases pass") for i in scheme.items],
                           scheme.menu_cap_points, milestone)


def write_results(out: Path, grades: list[SubmissionGrade], milestone_said: bool = True) -> None:
    """Each grade's results.json in out/<submission>/, as a grading run writes them (or, with
    `milestone_said` False, without the milestone they were graded under)."""
    for made in grades:
        results = reports.gradescope_results(made)
        if not milestone_said:
            del results["extra_data"]
        reports.write_results_json(results, out / made.submission / "results.json")


def gradebook(out: Path) -> list[list[str]]:
    return list(csv.reader(open(out / "gradebook.csv")))


def test_gradebook_gathers_every_results_json(tmp_path):
    write_results(tmp_path, [dataclasses.replace(sample_grade(), submission=name) for name in ("alice", "bob")])
    done = grading("gather", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("milestone 1 gradebook of 2 submissions")
    rows = gradebook(tmp_path)
    assert rows[0][:4] == ["submission", "milestone", "total", "Attention (including Softmax)"]
    assert [r[0] for r in rows[1:]] == ["alice", "bob"] and rows[1][1:3] == ["1", "9.0"]


@pytest.mark.parametrize("milestone", [2, 3])
def test_gather_makes_the_gradebook_of_the_milestone_the_results_were_graded_under(tmp_path, milestone):
    write_results(tmp_path, [full_marks(milestone, "alice"), full_marks(milestone, "bob")])
    done = grading("gather", str(tmp_path))
    assert done.returncode == 0, done.stderr
    scheme = scheme_for(milestone)
    rows = gradebook(tmp_path)
    assert rows[0] == ["submission", "milestone", "total", *(i.title for i in scheme.items)]
    assert rows[1] == ["alice", str(milestone), format(scheme.total_points), *(format(i.weight) for i in scheme.items)]
    explicit = grading("gather", str(tmp_path), "--milestone", str(milestone))
    assert explicit.returncode == 0 and gradebook(tmp_path) == rows


def test_gather_refuses_results_of_mixed_milestones_in_one_line(tmp_path):
    write_results(tmp_path, [full_marks(1, name) for name in ("alice", "bob", "carol", "dave")]
                  + [full_marks(2, "erin")])
    done = grading("gather", str(tmp_path))
    assert (done.returncode, done.stderr.splitlines()) == (2, [
        f"grading: the results in {tmp_path} mix milestones (milestone 1: alice, bob, carol and 1 more; "
        f"milestone 2: erin); gather each milestone's from a directory of its own"])
    assert not (tmp_path / "gradebook.csv").exists()


def test_gather_checks_the_milestone_it_is_given_against_the_results(tmp_path):
    write_results(tmp_path, [full_marks(2, "alice")])
    done = grading("gather", str(tmp_path), "--milestone", "1")
    assert (done.returncode, done.stderr.splitlines()) == (
        2, [f"grading: --milestone 1, but the results in {tmp_path} are milestone 2's"])


def test_results_that_do_not_say_their_milestone_are_gathered_under_the_one_named(tmp_path):
    write_results(tmp_path, [full_marks(2, "alice")], milestone_said=False)
    done = grading("gather", str(tmp_path))
    assert (done.returncode, done.stderr.splitlines()) == (2, [
        f"grading: the results of alice in {tmp_path} do not say their milestone; name it with --milestone N"])
    assert grading("gather", str(tmp_path), "--milestone", "2").returncode == 0
    assert gradebook(tmp_path)[1][:3] == ["alice", "2", "18.0"]
    wrong = grading("gather", str(tmp_path), "--milestone", "1")
    assert (wrong.returncode, wrong.stderr.splitlines()) == (2, [
        "grading: alice: its results have no score for 'Attention (including Softmax)', an item of milestone 1"])


@pytest.mark.skipif(gpu_unavailable_reason() is None, reason="this machine has a GPU")
def test_without_a_gpu_grading_exits_with_one_line(tmp_path):
    done = subprocess.run([sys.executable, "-m", "grading", str(ROOT)], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"grading: cannot grade without a GPU: {gpu_unavailable_reason()}"]


@pytest.mark.skipif(gpu_unavailable_reason() is None, reason="this machine has a GPU")
def test_the_leaderboard_reads_no_profile_from_the_environment():
    done = subprocess.run([sys.executable, "-m", "grading", "leaderboard", str(ROOT), "--variant", "matmul_tf32"],
                          capture_output=True, text=True, cwd=ROOT, env=os.environ | {"KIT_PROFILE": "bf16"})
    assert (done.returncode, done.stderr.splitlines()) == (
        2, [f"grading leaderboard: cannot time kernels without a GPU: {gpu_unavailable_reason()}"])


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


def test_strip_solutions_stubs_python_blocks_with_a_statement():
    text = "def f():\n    x = 1\n    # BEGIN SOLUTION\n    call(x)\n    # END SOLUTION\n"
    stripped, count = strip_solutions(text)
    assert count == 1 and stripped == "def f():\n    x = 1\n    pass  # TODO: write this (the comment at the top of " \
                                      "this file says what it computes)\n"


@pytest.fixture(scope="module")
def handout(tmp_path_factory):
    destination = tmp_path_factory.mktemp("handout") / "kit"
    stubbed = make_handout(destination)
    return destination, stubbed


@pytest.fixture(scope="module")
def handout_m2(tmp_path_factory):
    destination = tmp_path_factory.mktemp("handout-m2") / "kit"
    stubbed = make_handout(destination, milestone=2)
    return destination, stubbed


@pytest.fixture(scope="module")
def handout_m3(tmp_path_factory):
    destination = tmp_path_factory.mktemp("handout-m3") / "kit"
    stubbed = make_handout(destination, milestone=3)
    return destination, stubbed


def test_milestone_3_handout_adds_flash_and_local_attention_stubbed(handout_m3, handout_m2):
    destination, stubbed = handout_m3
    assert sorted(set(stubbed) - set(handout_m2[1])) == ["kernels/flash_attention.py (1 block)",
                                                          "kernels/fused_gemv.py (1 block)",
                                                          "kernels/matmul_split_k.py (5 blocks)"]
    assert not (handout_m2[0] / "kernels/matmul_split_k.py").exists()
    assert (destination / "reference/specs/flash_attention.py").exists()
    assert (destination / "reference/specs/local_attention.py").exists()
    assert "BEGIN SOLUTION" not in (destination / "kernels/flash_attention.py").read_text()
    assert (destination / "kernels/decode.py").read_text() == (ROOT / "kernels/decode.py").read_text()
    readme = (destination / "README.md").read_text()
    assert "## Milestone 3" in readme and "## Milestone 2" in readme and "<!--" not in readme
    assert "## Milestone 3" not in (handout_m2[0] / "README.md").read_text()
    assert kit_paths_mentioned(readme, ROOT) == kit_paths_mentioned(readme, destination)


def test_milestone_2_handout_adds_the_variants_stubbed(handout_m2, handout):
    destination, stubbed = handout_m2
    assert len(stubbed) == len(handout[1]) + 2, stubbed  # milestone 1's kernels stay stubbed too
    assert {"kernels/matmul_tf32.py (1 block)", "kernels/matmul_cublas.py (2 blocks)"} <= set(stubbed)
    for path in (destination / "kernels").glob("*.py"):
        assert LEFTOVER_MARKER.search(path.read_text()) is None, path
    assert "cublas.gemm(\"N\"" not in (destination / "kernels/matmul_cublas.py").read_text()
    assert (destination / "tests/kernels/test_variants.py").exists()
    assert not (destination / "tests/kernels/wrong_technique").exists() and not (destination / "grading").exists()
    readme = (destination / "README.md").read_text()
    assert "## Milestone 2" in readme and "<!--" not in readme
    assert "## Milestone 2" not in (handout[0] / "README.md").read_text()
    assert kit_paths_mentioned(readme, ROOT) == kit_paths_mentioned(readme, destination)


@pytest.mark.nvrtc
def test_milestone_2_handout_stubs_compile_and_show_no_technique(handout_m2):
    """The student's stubs compile, and each variant's technique check on compiled code fails until it
    is written (the checks that need no GPU: on a GPU the stubs' cases fail too, as the test below shows)."""
    destination, _ = handout_m2
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rf",
                           "tests/kernels/test_compile.py",
                           "tests/kernels/test_variants.py::test_variant_module_compiles_to_its_technique"],
                          capture_output=True, text=True, cwd=destination, timeout=600)
    failed = sorted(re.findall(r"^FAILED tests/kernels/(\S+)", done.stdout, flags=re.MULTILINE))
    assert failed == [f"test_variants.py::test_variant_module_compiles_to_its_technique[{name}]" for name in
                      sorted(["layernorm_reduction", "matmul_tf32", "matmul_tiled", "softmax_reduction"])], done.stdout[-3000:]


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
@pytest.mark.parametrize("kit", ["handout", "handout_m2", "handout_m3"])
def test_handout_kernel_tests_fail_cleanly_on_a_gpu(kit, request):
    destination, _ = request.getfixturevalue(kit)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/kernels"],
                          capture_output=True, text=True, cwd=destination, timeout=600)
    summary = (done.stdout.strip().splitlines() or ["no output"])[-1]
    assert done.returncode == 1 and "failed" in summary and "error" not in summary, done.stdout[-3000:]


@pytest.mark.parametrize("kit", ["handout", "handout_m2"])
def test_earlier_kits_leave_out_later_milestones_host_functions(kit, request):
    destination, _ = request.getfixturevalue(kit)
    later = [path for milestone, paths in MILESTONE_FILES.items() if milestone > 2 for path in paths]
    assert "kernels/flash_attention.py" in later
    assert not [path for path in later if (destination / path).exists()]


def test_every_declared_variant_has_its_host_function_here():
    """A variant leaves VARIANTS only in a kit without its milestone's specs or modules, never in this repository."""
    assert list(VARIANTS) == [v.name for v in DECLARED]
