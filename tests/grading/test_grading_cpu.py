"""The grader's logic on the CPU: the scheme, scoring, reports, the handout, no-GPU exit."""

import csv
import dataclasses
import errno
import functools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import types
from pathlib import Path

import numpy as np
import pytest

from gpt2kit.generation.decoding import kv_cache_stubs
from gpt2kit.model_runtime.ops import KV_CACHE_FUNCTIONS, MODEL_FUNCTIONS
from gpt2kit.grading import reports
from gpt2kit.grading.grade import (ItemGrade, Replayed, SubmissionGrade, grade_submission, replay, replayer_command,
                                   score_item)
from gpt2kit.grading.handout import (LEFTOVER_MARKER, MILESTONE_FILES, HandoutError, kit_files, make_handout,
                                     strip_solutions)
from gpt2kit.grading.items import WEIGHTS_FILES, SchemeError, load_scheme, scheme_for
from gpt2kit.grading.sandbox import Sandbox
from gpt2kit.kernel_runtime.compiler import programs_in
from gpt2kit.kernel_runtime.device import gpu_unavailable_reason, nvrtc_unavailable_reason
from gpt2kit.kernel_runtime.stubs import STUB_LINES, cuda_body, function_holds_stub, reached
from gpt2kit.reference import gold
from tests import KIT_PACKAGES
from gpt2kit.kernel_runtime.tape import Launch, Program, Tape
from gpt2kit.kernels.gelu import gelu_forward_kernel
from gpt2kit.reference.execution import Execution, execute, save_records
from gpt2kit.reference.registry import SPECS, build, cases, kernel_module, unwritten
from gpt2kit.reference.techniques import TECHNIQUES, static_classes
from gpt2kit.reference.variants import DECLARED, FUSED_DECODE_VARIANTS, VARIANTS
from tests.interrupting import PROMPTLY, interrupted, pausing
from tests.readme import READMES, bash_blocks, install_lines
from tests.reference.test_techniques import SAMPLES

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
                    "fused_residual": ["matmul_residual"], "split_k": ["matmul_split_k"],
                    "matmul_3xtf32": ["matmul_3xtf32"], "flash_3xtf32": ["attention_flash_3xtf32"],
                    "rotary": ["rotary"]}
    assert scheme.total_points == 30 and scheme.menu_cap_points == 10 and scheme.milestone == 3
    assert {v.technique for i in scheme.items for v in i.variants} == {"flash", "fused", "split_k", "3xtf32",
                                                                       "flash_3xtf32", None}


def test_milestone_4_weights_score_each_host_function_of_training():
    scheme = scheme_for(4)
    assert {i.name: (i.weight, [v.name for v in i.variants]) for i in scheme.items} == {
        "cross_entropy": (4, ["cross_entropy"]), "matmul_backward": (6, ["matmul_backward"]),
        "layernorm_backward": (5, ["layernorm_backward"]), "attention_backward": (6, ["attention_backward"]),
        "pointwise_backward": (3, ["gelu_backward", "residual_backward"]),
        "encoder_backward": (3, ["encoder_backward"]), "adamw": (3, ["adamw"])}
    assert scheme.total_points == 30 and scheme.milestone == 4 and not any(i.menu for i in scheme.items)
    variants = [v for i in scheme.items for v in i.variants]
    assert {(v.profile_name, v.technique) for v in variants} == {("fp32", None)}
    assert sorted(v.function for v in variants) == sorted(s.function for s in SPECS.values() if s.milestone == 4)


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
    done = grading("--milestone", "5", str(ROOT))
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "--milestone: invalid choice: 5" in done.stderr


def worker_records(out: Path, implementation, functions, launches=1, variant=None, kernel="plain_matmul",
                   replayed=None, program=Program(SAMPLES)) -> Replayed:
    """What a worker and the replayer would leave behind for `implementation(function)` (on NumPy arrays): in
    the directory of `variant` (default: the function, as milestone 1's plain variant), a record per case whose
    tape launches `kernel` of `program` (default: the samples) `launches` times; and each case's outputs on the
    secret seed's two input sets, as the replayer would send them."""
    replayed = replayed or Replayed()
    tape = Tape(programs=[program], steps=[Launch(0, kernel, (1, 1, 1), (32, 1, 1), 0, ())] * launches)
    for function in functions:
        name = variant or function
        (out / name).mkdir(parents=True, exist_ok=True)
        runs = honest_runs(function) if implementation is honest else [
            (case, execute(implementation(function), build(case), device="cpu")) for case in cases(function, SEED)]
        for case, execution in runs:
            save_records([Execution(function, case.shape_id, tape=tape)], out / name)
            arrays = ({f"out_{k}": v for k, v in execution.outputs.items()}
                      | {f"in_{k}": v for k, v in execution.inputs_after.items()}
                      | {f"replay_{k}": v for k, v in execution.replay_outputs.items()})
            replayed.frames[(name, case.shape_id)] = ({"variant": name, "case": case.shape_id, "replay_error": None},
                                                      arrays)
    return replayed


def honest(function):
    return getattr(gold, function)


@functools.cache
def honest_runs(function: str) -> tuple:
    """Gold's executions of `function`'s cases on the secret seed, which every test grading honest work replays:
    run once, their arrays read-only so that no test can change another's."""
    runs = tuple((case, execute(honest(function), build(case), device="cpu")) for case in cases(function, SEED))
    for _, execution in runs:
        for arrays in (execution.outputs, execution.inputs_after, execution.replay_outputs):
            for array in arrays.values():
                array.setflags(write=False)
    return runs


def item(name):
    return load_scheme().item(name)


def test_every_case_passing_scores_the_weight(tmp_path):
    replayed = worker_records(tmp_path, honest, ["attention_forward", "softmax_forward"])
    grade = score_item(item("attention"), load_scheme(), SEED, tmp_path, replayed)
    assert grade.score == 3 and grade.cases_passed == grade.cases_run == 13


def wrong_when_large(function):
    def call(*args):
        honest(function)(*args)
        if args[0].size > 1000:
            args[0].reshape(-1)[-1] += 1.0  # one wrong element, in the large cases only
    return call


def test_a_wrong_element_costs_the_item_under_none_and_a_share_under_fraction(tmp_path):
    replayed = worker_records(tmp_path, wrong_when_large, ["gelu_forward"])
    scheme = load_scheme()
    none = score_item(item("gelu"), scheme, SEED, tmp_path, replayed)
    assert none.score == 0 and "cases fail" in none.reason
    fraction = score_item(item("gelu"), dataclasses.replace(scheme, partial_credit="fraction"), SEED, tmp_path,
                          replayed)
    assert (fraction.cases_passed, fraction.cases_run) == (3, 5) and fraction.score == pytest.approx(0.6)


def test_no_custom_kernel_scores_zero(tmp_path):
    replayed = worker_records(tmp_path, honest, ["residual_forward"], launches=0)
    grade = score_item(item("residual"), load_scheme(), SEED, tmp_path, replayed)
    assert grade.score == 0 and "no custom kernel launched" in grade.reason


def test_a_cuda_error_scores_zero_with_the_reason(tmp_path):
    case = cases("encoder_forward", SEED)[0]
    (tmp_path / "encoder_forward").mkdir()
    save_records([Execution("encoder_forward", case.shape_id, tape=Tape(),
                            error="CUDARuntimeError: cudaErrorIllegalAddress: an illegal memory access was "
                                  "encountered")], tmp_path / "encoder_forward")
    grade = score_item(item("encoder"), load_scheme(), SEED, tmp_path, Replayed())
    assert grade.score == 0 and "cudaErrorIllegalAddress" in grade.reason


def test_forged_and_repeated_records_do_not_count(tmp_path):
    replayed = worker_records(tmp_path, honest, ["layernorm_forward"])
    log = tmp_path / "layernorm_forward" / "records.jsonl"
    records = log.read_text().splitlines()
    first = json.loads(records[0])
    forged = ([json.dumps(first)] * 20 + [json.dumps(first | {"case": "made-up-case"})]
              + [json.dumps(json.loads(r) | {"function": "gelu_forward"}) for r in records[1:]]
              + ["not json", json.dumps(first | {"tape": '{"buffers": "many"}', "case": "bad-tape"})])
    log.write_text("\n".join(forged) + "\n")
    grade = score_item(item("layernorm"), load_scheme(), SEED, tmp_path, replayed)
    assert grade.score == 0 and "only 1 of" in grade.reason


def test_a_taped_staff_solution_is_reported_and_keeps_the_score(tmp_path):
    replayed = worker_records(tmp_path, honest, ["gelu_forward"], kernel="gelu_forward_kernel",
                              program=gelu_forward_kernel.program)
    grade = score_item(item("gelu"), load_scheme(), SEED, tmp_path, replayed)
    line = "gelu_forward: taped kernel gelu_forward_kernel is the staff solution's (kernels/gelu.py)"
    assert grade.score == 1 and grade.staff_kernels == [line]
    report = SubmissionGrade("submissions/alice", SEED, [grade])
    table = reports.console_table(report).splitlines()
    assert table[2].startswith("GELU") and table[3].strip() == line  # right under the item's reason
    results = reports.gradescope_results(report)
    assert results["tests"][0]["output"].splitlines() == ["all 5 cases pass", line]
    assert results["extra_data"] == {"milestone": 1, "staff_kernels": {"GELU": [line]}}
    assert score_item(item("gelu"), load_scheme(), SEED, tmp_path / "other",
                      worker_records(tmp_path / "other", honest, ["gelu_forward"])).staff_kernels == []


def test_a_crash_scores_zero_with_the_reason(tmp_path):
    grade = score_item(item("matmul"), load_scheme(), SEED, tmp_path, Replayed(),
                       crash="the worker process was killed by SIGSEGV")
    assert grade.score == 0 and "SIGSEGV" in grade.reason


def m2_item(name):
    return scheme_for(2).item(name)


def counted(replayed: Replayed, variant: str, counts: dict | None, error: str | None = None) -> Replayed:
    """`replayed` with what the replayer counted of `variant`'s kernels (counts None: it sent no counts), its
    look at their PTX left to the grader (at the course's sm_86)."""
    if counts is not None or error is not None:
        replayed.counts[variant] = (counts or {}, None, error)
    return replayed


def all_products(function: str) -> int:
    from gpt2kit.reference.techniques import products_of
    return products_of(function, cases(function, SEED))


@pytest.mark.nvrtc
def test_a_variant_scores_under_its_profile_and_with_its_technique_shown(tmp_path, monkeypatch):
    replayed = worker_records(tmp_path, lambda f: tf32_matmul, ["matmul_forward"], variant="matmul_tf32",
                              kernel="tensor_core_tile")
    counted(replayed, "matmul_tf32", {"tensor_core_tile": {"tensor_core": all_products("matmul_forward")}})
    monkeypatch.setenv("KIT_PROFILE", "fp32")  # the TA's shell: a grade is judged under the variant's own
    grade = score_item(m2_item("tf32"), scheme_for(2), SEED, tmp_path, replayed)
    assert grade.score == 5, grade.reason
    as_fp32 = dataclasses.replace(m2_item("tf32"), variants=(dataclasses.replace(
        m2_item("tf32").variants[0], profile_name="fp32"),))
    assert score_item(as_fp32, scheme_for(2), SEED, tmp_path, replayed).score == 0  # the profile lets TF32 pass


def tf32_matmul(out, inp, weight, bias, B, T, C, OC):
    """An honest TF32 matmul on NumPy: inputs cut to TF32's 10-bit mantissa, products summed in float64."""
    def tf32(x):
        return (x.astype(np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)
    result = tf32(inp).reshape(B * T, C) @ tf32(weight).reshape(OC, C).T
    out[...] = (result + (bias if bias is not None else 0.0)).reshape(out.shape)


@pytest.mark.nvrtc
@pytest.mark.parametrize("kernel, counts, error, expected", [
    ("plain_matmul", {"plain_matmul": {}}, None, "no evidence of tensor cores: none of plain_matmul has tensor-core "
                                                 "instructions (mma.sync, wmma.mma or wgmma) in its compiled code"),
    ("tensor_core_tile", {"tensor_core_tile": {"tensor_core": 0}}, None, "tensor-core instructions (mma.sync, wmma.mma "
     "or wgmma) are in the compiled code, but the graded cases never executed them"),
    ("tensor_core_tile", {"tensor_core_tile": {"tensor_core": 1000}}, None, "its tensor-core instructions did 1,000 "
                                                                            "multiply-adds, 0.0%"),
    ("tensor_core_tile", None, None, "no evidence of tensor_cores could be counted: the replay sent no counts"),
    ("tensor_core_tile", None, "KernelCompileError: ...", "no evidence of tensor_cores could be counted: "
                                                          "KernelCompileError: ..."),
], ids=["not-in-the-code", "never-executed", "too-few-products", "no-counts", "counting-failed"])
def test_a_variant_passing_every_case_without_its_technique_scores_zero_with_the_reason(tmp_path, kernel, counts,
                                                                                        error, expected):
    replayed = counted(worker_records(tmp_path, honest, ["matmul_forward"], variant="matmul_tf32", kernel=kernel),
                       "matmul_tf32", counts, error)
    grade = score_item(m2_item("tf32"), scheme_for(2), SEED, tmp_path, replayed)
    assert grade.score == 0 and grade.cases_passed == grade.cases_run
    assert "cases pass, but matmul_tf32: " in grade.reason and expected in grade.reason, grade.reason


@pytest.mark.nvrtc
def test_an_item_of_two_variants_needs_both(tmp_path):
    replayed = worker_records(tmp_path, honest, ["layernorm_forward"], variant="layernorm_reduction",
                              kernel="shuffled_row_sum")
    worker_records(tmp_path, honest, ["softmax_forward"], variant="softmax_reduction", kernel="shuffled_row_sum",
                   replayed=replayed)
    for variant in ("layernorm_reduction", "softmax_reduction"):
        counted(replayed, variant, {"shuffled_row_sum": {"shuffle": 64}})
    assert score_item(m2_item("reduction"), scheme_for(2), SEED, tmp_path, replayed).score == 3
    counted(replayed, "softmax_reduction", {"shuffled_row_sum": {"shuffle": 0}})
    grade = score_item(m2_item("reduction"), scheme_for(2), SEED, tmp_path, replayed)
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
    monkeypatch.setattr("gpt2kit.grading.grade.grade_item", lambda submission, item, scheme, seed, sandbox: ItemGrade(
        item, 0.0, ""))
    made = grade_submission(tmp_path, scheme_for(2), SEED, sandbox=Sandbox(tmp_path, "none", "isolation: none (...)"))
    assert made.milestone == 2 and reports.gradescope_results(made)["extra_data"] == {
        "milestone": 2, "isolation": "isolation: none (...)"}
    assert reports.console_table(made).splitlines()[:2] == [
        f"submission: {tmp_path}   (milestone 2, seed 123)", "isolation: none (...)"]


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


class DiskFull:
    """A score whose writing fails as a full disk would, after the rows before it are written."""

    def __str__(self):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_gradebook_that_fails_midway_keeps_the_previous_one(tmp_path):
    results = reports.gradescope_results(sample_grade())
    reports.write_gradebook([("carol", results)], load_scheme(), tmp_path / "gradebook.csv")
    before = (tmp_path / "gradebook.csv").read_text()
    with pytest.raises(OSError, match="No space left on device"):
        reports.write_gradebook([("alice", results), ("bob", results | {"score": DiskFull()})], load_scheme(),
                                tmp_path / "gradebook.csv")
    assert (tmp_path / "gradebook.csv").read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gradebook.csv"]


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
        f"gpt2kit.grading: the results in {tmp_path} mix milestones (milestone 1: alice, bob, carol and 1 more; "
        f"milestone 2: erin); gather each milestone's from a directory of its own"])
    assert not (tmp_path / "gradebook.csv").exists()


def test_gather_checks_the_milestone_it_is_given_against_the_results(tmp_path):
    write_results(tmp_path, [full_marks(2, "alice")])
    done = grading("gather", str(tmp_path), "--milestone", "1")
    assert (done.returncode, done.stderr.splitlines()) == (
        2, [f"gpt2kit.grading: --milestone 1, but the results in {tmp_path} are milestone 2's"])


def test_results_that_do_not_say_their_milestone_are_gathered_under_the_one_named(tmp_path):
    write_results(tmp_path, [full_marks(2, "alice")], milestone_said=False)
    done = grading("gather", str(tmp_path))
    assert (done.returncode, done.stderr.splitlines()) == (2, [
        f"gpt2kit.grading: the results of alice in {tmp_path} do not say their milestone; name it with --milestone N"])
    assert grading("gather", str(tmp_path), "--milestone", "2").returncode == 0
    assert gradebook(tmp_path)[1][:3] == ["alice", "2", "18.0"]
    wrong = grading("gather", str(tmp_path), "--milestone", "1")
    assert (wrong.returncode, wrong.stderr.splitlines()) == (2, [
        "gpt2kit.grading: alice: its results have no score for 'Attention (including Softmax)', an item of "
        "milestone 1"])


@pytest.mark.skipif(gpu_unavailable_reason() is None, reason="this machine has a GPU")
def test_without_a_gpu_grading_exits_with_one_line(tmp_path):
    done = subprocess.run([sys.executable, "-m", "gpt2kit.grading", str(ROOT)], capture_output=True, text=True,
                          cwd=ROOT)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"gpt2kit.grading: cannot grade without a GPU: {gpu_unavailable_reason()}"]


@pytest.mark.skipif(gpu_unavailable_reason() is None, reason="this machine has a GPU")
def test_the_leaderboard_reads_no_profile_from_the_environment():
    done = subprocess.run([sys.executable, "-m", "gpt2kit.grading", "leaderboard", str(ROOT), "--variant",
                           "matmul_tf32"], capture_output=True, text=True, cwd=ROOT,
                          env=os.environ | {"KIT_PROFILE": "bf16"})
    assert (done.returncode, done.stderr.splitlines()) == (
        2, [f"gpt2kit.grading leaderboard: cannot time kernels without a GPU: {gpu_unavailable_reason()}"])


@pytest.mark.skipif(not set(FUSED_DECODE_VARIANTS) <= set(VARIANTS), reason="this kit has no milestone-3 variants")
def test_the_leaderboard_refuses_some_of_the_fused_matmuls_without_the_others():
    done = grading("leaderboard", str(ROOT), "--variant", "attention_flash", "--variant", FUSED_DECODE_VARIANTS[0])
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines() == [
        f"gpt2kit.grading: variants {FUSED_DECODE_VARIANTS[0]}: the decode step calls the fused matmuls all together "
        f"or not at all: name {' and '.join(FUSED_DECODE_VARIANTS[1:])} too, or none of the three"]


def test_the_worker_program_loads_no_oracle():
    code = ("import sys, gpt2kit.grading.worker; print(sorted(set(sys.modules) & "
            "{'gpt2kit.reference.cpu', 'gpt2kit.reference.gold', 'gpt2kit.reference.judging'}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def grading(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpt2kit.grading", *args], capture_output=True, text=True, cwd=ROOT)


def test_a_handout_over_an_existing_directory_is_one_line(tmp_path):
    done = grading("handout", str(tmp_path))
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"gpt2kit.grading: {tmp_path} already exists; choose a new directory"]


def test_a_handout_where_nothing_can_be_written_is_one_line(tmp_path):
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    done = grading("handout", str(blocked / "kit"))
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"gpt2kit.grading: {blocked / 'kit'}: cannot write the handout (Not a directory)"]


def test_a_class_list_that_cannot_be_read_is_one_line(tmp_path):
    missing = tmp_path / "missing.txt"
    done = grading("--class-list", str(missing))
    assert (done.returncode, done.stderr.splitlines()) == (
        2, [f"gpt2kit.grading: --class-list {missing}: no such file"])
    done = grading("--class-list", str(tmp_path))
    assert (done.returncode, done.stderr.splitlines()) == (
        2, [f"gpt2kit.grading: --class-list {tmp_path}: cannot read it (Is a directory)"])


def test_a_file_given_as_a_submission_is_named_as_a_file(tmp_path):
    archive = tmp_path / "alice.zip"
    archive.write_bytes(b"PK")
    done = grading(str(archive), str(tmp_path / "bob"))
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"gpt2kit.grading: {archive} is a file, not a submission directory (unpack it "
                                        f"into a directory first); no such submission directory: {tmp_path / 'bob'}"]


def test_help_names_every_command_and_every_milestone():
    done = grading("--help")
    assert done.returncode == 0
    assert "python -m gpt2kit.grading gather DIR" in done.stdout
    assert "python -m gpt2kit.grading handout OUT_DIR" in done.stdout
    every = "{" + ",".join(map(str, WEIGHTS_FILES)) + "}"
    assert set(re.findall(r"--milestone (\S+?)\]", done.stdout)) == {"N", every}


@pytest.mark.parametrize("args, message", [
    (("{submission}", "--out", "{file}"), "--out {file}: {file} is not a directory"),
    (("{submission}", "--out", "{file}/reports"), "--out {file}/reports: {file} is not a directory"),
    (("{submission}", "--results-json", "{submission}"), "--results-json {submission}: is a directory; name a file "
                                                         "to write"),
    (("leaderboard", "{submission}", "--out", "{file}"), "--out {file}: {file} is not a directory"),
], ids=["out", "out-under-a-file", "results-json", "leaderboard-out"])
def test_where_reports_cannot_go_is_one_line_before_the_grading_starts(tmp_path, args, message):
    paths = {"submission": tmp_path / "alice", "file": tmp_path / "a-file"}
    paths["submission"].mkdir()
    paths["file"].write_text("")
    done = grading(*(arg.format(**paths) for arg in args))
    assert (done.returncode, done.stderr.splitlines()) == (2, [f"gpt2kit.grading: {message.format(**paths)}"])


@pytest.mark.parametrize("target, mode", [("gpt2kit.grading.handout:kit_files", "raise"), ("shutil:copy2", "raise"),
                                          ("shutil:copy2", "swallow")],
                         ids=["listing", "writing", "writing-swallowed"])
def test_ctrl_c_stops_a_handout_at_once_and_leaves_no_half_kit(tmp_path, target, mode):
    stopped = interrupted([*pausing(target, mode), "gpt2kit.grading", "handout", str(tmp_path / "kit")], "pausing in ")
    assert stopped.status == 130 and stopped.seconds < PROMPTLY, stopped
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("target, mode", [("gpt2kit.grading.reports:read_results", "raise"),
                                          ("gpt2kit.kernel_runtime.files:_flush_to_disk", "raise"),
                                          ("gpt2kit.kernel_runtime.files:_flush_to_disk", "swallow")],
                         ids=["reading", "writing", "writing-swallowed"])
def test_ctrl_c_stops_gather_at_once_and_keeps_the_previous_gradebook(tmp_path, target, mode):
    write_results(tmp_path, [full_marks(1, "alice"), full_marks(1, "bob")])
    (tmp_path / "gradebook.csv").write_text("the previous gradebook\n")
    stopped = interrupted([*pausing(target, mode), "gpt2kit.grading", "gather", str(tmp_path)], "pausing in ")
    assert stopped.status == 130 and stopped.seconds < PROMPTLY, stopped
    assert (tmp_path / "gradebook.csv").read_text() == "the previous gradebook\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["alice", "bob", "gradebook.csv"]


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


@pytest.fixture(scope="module")
def handout_m4(tmp_path_factory):
    destination = tmp_path_factory.mktemp("handout-m4") / "kit"
    stubbed = make_handout(destination, milestone=4)
    return destination, stubbed


def test_milestone_4_handout_adds_training_s_kernels_stubbed(handout_m4, handout_m3):
    destination, stubbed = handout_m4
    training = sorted(s.module for s in SPECS.values() if s.milestone == 4)
    assert sorted(path.split()[0] for path in set(stubbed) - set(handout_m3[1])) == [f"kernels/{m}.py" for m in training]
    for module in training:
        assert not (handout_m3[0] / f"kernels/{module}.py").exists() and not (handout_m3[0] / f"reference/specs/{module}.py").exists()
        assert (destination / f"reference/specs/{module}.py").exists()
        assert "BEGIN SOLUTION" not in (destination / f"kernels/{module}.py").read_text()
    readme = (destination / "README.md").read_text()
    assert "## Milestone 4" in readme and "## Milestone 3" in readme and "<!--" not in readme
    assert "## Milestone 4" not in (handout_m3[0] / "README.md").read_text()
    assert kit_paths_mentioned(readme, ROOT) == kit_paths_mentioned(readme, destination)


def test_milestone_3_handout_adds_flash_and_local_attention_stubbed(handout_m3, handout_m2):
    destination, stubbed = handout_m3
    assert sorted(set(stubbed) - set(handout_m2[1])) == ["kernels/flash_attention.py (1 block)",
                                                          "kernels/flash_attention_3xtf32.py (2 blocks)",
                                                          "kernels/fused_gemv.py (2 blocks)",
                                                          "kernels/matmul_3xtf32.py (2 blocks)",
                                                          "kernels/matmul_split_k.py (5 blocks)",
                                                          "kernels/rotary.py (1 block)"]
    assert not (handout_m2[0] / "kernels/matmul_split_k.py").exists()
    assert not (handout_m2[0] / "kernels/matmul_3xtf32.py").exists()
    assert not (handout_m2[0] / "kernels/flash_attention_3xtf32.py").exists()
    assert not (handout_m2[0] / "kernels/rotary.py").exists() and (destination / "reference/specs/rotary.py").exists()
    assert (destination / "reference/specs/flash_attention.py").exists()
    assert (destination / "reference/specs/local_attention.py").exists()
    assert "BEGIN SOLUTION" not in (destination / "kernels/flash_attention.py").read_text()
    readme = (destination / "README.md").read_text()
    assert "## Milestone 3" in readme and "## Milestone 2" in readme and "<!--" not in readme
    assert "## Milestone 3" not in (handout_m2[0] / "README.md").read_text()
    assert kit_paths_mentioned(readme, ROOT) == kit_paths_mentioned(readme, destination)


def test_milestone_2_handout_adds_the_variants_stubbed(handout_m2, handout):
    destination, stubbed = handout_m2
    assert len(stubbed) == len(handout[1]) + 2, stubbed  # milestone 1's kernels stay stubbed too
    assert {"kernels/matmul_tf32.py (4 blocks)", "kernels/matmul_cublas.py (2 blocks)"} <= set(stubbed)
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
def test_milestone_2_handout_stubs_compile_and_their_technique_checks_say_not_written_yet(handout_m2):
    """The student's stubs compile, and each variant's technique check on compiled code skips, naming its host
    function and file as not written yet, instead of failing on the stub's empty kernels."""
    destination, _ = handout_m2
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfs",
                           "tests/kernels/test_compile.py",
                           "tests/kernels/test_variants.py::test_variant_module_compiles_to_its_technique"],
                          capture_output=True, text=True, cwd=destination, timeout=600, env=fresh_kit_environment())
    assert done.returncode == 0, done.stdout[-3000:]
    skipped = re.findall(r"^SKIPPED \[1\] tests/kernels/test_variants.py:\d+: (.*)$", done.stdout, flags=re.MULTILINE)
    with_technique = [v for v in DECLARED if v.milestone <= 2 and v.technique and TECHNIQUES[v.technique].in_ptx]
    assert sorted(skipped) == sorted(stub_line(v.function, v.module) for v in with_technique), done.stdout[-3000:]


def test_a_grade_lost_on_a_stub_names_it_first_and_keeps_its_score(handout):
    """The grader's reason for an item a fresh kit loses starts with the stub line; a full score, a written kernel
    and a kit without a kernels directory leave the reason as it was; the score is never touched."""
    from gpt2kit.grading.grade import with_stub_named

    destination, _ = handout
    scheme = load_scheme()
    item = scheme.item("gelu")
    lost = ItemGrade(item, 0.0, "10 of 10 cases fail; first: ...", 0, 10)
    named = with_stub_named(lost, destination)
    assert named.reason == "gelu_forward: not written yet (kernels/gelu.py); 10 of 10 cases fail; first: ..."
    assert named.score == 0.0 and with_stub_named(lost, destination / "kernels").reason == named.reason
    full = ItemGrade(item, item.weight, "all 10 cases pass", 10, 10)
    assert with_stub_named(full, destination) == full
    assert with_stub_named(lost, ROOT) == lost and with_stub_named(lost, destination / "nowhere") == lost


def test_handout_stubs_every_solution_and_leaves_out_staff_files(handout):
    destination, stubbed = handout
    assert len(stubbed) == 7  # milestone 1's six kernel modules and the KV cache's decode.py
    for path in (destination / "kernels").glob("*.py"):
        assert LEFTOVER_MARKER.search(path.read_text()) is None, path
    assert "TODO: write this kernel" in (destination / "kernels" / "layernorm.py").read_text()
    assert not (destination / "grading").exists() and not (destination / "tests/kernels/wrong").exists()
    assert (ROOT / "kernels/matmul_tf32.py").exists()  # milestone 2's: not in milestone 1's handout
    assert not (destination / "kernels/matmul_tf32.py").exists()
    assert not (destination / "tests/kernels/test_variants.py").exists()
    decode = (destination / "kernels" / "decode.py").read_text()
    assert "kernels/decode.py (4 blocks)" in stubbed and "__shfl" not in decode  # its block reduction too
    readme = (destination / "README.md").read_text()
    assert "## Grading (for TAs)" not in readme and "## On Delta" in readme and "staff only" not in readme
    assert "gpt2kit.grading" in packages_without_a_folder(ROOT / "pyproject.toml", destination)
    assert packages_without_a_folder(destination / "pyproject.toml", destination) == []  # the kit installs


def packages_without_a_folder(pyproject: Path, kit: Path) -> list[str]:
    """The packages `pyproject` installs whose folder (its package-dir, or its parent's) `kit` does not hold, or holds
    without Python."""
    setuptools = tomllib.loads(pyproject.read_text())["tool"]["setuptools"]
    folders = setuptools["package-dir"]

    def folder(package: str) -> Path:
        parent, _, name = package.rpartition(".")
        return Path(folders[package]) if package in folders else folder(parent) / name if parent else Path(package)

    return [package for package in setuptools["packages"] if not any((kit / folder(package)).glob("*.py"))]


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
    """Every `quoted` name in the README that is a file or directory of `kit` (by path, or by file name). The files
    of a git checkout are those git tracks: what running the kit leaves there (results/, gpt2_124M.bin) is none."""
    quoted = {q.rstrip("/") for q in re.findall(r"`([\w./-]+)`", readme)} - {".", ".venv"}  # the reader's own
    files = kit_files(kit) if (kit / ".git").exists() else [p.relative_to(kit) for p in kit.rglob("*")]
    held = {path for file in files for path in (file, *file.parents[:-1])}  # each file and the directories above it
    names = {path.name for path in held}
    return {q for q in quoted if Path(q) in held or ("/" not in q and "." in q.strip(".") and q in names)}


def test_what_running_the_kit_leaves_in_its_checkout_is_not_taken_for_a_file_of_the_kit(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "README.md").write_text("# kit\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_kit.py").write_text("")
    subprocess.run(["git", "add", "README.md", "tests"], cwd=tmp_path, check=True)
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "gpt2_trained.bin").write_bytes(b"")
    (tmp_path / "gpt2_124M.bin").write_bytes(b"")
    readme = "`README.md`, `tests/`, `test_kit.py`, `results/gpt2_trained.bin`, `results/` and `gpt2_124M.bin`"
    assert kit_paths_mentioned(readme, tmp_path) == {"README.md", "tests", "test_kit.py"}


def test_handout_readme_mentions_only_what_the_handout_holds(handout):
    destination, _ = handout
    readme = (destination / "README.md").read_text()
    assert kit_paths_mentioned(readme, ROOT) == kit_paths_mentioned(readme, destination)
    for staff_only in ("grading", "wrong/", "test_known_wrong", "KIT_SLURM_TESTS", ".ci/", "<!--"):
        assert staff_only not in readme
    kit_readme = (ROOT / "README.md").read_text()
    assert "tests/kernels/wrong" in kit_paths_mentioned(kit_readme, ROOT)  # the check can see a staff path


def prose(readme: str) -> str:
    """The README without its code blocks."""
    return re.sub(r"^```.*?^```\n", "", readme, flags=re.MULTILINE | re.DOTALL)


def headings(readme: str) -> set[str]:
    return set(re.findall(r"^#+ .*$", prose(readme), flags=re.MULTILINE))


def paragraphs(readme: str) -> set[str]:
    """The README's paragraphs of prose, each as one line of words."""
    return {words(paragraph) for paragraph in prose(readme).split("\n\n") if len(paragraph) > 80}


@pytest.mark.parametrize("kit", ["handout", "handout_m2", "handout_m3", "handout_m4"])
def test_a_handout_s_readme_is_the_students_alone(kit, request):
    """Each milestone's README holds what its students need: no section or paragraph of the research README
    (which it points to) or of the staff README (which stays out with grading/); the research README it
    ships names only what the kit holds."""
    destination, _ = request.getfixturevalue(kit)
    readme = (destination / "README.md").read_text()
    assert "benchmarks/README.md" in readme and "grading/README.md" in READMES["students"].read_text()
    assert "grading/README.md" not in readme and not (destination / "grading").exists()
    for audience in ("research", "staff"):
        theirs = READMES[audience].read_text()
        assert headings(theirs) and not headings(theirs) & headings(readme), audience
        assert paragraphs(theirs) and not paragraphs(theirs) & paragraphs(readme), audience
    research = (destination / "benchmarks" / "README.md").read_text()
    assert kit_paths_mentioned(research, ROOT) == kit_paths_mentioned(research, destination)


KITS = [("handout", 1), ("handout_m2", 2), ("handout_m3", 3), ("handout_m4", 4)]


def stub_line(function: str, module: str) -> str:
    return f"{function}: not written yet (kernels/{module}.py)"


def kit_stub_lines(milestone: int) -> set[str]:
    """What a fresh handout of `milestone` says is not written yet: each host function of the milestone and
    earlier ones that the kit does not provide whole, in its spec's module, and each variant module of their own (the TF32, cuBLAS, split-K matmuls)."""
    functions = [(function, spec.module) for function, spec in SPECS.items()
                 if spec.milestone <= milestone and not spec.provided]
    variants = [(v.function, v.module) for v in DECLARED if v.milestone <= milestone and v.module != SPECS[v.function].module]
    return {stub_line(function, module) for function, module in functions + variants}


def fresh_kit_environment() -> dict:
    """The environment of a handout's commands: no network (the hub offline; the handout's install lines are
    the kit's, which the kit's own run resolves), and pytest's short summary lines whole (it cuts them to the
    terminal's width unless it runs under CI)."""
    return {**os.environ, "CI": "1", "HF_HUB_OFFLINE": "1", "KIT_INSTALL_TESTS": "0"}


def check_fresh_kit_test_run(command: str, done: subprocess.CompletedProcess, milestone: int) -> None:
    """A README pytest command in a fresh handout: each failure is one line naming a host function not written
    yet (no traceback, no other failure), each such function once; the whole run names every one of the kit's.
    Its summary line is printed (pytest -rP shows what a fresh kit's commands say)."""
    summary = (done.stdout.strip().splitlines() or ["no output"])[-1]
    print(f"milestone {milestone}: {command}: {summary}")
    output = f"{command}: {done.stdout[-3000:]}{done.stderr[-3000:]}"
    failures = re.findall(r"^FAILED \S+ - Failed: (.*)$", done.stdout, flags=re.MULTILINE)
    assert len(failures) == len(re.findall(r"^FAILED ", done.stdout, flags=re.MULTILINE)), output
    assert "error" not in summary and len(set(failures)) == len(failures), output
    assert set(failures) <= kit_stub_lines(milestone), output
    assert done.returncode == (1 if failures else 0), output
    if "-k" not in shlex.split(command) and "test_variants.py" not in command:
        assert set(failures) == kit_stub_lines(milestone), output


def pytest_commands(commands: list[str]) -> list[str]:
    return [command for command in commands if shlex.split(command)[1:3] == ["-m", "pytest"]]


@pytest.mark.slow
@pytest.mark.skipif(gpu_unavailable_reason() is None, reason="checks the GPU-less run (on a GPU, "
                                                             "test_handout_test_commands_name_each_stub_on_a_gpu)")
@pytest.mark.parametrize("kit, milestone, runs_pytest", [(kit, milestone, True) for kit, milestone in KITS] +
                         [("handout", 1, False)], ids=["m1-pytest", "m2-pytest", "m3-pytest", "m4-pytest",
                                                                  "m1-the-others"])
def test_handout_readme_commands_without_a_gpu(kit, milestone, runs_pytest, request):
    """Exactly the handout README's commands, run in a fresh handout with this environment's Python and no
    network: each pytest command fails with one line per host function not written yet (and nothing else), every
    other command succeeds or stops with one line naming what is missing (the GPU of a GPU-only tool, the hub of
    a download). A later milestone's kit runs only its pytest commands, and not the whole suite: that differs
    from milestone 1's only in the kernel tests, which its other pytest commands run. Slow: milestone 1's
    `pytest` is the handout's whole suite, and its model commands generate on the NumPy backend."""
    destination, _ = request.getfixturevalue(kit)
    readme = (destination / "README.md").read_text()
    commands = readme_commands(readme)
    assert ".venv/bin/python -m pytest" in commands and ".venv/bin/python -m pytest tests/kernels" in commands
    commands = [c for c in commands if (c in pytest_commands(commands)) == runs_pytest]
    if milestone > 1:
        commands.remove(".venv/bin/python -m pytest")
    outputs = {}
    for command in commands:
        arguments = shlex.split(command)[1:]
        done = outputs[command] = subprocess.run([sys.executable, *arguments], capture_output=True, text=True,
                                                 cwd=destination, stdin=subprocess.DEVNULL,
                                                 env=fresh_kit_environment(), timeout=900)
        output = done.stdout[-3000:] + done.stderr[-3000:]
        if runs_pytest:
            check_fresh_kit_test_run(command, done, milestone)
        elif done.returncode != 0:
            missing = (gpu_unavailable_reason(), "the Hugging Face hub")
            assert done.stderr.count("\n") == 1 and any(m in done.stderr for m in missing), f"{command}: {output}"
    if runs_pytest:
        assert set(install_lines(readme)) <= set(install_lines(READMES["students"].read_text()))
    if runs_pytest and nvrtc_unavailable_reason() is None:  # the student's stubs compile, and the report says so
        assert f"kernel resources (NVRTC, no GPU needed) of {destination / 'kernels'}" in outputs[
            ".venv/bin/python -m pytest tests/kernels"].stdout


@pytest.mark.gpu
@pytest.mark.parametrize("kit, milestone", KITS)
def test_handout_test_commands_name_each_stub_on_a_gpu(kit, milestone, request):
    """On a GPU too, the README's kernel-test commands in a fresh handout fail with one line per host function not
    written yet, the tests that would run the stubs skipped with the same line. The whole suite (`pytest`) is left
    out here: on a GPU it is the kit's whole GPU suite in one process (far past a test's time), and its stub lines
    are the kernel tests', which these commands run, and the `calls` marker's, which the GPU-less run checks."""
    destination, _ = request.getfixturevalue(kit)
    commands = pytest_commands(readme_commands((destination / "README.md").read_text()))
    commands.remove(".venv/bin/python -m pytest")
    for command in commands:
        done = subprocess.run([sys.executable, *shlex.split(command)[1:], "-p", "no:cacheprovider"],
                              capture_output=True, text=True, cwd=destination, stdin=subprocess.DEVNULL,
                              env=fresh_kit_environment(), timeout=900)
        check_fresh_kit_test_run(command, done, milestone)


@pytest.mark.gpu
def test_a_fresh_kit_s_quick_check_and_benchmark_name_each_stub_on_a_gpu(handout):
    """In a fresh milestone-1 kit on a GPU, the quick check names each host function not written yet (one row each)
    and runs none, the ones the kit provides whole passing; and the kernel benchmark names the stubs it would time
    and times nothing."""
    destination, _ = handout
    run = functools.partial(subprocess.run, capture_output=True, text=True, cwd=destination, timeout=600,
                            stdin=subprocess.DEVNULL, env=fresh_kit_environment())
    verify = run([sys.executable, "-m", "gpt2kit.reference.verify", "--seed", "3"])
    rows = {line.split()[0]: line for line in verify.stdout.splitlines()[2:-1] if line.split()[0] in SPECS}
    quick = [spec for spec in SPECS.values() if spec.milestone == 1 and spec.handed_out and spec.quick is not None]
    stubs = sorted(spec.function for spec in quick if not spec.provided)
    assert verify.returncode == 1, verify.stdout + verify.stderr
    assert sorted(rows) == sorted(spec.function for spec in quick), verify.stdout + verify.stderr
    assert sorted(function for function, row in rows.items() if " TODO " in row) == stubs, verify.stdout
    assert all(rows[function].endswith(stub_line(function, SPECS[function].module)) for function in stubs)
    assert all(" PASS " in row for function, row in rows.items() if function not in stubs), verify.stdout
    assert verify.stdout.splitlines()[-1] == (f"{len(quick) - len(stubs)} of {len(quick)} host functions pass, "
                                              f"{len(stubs)} not written yet")
    timed = run([sys.executable, "-m", "gpt2kit.benchmarks.kernels", "--only", "gelu_forward"])  # not gelu_erf
    assert timed.returncode == 1, timed.stdout + timed.stderr
    assert f"gelu_forward       {stub_line('gelu_forward', 'gelu')}" in timed.stdout.splitlines(), timed.stdout
    assert timed.stdout.splitlines()[-1] == "nothing was timed: every row's function is still a stub"


@pytest.mark.parametrize("kit", ["handout_m2", "handout_m3", "handout_m4"])
def test_a_fresh_kit_s_model_checks_skip_where_its_variants_are_stubs(kit, request):
    """The model's checks on the CPU in a fresh kit with milestone 2's variants: the one that builds the kernels
    backend with the TF32 matmul skips with the line naming that stub, instead of failing on the backend's refusal
    of the kit's stubs (a traceback in the README's whole-suite pytest)."""
    destination, _ = request.getfixturevalue(kit)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfs",
                           "tests/model/test_step_check.py"], capture_output=True, text=True, cwd=destination,
                          timeout=300, env=fresh_kit_environment())
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    skipped = re.findall(r"^SKIPPED \[1\] tests/model/test_step_check.py:\d+: (.*)$", done.stdout, flags=re.MULTILINE)
    assert stub_line("matmul_forward", "matmul_tf32") in skipped, done.stdout[-3000:]


VARIANT_PROBE = """
import pytest


@pytest.mark.calls("matmul_forward", module="matmul_tf32")
def test_the_tf32_matmul_stands_in_for_matmul_forward():
    from gpt2kit.model_runtime.backends import kernel_ops

    kernel_ops(variants=("matmul_tf32",))
"""


def test_a_test_of_a_variant_whose_module_the_kit_lacks_skips_saying_so(handout, tmp_path):
    """A test marked as calling a variant's module (the TF32 matmul) in a kit of an earlier milestone skips, naming
    the module it lacks, instead of failing on the unknown variant (as the model's GPU tests would, kernels written)."""
    kit = tmp_path / "kit"
    shutil.copytree(handout[0], kit)
    (kit / "tests" / "test_variant_probe.py").write_text(VARIANT_PROBE)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfs",
                           "tests/test_variant_probe.py"], capture_output=True, text=True, cwd=kit, timeout=300,
                          env=fresh_kit_environment())
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert re.search(r"^SKIPPED \[1\] tests/test_variant_probe.py:\d+: kernels/matmul_tf32.py: not in this kit",
                     done.stdout, flags=re.MULTILINE), done.stdout[-3000:]


@pytest.mark.parametrize("kit", ["handout", "handout_m2"])
def test_earlier_kits_leave_out_later_milestones_host_functions(kit, request):
    destination, _ = request.getfixturevalue(kit)
    later = [path for milestone, paths in MILESTONE_FILES.items() if milestone > 2 for path in paths]
    assert "kernels/flash_attention.py" in later
    assert not [path for path in later if (destination / path).exists()]


def launched_kernels(source: str, function: str) -> set[str]:
    """The kernels (by name) that host function `function` of a kernel module's source launches."""
    return reached(source, function)[1]


def kernel_body(source: str, kernel: str) -> str:
    """The body of CUDA kernel `kernel` in a kernel module's source, between its braces."""
    body = cuda_body(source, kernel)
    assert body is not None, f"no kernel {kernel}"
    return body


def defining_module(module: str, kernel: str) -> str:
    """The kernels/ file whose source holds `kernel`'s body: `module`, or the one it imports the source from."""
    if cuda_body((ROOT / module).read_text(), kernel) is not None:
        return module
    return next(str(p.relative_to(ROOT)) for p in sorted((ROOT / "kernels").glob("*.py"))
                if cuda_body(p.read_text(), kernel) is not None)


def words(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("kit, milestone", KITS)
def test_a_handout_ships_no_graded_kernel_whole(kit, milestone, request):
    """Every kernel that a host function or variant graded by the milestone's weights launches is stubbed in
    that milestone's kit (or its module left out), and no file of the kit holds the kit's body of one."""
    destination, _ = request.getfixturevalue(kit)
    graded = {}  # kernel name -> the kit's body
    for variant in (v for item in scheme_for(milestone).items for v in item.variants):
        module = f"kernels/{variant.module}.py"
        kernels = launched_kernels((ROOT / module).read_text(), variant.function)
        assert kernels, f"{variant.name}: {variant.function} launches no kernel of {module}"
        if not (destination / module).exists():
            continue
        for kernel in kernels:
            home = defining_module(module, kernel)  # matmul_3xtf32.py compiles matmul_tf32.py's source
            body = kernel_body((ROOT / home).read_text(), kernel)
            assert kernel_body((destination / home).read_text(), kernel) != body, \
                f"milestone {milestone}'s kit ships {kernel} ({home}, graded as {variant.name}) whole"
            graded[kernel] = words(body)
    for path in (p for p in destination.rglob("*") if p.is_file() and p.suffix in (".py", ".md", ".cu", ".cuh")):
        text = words(path.read_text())
        shipped = [kernel for kernel, body in graded.items() if body in text]
        assert not shipped, f"{path.relative_to(destination)} holds the body of {shipped}"


def test_the_graded_kernel_check_can_fail():
    """The check above sees a graded kernel shipped whole, in a helper's reach as in the host function's."""
    source = (ROOT / "kernels/fused_gemv.py").read_text()
    assert launched_kernels(source, "layernorm_matmul_forward") == {"fused_gemv_kernel"}  # through a factory
    stubbed, _ = strip_solutions(source)
    assert kernel_body(stubbed, "fused_gemv_kernel") != kernel_body(source, "fused_gemv_kernel")
    assert launched_kernels((ROOT / "kernels/decode.py").read_text(), "decode_attention_forward") == {
        "decode_attention_kernel"}


PROVIDED_MODULES = sorted({spec.module for spec in SPECS.values() if spec.provided})
BACKWARD_PASS = "a backward pass"


@functools.cache
def graded_through() -> dict[str, int]:
    """What the milestones' weights grade -> the last milestone grading it: each technique a variant must show in
    its kernels' compiled code, and a backward pass (training's host functions)."""
    through = {}
    for milestone in sorted(WEIGHTS_FILES):
        for variant in (v for item in scheme_for(milestone).items for v in item.variants):
            technique = variant.technique if variant.technique and TECHNIQUES[variant.technique].in_ptx else None
            for what in filter(None, (technique, BACKWARD_PASS if "backward" in variant.function else None)):
                through[what] = max(through.get(what, 0), milestone)
    return through


@functools.cache
def graded_building_blocks(module: str) -> dict[str, str]:
    """What provided module `module` holds of what the milestones grade -> where: a technique, as the grader finds
    it (reference.techniques: its instructions in a kernel's compiled code), and a backward pass (a host function
    of its spec)."""
    found = static_classes([(program.program, None) for program in programs_in(kernel_module(module))])
    held = {name: kernel for name in graded_through() if name in TECHNIQUES
            for kernel, classes in found.items() if TECHNIQUES[name].shown_by(classes)}
    backward = [spec.function for spec in SPECS.values() if spec.module == module and "backward" in spec.function]
    return held | ({BACKWARD_PASS: backward[0]} if backward else {})


def provided_module_params() -> list:
    """(kit, milestone, module) for every provided module in every kit."""
    return [pytest.param(kit, milestone, module, id=f"m{milestone}-{module}")
            for kit, milestone in KITS for module in PROVIDED_MODULES]


@pytest.mark.nvrtc
@pytest.mark.parametrize("kit, milestone, module", provided_module_params())
def test_a_kit_s_provided_modules_hold_nothing_its_milestone_or_a_later_one_grades(kit, milestone, module, request):
    """A module the kit provides whole is in a milestone's kit only once every milestone grading what it holds is
    past: no technique of that milestone or a later one shows in its kernels' compiled code (a tiled product's
    shared memory, a reduction's shuffles, tensor cores, float atomics, ...), and no backward pass is in any kit
    while milestone 4 grades training's."""
    destination, _ = request.getfixturevalue(kit)
    shipped = destination / "kernels" / f"{module}.py"
    if not shipped.exists():
        return  # left out of this kit: nothing of it handed out
    assert shipped.read_text() == (ROOT / "kernels" / f"{module}.py").read_text()  # the module compiled here
    held = {what: where for what, where in graded_building_blocks(module).items()
            if graded_through()[what] >= milestone}
    assert not held, (f"milestone {milestone}'s kit holds kernels/{module}.py, which holds " + "; ".join(
        f"{what.replace('_', ' ')} ({where}), graded through milestone {graded_through()[what]}"
        for what, where in held.items()))


FALLBACK = """
import types
from gpt2kit.generation.decoding import DecoderError, decoder_or_recompute, make_decoder
from gpt2kit.reference.registry import SPECS, unwritten
model = types.SimpleNamespace(backend=types.SimpleNamespace(name="kernels"))  # all a decoder's choice reads
print([function for function in SPECS if unwritten(function)])
said = []
print(type(decoder_or_recompute(model, "graph", 1, said.append)).__name__, said)
try:
    make_decoder(model, "launched", 1)
except DecoderError as err:
    print(err)
"""


def test_a_kit_without_its_kv_cache_written_generates_by_recomputing_and_says_so(handout):
    """In a fresh handout every host function students write is a stub; generation's decoder is then the
    recomputing one, with one line saying why, and a cached decoder is refused in one line, instead of NaN
    logits."""
    destination, _ = handout
    done = subprocess.run([sys.executable, "-c", FALLBACK], capture_output=True, text=True, cwd=destination)
    assert done.returncode == 0, done.stderr
    unwritten, fallback, refusal = done.stdout.splitlines()
    assert unwritten == str([function for function, spec in SPECS.items() if spec.milestone == 1 and not spec.provided])
    stubs = ("encoder_at_positions_forward, kv_cache_append_forward, decode_attention_forward: not written yet "
             "(kernels/decode.py)")
    assert fallback == "RecomputeDecoder " + str([f"{stubs}; generating without the KV cache (each step recomputes "
                                                  "the whole sequence)"])
    assert refusal == f"{stubs}: the launched decoder needs the KV cache they keep (write them, or generate without " \
                      "the cache)"


STUBBED_MODEL = """
import sys
from gpt2kit.benchmarks.prefill import row_not_in_this_kit
from gpt2kit.model_runtime.backends import kernel_ops
from gpt2kit.kernel_runtime import KitError
for variants in ((), tuple(sys.argv[1:])):
    try:
        kernel_ops(variants=variants)
        print("built")
    except KitError as err:
        print(err)
print(row_not_in_this_kit(tuple(sys.argv[1:])))
"""
BACKEND_REFUSAL = ": the kernels backend runs them (write them first, or choose the gold or reference backend)"


@pytest.mark.parametrize("kit, variant", [("handout", "matmul_tf32"), ("handout_m2", "matmul_tf32")])
def test_a_kit_with_stubs_builds_no_kernels_model_and_its_benchmark_skips_the_rows_it_lacks(kit, variant, request):
    """The kernels backend refuses a model whose host functions are stubs (which write nothing: the model would
    compute from garbage) in one line naming them, the KV cache's aside (generation recomputes instead); the
    prefill benchmark skips a row whose variant the kit lacks or has not written, saying which."""
    destination, _ = request.getfixturevalue(kit)
    done = subprocess.run([sys.executable, "-c", STUBBED_MODEL, variant], capture_output=True, text=True,
                          cwd=destination, env={**os.environ, "PYTHONPATH": str(destination)})
    assert done.returncode == 0, done.stderr
    refusal, with_variant, row = done.stdout.splitlines()
    model_functions = set(MODEL_FUNCTIONS) - set(KV_CACHE_FUNCTIONS)  # what a forward pass calls
    files = sorted({f"kernels/{SPECS[f].module}.py" for f in model_functions})
    named, where = refusal.removesuffix(BACKEND_REFUSAL).split(": not written yet ")
    assert refusal.endswith(BACKEND_REFUSAL) and set(named.split(", ")) == model_functions
    assert where == f"({', '.join(files)})"
    if kit == "handout":  # milestone 1's kit has no milestone-2 variant
        assert with_variant.startswith(f"no variant '{variant}'") and row == f"this kit has no {variant}"
    else:
        assert f"; {stub_line('matmul_forward', variant)}{BACKEND_REFUSAL}" in with_variant
        assert row == stub_line("matmul_forward", variant)


def test_the_kit_itself_holds_no_stub():
    """The kit's own kernels are written: its decoders run the KV cache as they always have."""
    assert [function for function in SPECS if unwritten(function)] == []
    assert kv_cache_stubs(types.SimpleNamespace(backend=types.SimpleNamespace(name="kernels")), "graph") is None


def stubbed_between(module: str, start: str, end: str | None = None) -> str:
    """kernels/<module>.py with the solution blocks between the text `start` and the text `end` (or the file's end)
    stubbed as the handout stubs them, the others written."""
    source = (ROOT / "kernels" / f"{module}.py").read_text()
    begin, stop = source.index(start), source.index(end) if end else len(source)
    return source[:begin] + strip_solutions(source[begin:stop])[0] + source[stop:]


@pytest.mark.parametrize("module, start, end, unwritten_functions, written_functions", [
    ("attention", "attention_scores_kernel(float", None, ["attention_forward"], ["softmax_forward"]),
    # attention_forward runs the softmax too
    ("attention", "softmax_rows_kernel(float", "attention_scores_kernel(float",
     ["attention_forward", "softmax_forward"], []),
    # only the block reduction, a __device__ function that decode_attention_kernel calls
    ("decode", "__device__ float block_reduce", "decode_attention_kernel(float",
     ["decode_attention_forward"], ["encoder_at_positions_forward", "kv_cache_append_forward"]),
    ("decode", "kv_cache_append_kernel(float", "__device__ float block_reduce",
     ["kv_cache_append_forward"], ["encoder_at_positions_forward", "decode_attention_forward"]),
    # a Python stub: split_span, and matmul_forward that calls it
    ("matmul_split_k", "def split_span", "def launch_slices", ["split_span", "matmul_forward"], ["launch_slices"]),
    ("fused_gemv", "FUSED_GEMV_SOURCE", None,
     ["layernorm_matmul_forward", "layernorm_matmul_gelu_forward", "matmul_residual_forward"], []),
])
def test_a_host_function_is_unwritten_while_what_it_runs_holds_a_stub(module, start, end, unwritten_functions,
                                                                        written_functions):
    source = stubbed_between(module, start, end)
    assert [f for f in unwritten_functions + written_functions if function_holds_stub(source, f)] == unwritten_functions


def test_a_module_that_does_not_tell_is_judged_whole():
    """Without a readable source, or without the function, any stub line in the file counts; none, none does."""
    partly = stubbed_between("attention", "attention_scores_kernel(float")
    written = (ROOT / "kernels/attention.py").read_text()
    for source, stub in ((partly, True), (written, False)):
        assert function_holds_stub(source + "\ndef broken(:\n", "softmax_forward") is stub
        assert function_holds_stub(source, "renamed_softmax_forward") is stub
    stray = written + STUB_LINES["#"] + "\n"  # a stub line outside every function
    assert not function_holds_stub(stray, "softmax_forward")
    assert function_holds_stub(stray.replace('"softmax_forward_kernel")', '"made_elsewhere")'), "softmax_forward")


def fake_kit(root: Path) -> Path:
    """A git checkout holding a kernel module and a README, tracked, beside what a TA's checkout holds
    untracked: a student's submission, a class list, the leaderboard's results."""
    tracked = {"README.md": "# kit\n", "kernels/gelu.py": "// BEGIN SOLUTION\nanswer;\n// END SOLUTION\n"}
    untracked = ["submissions/alice/kernels/gelu.py", "class.txt", "leaderboard-results/alice/leaderboard.json"]
    for path in [*tracked, *untracked]:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(tracked.get(path, "not the kit's\n"))
    for command in (["git", "init", "-q"], ["git", "add", *tracked]):
        subprocess.run(command, cwd=root, check=True, capture_output=True)
    return root


def test_a_handout_holds_only_the_files_git_tracks(tmp_path):
    kit = fake_kit(tmp_path / "kit")
    make_handout(tmp_path / "handout", root=kit)
    handed_out = sorted(p.relative_to(tmp_path / "handout").as_posix() for p in (tmp_path / "handout").rglob("*")
                        if p.is_file())
    assert handed_out == ["README.md", "kernels/gelu.py"]
    assert "answer" not in (tmp_path / "handout/kernels/gelu.py").read_text()


def test_an_interrupted_handout_leaves_no_half_kit(tmp_path, monkeypatch):
    """Ctrl-C after the README is written: no directory under the destination's name, nor beside it."""
    kit = fake_kit(tmp_path / "kit")

    def interrupted(text):
        raise KeyboardInterrupt

    monkeypatch.setattr("gpt2kit.grading.handout.strip_solutions", interrupted)
    with pytest.raises(KeyboardInterrupt):
        make_handout(tmp_path / "handout", root=kit)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kit"]


def test_a_handout_refuses_kit_code_git_does_not_track(tmp_path):
    """A module in a folder of the kit's Python, not yet committed: a handout without it would not import."""
    kit = fake_kit(tmp_path / "kit")
    make_handout(tmp_path / "first", root=kit)  # the TA's own untracked files are left out, as before
    (kit / "kernels" / "new_kernel.py").write_text("SOURCE = ''\n")
    with pytest.raises(HandoutError, match=r"^kernels/new_kernel.py is in the kit's kernels/ but git does not track "
                                           r"it \(nor 0 more\): commit it, or remove it, before writing a handout$"):
        make_handout(tmp_path / "second", root=kit)


def test_a_handout_from_a_directory_that_is_not_a_git_checkout_is_refused(tmp_path):
    kit = fake_kit(tmp_path / "kit")
    shutil.rmtree(kit / ".git")
    with pytest.raises(HandoutError, match=f"^{re.escape(str(kit))} is not a git checkout of the kit \\(.*not a git "
                                           "repository.*\\): run it from a git clone of the kit, installed with pip "
                                           "install -e$"):
        make_handout(tmp_path / "handout", root=kit)
    subprocess.run(["git", "init", "-q"], cwd=kit, check=True)  # now a directory inside a checkout, not its top
    with pytest.raises(HandoutError, match=f"^{re.escape(str(kit / 'kernels'))} is not a git checkout of the kit "
                                           f"\\(its work tree is {re.escape(str(kit))}\\)"):
        make_handout(tmp_path / "handout", root=kit / "kernels")
    assert not (tmp_path / "handout").exists()


def test_a_handout_from_an_installed_copy_is_one_line(tmp_path):
    """As from `pip install .`: the kit's folders in gpt2kit/ in a directory of their own, no git work tree around."""
    site = tmp_path / "site-packages"
    for package in KIT_PACKAGES:
        shutil.copytree(ROOT / package, site / "gpt2kit" / (package if package != "gpt2kit" else ""),
                        ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
    done = subprocess.run([sys.executable, "-m", "gpt2kit.grading", "handout", str(tmp_path / "kit")],
                          capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(site)})
    assert done.returncode == 2 and not (tmp_path / "kit").exists()
    [line] = done.stderr.splitlines()
    assert line.startswith(f"gpt2kit.grading: {site / 'gpt2kit'} is not a git checkout of the kit (")
    assert line.endswith("): run it from a git clone of the kit, installed with pip install -e")


def test_a_handout_without_git_is_one_line(tmp_path):
    no_git = tmp_path / "bin"  # a PATH where git is not
    no_git.mkdir()
    done = subprocess.run([sys.executable, "-m", "gpt2kit.grading", "handout", str(tmp_path / "kit")],
                          capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PATH": str(no_git)})
    assert done.returncode == 2 and not (tmp_path / "kit").exists()
    assert done.stderr.splitlines() == ["gpt2kit.grading: cannot run git to list the kit's files (No such file or "
                                        "directory): run it from a git clone of the kit, installed with pip install -e"]


def test_every_declared_variant_has_its_host_function_here():
    """A variant leaves VARIANTS only in a kit without its milestone's specs or modules, never in this repository."""
    assert list(VARIANTS) == [v.name for v in DECLARED]


def test_the_replayer_gets_the_seed_on_its_pipe_and_answers_on_it(tmp_path):
    """The grader's side of the replayer's pipe, without a GPU: a worker that left no tapes gets no case replayed,
    and the counts of the technique's variant come back empty; the seed is on no command line."""
    scheme = scheme_for(2)
    command = replayer_command(tmp_path, scheme, scheme.item("tf32"))
    assert str(SEED) not in command and "-P" in command
    replayed = replay(scheme.item("tf32"), scheme, SEED, tmp_path)
    assert (replayed.frames, replayed.counts, replayed.crash) == ({}, {"matmul_tf32": ({}, {}, None)}, None)
