"""The precision profiles mean something, shown on the CPU with NumPy matmuls: an
honest TF32 matmul (inputs kept to TF32's 10-bit mantissa, rounded or cut, products
summed in float32) passes every tf32 case and fails fp32's; an error past the tf32
bound fails it. The course's criterion lets a wrong element through. (That float32
passes every profile, the course's criterion aside on extreme values, is
tests/reference/test_checks.py's.)"""

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gpt2kit.kernel_runtime.device import gpu_unavailable_reason
from gpt2kit.reference import gold
from gpt2kit.reference.execution import execute
from gpt2kit.reference.judging import judge, run_case
from gpt2kit.reference.precision import COURSE, FP32, TF32, ProfileError, course_failures, profile_named, to_tf32
from gpt2kit.reference.registry import build, cases
from gpt2kit.reference.variants import VARIANTS, Variant, resolve_profile

ROOT = Path(__file__).parents[2]
MATMUL_CASES = cases("matmul_forward")


def tf32_matmul(rounding: str, damage: float = 0.0):
    """matmul_forward as TF32 tensor cores compute it; `damage` adds that many ulps of TF32 to each element."""
    def matmul_forward(out, inp, weight, bias, B, T, C, OC):
        a, w = to_tf32(inp.reshape(-1, C), rounding), to_tf32(weight, rounding)
        result = (a @ w.T).astype(np.float32)  # float32 sums, as the tensor cores accumulate
        if bias is not None:
            result += bias
        result += np.float32(damage * 2.0**-10) * np.abs(a) @ np.abs(w).T
        out[...] = result.reshape(out.shape)
    return matmul_forward


@pytest.mark.parametrize("rounding", ["nearest", "cut"])
@pytest.mark.parametrize("case", MATMUL_CASES, ids=lambda c: c.id)
def test_an_honest_tf32_matmul_passes_tf32_and_fails_fp32(case, rounding):
    problem = build(case)
    execution = execute(tf32_matmul(rounding), problem, device="cpu")
    under_tf32 = judge(problem, execution, profile=TF32)
    assert under_tf32.passed, under_tf32.message
    under_fp32 = judge(problem, execution, profile=FP32)
    assert not under_fp32.passed, f"a TF32 matmul passed fp32 (worst error {under_fp32.worst_ratio:.2f}x its bound)"


@pytest.mark.parametrize("case", MATMUL_CASES[:4], ids=lambda c: c.id)
def test_tf32_past_its_bound_fails(case):
    """Each element off by 3 of TF32's ulps of every product on top: past 2 * 2^-10, the bound's allowance."""
    assert not run_case(tf32_matmul("cut", damage=3.0), case, device="cpu", profile=TF32).passed


def test_the_course_criterion_lets_through_a_wrong_element():
    """One GELU output off by 0.04 passes the course's criterion (0.04 <= 0.05, and the RMSE
    of one such error among thousands is under 1e-3); every rounding bound rejects it."""
    case = max(cases("gelu_forward"), key=lambda c: c.size["N"])

    def one_element_off(out, inp, N):
        gold.gelu_forward(out, inp, N)
        out.reshape(-1)[N // 2] += np.float32(0.04)
    assert run_case(one_element_off, case, device="cpu", profile=COURSE).passed
    assert not run_case(one_element_off, case, device="cpu", profile=TF32).passed


def test_the_course_criterion_fails_large_errors_and_unwritten_elements():
    case = MATMUL_CASES[3]

    def ten_percent_off(out, *args):
        gold.matmul_forward(out, *args)
        out *= np.float32(1.1)

    def one_left_unwritten(out, *args):
        gold.matmul_forward(out, *args)
        out.reshape(-1)[0] = np.nan
    for wrong, message in ((ten_percent_off, "elements off by more than 0.05"),
                           (one_left_unwritten, "1 of 2313 elements off by more than 0.05")):
        result = run_case(wrong, case, device="cpu", profile=COURSE)
        assert not result.passed and message in result.message, result.message


def test_profiles_are_named():
    assert profile_named("tf32") is TF32
    with pytest.raises(ProfileError, match="no precision profile 'bf16'; the profiles are fp32, tf32, course"):
        profile_named("bf16")


TF32_VARIANT = Variant("a_tf32_matmul", "matmul_forward", "matmul", "tf32", None, milestone=2)
FP32_VARIANT = Variant("a_fp32_matmul", "matmul_forward", "matmul", "fp32", None, milestone=2)


@pytest.mark.parametrize("name, environ, variants, expected", [
    ("course", {"KIT_PROFILE": "tf32"}, [TF32_VARIANT], COURSE),  # an explicit flag wins
    (None, {"KIT_PROFILE": "course"}, [TF32_VARIANT], COURSE),    # then $KIT_PROFILE
    (None, {"KIT_PROFILE": ""}, [FP32_VARIANT, TF32_VARIANT], TF32),  # then the variants' own: the loosest
    (None, {}, [FP32_VARIANT], FP32),
    (None, {}, [], FP32),                                          # then fp32
], ids=["flag", "environment", "variants", "fp32-variant", "nothing"])
def test_one_rule_resolves_the_profile(name, environ, variants, expected):
    assert resolve_profile(name, variants, environ) is expected


@pytest.mark.parametrize("name, environ, source", [("bf16", {"KIT_PROFILE": "tf32"}, "--profile"),
                                                   (None, {"KIT_PROFILE": "bf16"}, "$KIT_PROFILE")])
def test_a_bad_profile_name_says_where_it_came_from(name, environ, source):
    with pytest.raises(ProfileError, match=f"^{re.escape(source)}: no precision profile 'bf16'; the profiles are "
                                           f"fp32, tf32, course$"):
        resolve_profile(name, [TF32_VARIANT], environ)


def run_module(*args: str, profile_variable: str | None = None) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "KIT_PROFILE"}
    if profile_variable is not None:
        environ["KIT_PROFILE"] = profile_variable
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, cwd=ROOT, env=environ,
                          timeout=120)


@pytest.mark.parametrize("flags, variable, source", [(["--profile", "bf16"], None, "--profile"),
                                                     ([], "bf16", "$KIT_PROFILE")])
def test_pytest_names_a_profile_that_does_not_exist(flags, variable, source):
    done = run_module("pytest", "-q", "-p", "no:cacheprovider", "tests/kernels/test_kernels.py", *flags,
                      profile_variable=variable)
    assert done.returncode == 4
    assert f"ERROR: {source}: no precision profile 'bf16'; the profiles are fp32, tf32, course" in done.stderr


@pytest.mark.parametrize("flags, variable, expected", [([], None, "fp32"), ([], "course", "course"),
                                                       (["--profile", "tf32"], "course", "tf32")])
def test_pytest_reports_the_profile_it_resolved(flags, variable, expected):
    done = run_module("pytest", "-p", "no:cacheprovider", "--collect-only", "tests/reference/test_precision.py",
                      *flags, profile_variable=variable)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    assert f"precision profile of the host functions' checks: {expected}\n" in done.stdout


@pytest.mark.parametrize("command", ["gpt2kit.gpt2.step_check", "gpt2kit.benchmarks.kernels"])
@pytest.mark.parametrize("flags, variable, source", [(["--profile", "bf16"], "tf32", "--profile"),
                                                     ([], "bf16", "$KIT_PROFILE")])
def test_commands_name_a_profile_that_does_not_exist_in_one_line(command, flags, variable, source):
    done = run_module(command, *flags, profile_variable=variable)
    assert (done.returncode, done.stderr.splitlines()) == (
        2, [f"{command}: {source}: no precision profile 'bf16'; the profiles are fp32, tf32, course"])


@pytest.mark.skipif(gpu_unavailable_reason() is None, reason="on a GPU the step check would run")
def test_the_step_check_s_flag_wins_over_the_environment():
    done = run_module("gpt2kit.gpt2.step_check", "--profile", "tf32", profile_variable="bf16")
    assert (done.returncode, done.stderr.splitlines()) == (
        2, [f"gpt2kit.gpt2.step_check: cannot run kernels: {gpu_unavailable_reason()}"])


def test_a_benchmark_row_is_timed_under_the_profile_the_rule_gives(monkeypatch):
    from gpt2kit.benchmarks.kernels import workloads

    def profiles(*args):
        return {row[0]: row[3] for row in workloads("matmul", *args)}

    monkeypatch.delenv("KIT_PROFILE", raising=False)
    assert profiles()["matmul_forward"] is FP32 and profiles("tf32")["matmul_forward"] is TF32
    monkeypatch.setenv("KIT_PROFILE", "course")
    assert set(profiles().values()) == {COURSE} and set(profiles("fp32").values()) == {FP32}
    if "matmul_tf32" in VARIANTS:
        monkeypatch.delenv("KIT_PROFILE")
        assert profiles()["matmul_tf32"] is TF32 and profiles("fp32")["matmul_tf32"] is FP32


@pytest.mark.parametrize("seed", [0, 1], ids=lambda s: f"seed{s}")
def test_the_step_check_judges_by_the_course_criterion(seed):
    """A step passes exactly when the course's criterion finds nothing (NaN is infinitely wrong)."""
    from gpt2kit.gpt2.step_check import Step, compare

    rng = np.random.default_rng(seed)
    gold_values = rng.normal(0, 3, 500)
    for damage in (0.0, 1e-5, 0.03, 0.07):
        candidate = gold_values + damage * rng.normal(0, 1, 500)
        step = Step("layer 0 fc", "matmul_forward", 0, *compare(candidate, gold_values))
        assert step.passed == (course_failures("out", candidate, gold_values) == [])
    assert compare(np.where(np.arange(500) == 7, np.nan, gold_values), gold_values) == (np.inf, np.inf)
