"""The checking machinery itself, on the CPU.

* An honest float32 computation (reference.gold run on NumPy arrays) passes every
  case: the tolerances are not tighter than float32 allows.
* Answers that are wrong in the ways kernels go wrong fail: an element left
  unwritten, an input overwritten, an error just past the bound.
"""

import numpy as np
import pytest

from reference import checks, gold
from reference.checks import ALL_FUNCTIONS, FUNCTIONS, KERNELS, build, cases, run_case

ALL_CASES = [c for k in KERNELS for c in cases(k)]


@pytest.mark.parametrize("case", ALL_CASES, ids=lambda c: f"{c.kernel}-{c.id}")
def test_float32_implementation_passes(case):
    result = run_case(getattr(gold, ALL_FUNCTIONS[case.kernel]), case, device="cpu")
    assert result.passed, result.message
    assert result.worst_ratio <= 1


def gold_then(kernel, damage):
    """gold's host function for `kernel`, followed by `damage(args)`."""
    def function(*args):
        getattr(gold, FUNCTIONS[kernel])(*args)
        damage(args)
    return function


def test_unwritten_element_fails():
    def forget_last(args):
        args[0].reshape(-1)[-1] = np.nan  # as if the kernel never wrote it: the poison shows
    result = run_case(gold_then("layernorm", forget_last), cases("layernorm")[1], device="cpu")
    assert not result.passed and "NaN (never written, or computed as NaN)" in result.message


def test_modified_input_fails():
    def scribble(args):
        args[1].reshape(-1)[0] += 1  # inp1
    result = run_case(gold_then("residual", scribble), cases("residual")[2], device="cpu")
    assert not result.passed and "input inp1 was modified" in result.message


@pytest.mark.parametrize("kernel", ["matmul", "layernorm", "attention", "gelu", "softmax"])
def test_error_past_the_bound_fails(kernel):
    case = cases(kernel)[1]
    problem = build(case)
    expected = checks.expected_outputs(problem)
    bounds = problem.error_bound({k: v.astype(np.float64) for k, v in problem.inputs().items()}, expected)
    name = problem.outputs[0]
    worst = np.unravel_index(np.argmax(np.abs(expected[name])), expected[name].shape)

    def nudge(args):
        position = list(problem.args).index(name)
        args[position][worst] = expected[name][worst] + 3 * bounds[name][worst] + 1e-6 * abs(expected[name][worst])
    result = run_case(gold_then(kernel, nudge), case, device="cpu")
    assert not result.passed, f"an error of 3x the bound passed for {kernel}"


def test_case_ids_carry_their_seed_and_seeds_differ():
    ids = [c.id for k in KERNELS for c in cases(k)]
    assert len(set(ids)) == len(ids)
    assert all("seed" in i for i in ids)
    assert cases("gelu", base_seed=1)[0].seed != cases("gelu", base_seed=2)[0].seed


def test_same_seed_same_inputs_other_seed_other_inputs():
    a, b = build(cases("matmul", 5)[1]), build(cases("matmul", 5)[1])
    c = build(cases("matmul", 6)[1])
    assert np.array_equal(a.args["inp"], b.args["inp"])
    assert not np.array_equal(a.args["inp"], c.args["inp"])
