"""Judging an execution: the reference answer, each output's error bound, the comparison.

This is the half of the checks a submission's process never holds: the float64
oracle (reference.cpu) and gold (reference.gold) are used here only, and the grader
judges in its own process what its worker recorded.

A call passes when it launched kernels of its own, had nothing refused, left its
inputs as they were, wrote every output element within its bound (NaN never is, so
an element it never wrote fails), and, replayed from its tape on the case's other
inputs, wrote those outputs within their bounds too. Against gold the bounds double,
since both sides carry float32 rounding.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

import numpy as np

from gpt2kit.reference import cpu
from gpt2kit.reference.execution import Execution, call_arguments, execute, starting_output
from gpt2kit.reference.numerics import TINY, element_errors, worst_fraction
from gpt2kit.reference.precision import FP32, Profile, course_failures
from gpt2kit.reference.registry import build
from gpt2kit.reference.spec import Case, Problem, Spec


@dataclasses.dataclass
class Result:
    case: Case
    passed: bool
    message: str
    max_abs_error: float = math.nan
    max_rel_error: float = math.nan
    worst_ratio: float = math.nan   # largest |error| / allowed; <= 1 passes


def expected_outputs(problem: Problem, against: str = "numpy") -> dict:
    """The reference answer as float64 host arrays (read-only): reference.cpu's, or gold's on the GPU; computed
    once per problem."""
    if against not in problem.references:
        outputs = problem.references[against] = _reference_outputs(problem, against)
        for array in outputs.values():
            array.flags.writeable = False
    return problem.references[against]


def _reference_outputs(problem: Problem, against: str) -> dict:
    written = problem.spec.written
    if against == "numpy":
        args = {k: (starting_output(problem, k, v, np, np.float64) if k in written else v)
                for k, v in problem.args.items()}
        getattr(cpu, problem.spec.function)(*args.values())
        return {k: args[k] for k in problem.outputs}
    import cupy

    from gpt2kit.reference import gold

    args = call_arguments(problem, cupy)  # exactly what the call under test gets
    getattr(gold, problem.spec.function)(*args.values())
    return {k: cupy.asnumpy(args[k]).astype(np.float64) for k in problem.outputs}


def allowed_errors(problem: Problem, expected: dict, profile: Profile = FP32) -> dict:
    """Each output element's allowed |error|: the rounding of a correct implementation under `profile`. Its
    fp32 part is computed once per problem and reference (read-only); a profile adds to it."""
    key = id(expected)  # the entry holds `expected`, so no other object can come to have its id
    if key not in problem.fp32_bounds:
        sizes = {k: v for k, v in problem.args.items() if isinstance(v, (int, np.integer))}
        before = {name: problem.arguments.initial[name] for name in problem.outputs
                  if name in problem.spec.updates}  # what it adds to
        inputs = _in_float64(problem.inputs() | before | sizes)
        bounds = problem.spec.error_bound(inputs, expected)
        for array in (*inputs.values(), *bounds.values()):
            if isinstance(array, np.ndarray):
                array.flags.writeable = False
        problem.fp32_bounds[key] = (expected, inputs, bounds)
    _, inputs, bounds = problem.fp32_bounds[key]
    return _under_profile(problem.spec, inputs, bounds, profile)


def rounding_bounds(spec: Spec, inputs: dict, expected: dict, profile: Profile = FP32) -> dict:
    """The allowed |error| of each element of `spec`'s outputs, for these inputs (name -> host array, or an
    integer size such as a window) and expected outputs (name -> float64 host array), under `profile`."""
    inputs = _in_float64(inputs)
    return _under_profile(spec, inputs, spec.error_bound(inputs, expected), profile)


def _in_float64(inputs: dict) -> dict:
    return {k: v.astype(np.float64) if isinstance(v, np.ndarray) else v for k, v in inputs.items()}


def _under_profile(spec: Spec, inputs: dict, fp32_bounds: dict, profile: Profile) -> dict:
    """fp32's bounds widened by what `profile` allows more (a new dict: `fp32_bounds` is left as it is)."""
    bounds = dict(fp32_bounds)
    if profile.product_input_rounding and spec.products is not None:
        for name, magnitude in spec.products(inputs).items():
            bounds[name] = bounds[name] + profile.extra_product_error(magnitude)
    return bounds


def judge(problem: Problem, execution: Execution, against: str = "numpy", profile: Profile = FP32) -> Result:
    """Whether `execution` (a call on `problem` and its replay) is right under `profile`, and if not, why."""
    case = problem.case
    if execution.refused is not None:
        return Result(case, False, f"refused: {execution.refused} (only the host function's own kernels may "
                                   f"compute; allocating, memset and host-to-device copies are allowed)")
    if execution.error is not None:
        return Result(case, False, execution.error)
    if execution.launches == 0 and not execution.library_calls:
        return Result(case, False, "no custom kernel launched: the output came from library operations")
    missing = [k for k in problem.outputs if k not in (execution.outputs or {})]
    if missing:
        return Result(case, False, f"outputs missing from the record: {', '.join(missing)}")
    in_place = set(problem.arguments.same_array.values())
    for name, original in problem.inputs().items():
        if name not in in_place and not _unchanged(execution.inputs_after.get(name), original):
            return Result(case, False, f"input {name} was modified by the call")
    result = _compare_with_reference(problem, execution.outputs, against, profile)
    if not result.passed:
        return result
    if execution.replay_error is not None:
        return Result(case, False, f"replaying its kernel launches on other inputs failed: {execution.replay_error}")
    replayed = _compare_with_reference(build(case.other_inputs()), execution.replay_outputs or {}, against, profile)
    if not replayed.passed:
        return dataclasses.replace(result, passed=False, message=(
            f"wrong when its recorded kernel launches alone are replayed on other inputs (computed outside "
            f"its own kernels?): {replayed.message}"))
    return result


def run_case(function: Callable, case: Case, against: str = "numpy", device: str = "gpu",
             profile: Profile = FP32, permit: tuple[str, ...] = ()) -> Result:
    """Call `function` (a host function with the kit's signature) on `case` and judge it under `profile`.

    device="cpu" passes NumPy arrays instead of CuPy ones: for checking the checks
    themselves with NumPy implementations on a machine without a GPU.
    """
    problem = build(case)
    return judge(problem, execute(function, problem, device, permit), against, profile)


def _compare_with_reference(problem: Problem, actual: dict, against: str, profile: Profile) -> Result:
    if not profile.rounding_bounds:
        return compare_as_the_course(problem.case, actual, expected_outputs(problem, against))
    reference = expected_outputs(problem, "numpy")
    bounds = allowed_errors(problem, reference, profile)
    if against == "gold":
        reference = expected_outputs(problem, "gold")
        bounds = {k: 2 * v for k, v in bounds.items()}
    return compare(problem.case, actual, reference, bounds)


def compare_as_the_course(case: Case, actual: dict, expected: dict) -> Result:
    """Every output under the course's criterion (reference.precision.COURSE)."""
    failures, max_abs = [], 0.0
    for name, want in expected.items():
        unusable = _unusable(name, actual, want)
        if unusable:
            failures.append(unusable)
            continue
        got = actual[name].astype(np.float64)
        max_abs = max(max_abs, float(np.abs(got - want).max(initial=0.0)))
        if actual[name].dtype.kind in "iu":  # token ids, rows: a nearby id is another answer, never a rounding
            wrong = int((got != want).sum())
            failures += [f"{name}: {wrong} of {want.size} integers differ"] if wrong else []
        else:
            failures += course_failures(name, got, want)
    return Result(case, not failures, "; ".join(failures) if failures else "ok", max_abs)


def compare(case: Case, actual: dict, expected: dict, bounds: dict) -> Result:
    """Every element of every output against its expected value, within its bound."""
    failures, max_abs, max_rel, worst_ratio = [], 0.0, 0.0, 0.0
    for name in expected:
        unusable = _unusable(name, actual, expected[name])
        if unusable:
            failures.append(unusable)
            continue
        got, want = actual[name], expected[name]
        allowed = np.broadcast_to(bounds[name], want.shape)
        error = element_errors(got, want)
        bad = ~(error <= allowed)
        max_abs = max(max_abs, float(error.max()))
        magnitude = np.abs(want).astype(np.float64, copy=False)  # token ids are integers
        significant = magnitude >= 1e-3 * max(float(magnitude.max()), TINY)
        relative = np.divide(error, magnitude, out=magnitude, where=significant)  # in place: outputs can be large
        max_rel = max(max_rel, float(relative.max(initial=0.0, where=significant)))
        worst_ratio = max(worst_ratio, worst_fraction(error, allowed))
        if bad.any():
            where = np.unravel_index(int(np.argmax(np.where(bad, error / np.maximum(allowed, TINY), -1))), want.shape)
            unwritten = int(np.isnan(got).sum())
            failures.append(
                f"{name}: {int(bad.sum())} of {want.size} elements wrong; worst at {tuple(int(i) for i in where)}: "
                f"got {float(got[where]):.7g}, expected {want[where]:.7g} (allowed error {allowed[where]:.2g})"
                + (f"; {unwritten} NaN (never written, or computed as NaN)" if unwritten else ""))
    message = "; ".join(failures) if failures else "ok"
    return Result(case, not failures, message, max_abs, max_rel, worst_ratio)


def _unchanged(after, original: np.ndarray) -> bool:
    """Whether `after` holds `original` bit for bit (a write of an equal value, -0.0 over 0.0, changes it)."""
    if not isinstance(after, np.ndarray) or (after.shape, after.dtype) != (original.shape, original.dtype):
        return False
    return np.array_equal(np.ascontiguousarray(after).view(np.uint8), np.ascontiguousarray(original).view(np.uint8))


def _unusable(name: str, actual: dict, want: np.ndarray) -> str | None:
    """Why output `name` cannot be compared at all (missing, or of another shape), or None."""
    if name not in actual:
        return f"{name}: missing"
    if actual[name].shape != want.shape:
        return f"{name}: shape {actual[name].shape}, expected {want.shape}"
    return None
