"""Step-by-step check: your kernels and gold side by side through a whole forward pass.

    python -m gpt2kit.gpt2.step_check [--model M] [--kernels DIR] [--variant NAME ...] [--profile P]
                              [--backward] [--batch 4] [--tokens 64] [--seed 0]

Every host-function call of the forward pass runs twice on the same inputs: gold's into
the model's activations, yours into fresh NaN-filled copies. The two are compared
right away, and the model carries on with gold's numbers (check-and-swap), so one
wrong kernel is reported where it is and does not smear into every later step.
`--variant matmul_tf32` checks a milestone variant in its host function's place.
`--backward` checks a training step's calls (milestone 4): the forward pass, the loss,
and the backward pass, whose gradients added to start from gold's content.

How a step is judged is a precision profile (reference.precision): --profile, else
$KIT_PROFILE, else the variants' own (the loosest of theirs), else fp32
(reference.variants.resolve_profile).
* fp32 or tf32: every element within the rounding bound of its host function's spec
  for the step's own inputs, doubled since gold rounds too, as the kernel tests judge
  against gold. The column shows the worst error as a fraction of its bound.
* course: for every element, min(|error|, |error| / max(1e-3, |gold|)) <= 0.05, and
  the root-mean-square error <= 1e-3: the course's test_gpt2_kernels criterion, loose
  enough for any float32 summation order, tight enough for a forgotten bias or a
  missing mask.
"""

from __future__ import annotations

import dataclasses
import functools
import sys

import numpy as np

from gpt2kit.model_runtime.ops import parameters
from gpt2kit.kernel_runtime.commands import SEED, OneLineArgumentParser, run_command
from gpt2kit.kernel_runtime.device import exit_without_gpu
from gpt2kit.reference.judging import rounding_bounds
from gpt2kit.reference.numerics import element_errors, rms, worst_fraction
from gpt2kit.reference.precision import COURSE, COURSE_ELEMENT, COURSE_RMSE, Profile, course_errors
from gpt2kit.reference.registry import spec
from gpt2kit.reference.variants import add_profile_option, resolve_profile, variant_argument, variant_named


@functools.cache
def written_positions(function: str) -> tuple[list[int], list[int]]:
    """Where a host function's outputs, and the scratch it may write, sit among its arguments."""
    names, written = parameters(function), spec(function)
    return ([names.index(n) for n in written.outputs], [names.index(n) for n in written.scratch])


@functools.cache
def updated_positions(function: str) -> frozenset[int]:
    """Where the outputs a host function adds to (its spec's `updates`) sit among its arguments."""
    names = parameters(function)
    return frozenset(names.index(n) for n in spec(function).updates)


@dataclasses.dataclass
class Step:
    where: str
    function: str
    output: int
    max_error: float   # course: the largest min(abs, rel) error; fp32/tf32: the largest |error| / bound
    rmse: float
    judged_by: str = COURSE.name

    @property
    def passed(self) -> bool:
        if self.judged_by == COURSE.name:
            return self.max_error <= COURSE_ELEMENT and self.rmse <= COURSE_RMSE
        return self.max_error <= 1.0


def compare(candidate: np.ndarray, gold: np.ndarray) -> tuple[float, float]:
    """(largest per-element min(abs, rel) error, RMSE); NaN or inf anywhere is infinite."""
    scaled, rmse = course_errors(candidate, gold)
    return float(scaled.max(initial=0.0)), rmse


class StepChecker:
    """The model's observer (model.observer = checker): each call runs on gold, then on the candidate,
    judged under `profile` (the course's criterion, or fp32's or tf32's rounding bounds). `backend`
    is the model's: the candidate's outputs are made on its device, and read back through it."""

    def __init__(self, candidate, backend, profile: Profile):
        self.candidate, self.backend, self.profile = candidate, backend, profile
        self.steps: list[Step] = []

    def first_failure(self) -> Step | None:
        return next((s for s in self.steps if not s.passed), None)

    def __call__(self, step: str, layer: int | None, kernel, args: tuple) -> None:
        name = kernel.__name__
        outputs, scratch = (tuple(i for i in positions if args[i] is not None)  # None: an output left out (dbias)
                            for positions in written_positions(name))
        where = step if layer is None else f"layer {layer} {step}"
        mine, updated = list(args), updated_positions(name)
        for i in (*outputs, *scratch):  # an output the call adds to starts as gold's does; the others from NaN
            mine[i] = args[i].copy() if i in updated else self.backend.xp.full_like(args[i], np.nan)
        inputs = self._inputs(name, args) if self.profile.rounding_bounds else None
        kernel(*args)
        getattr(self.candidate, name)(*mine)
        got = {i: self.backend.to_host(mine[i]) for i in outputs}
        gold = {i: self.backend.to_host(args[i]) for i in outputs}
        if not self.profile.rounding_bounds:
            self.steps += [Step(where, name, i, *compare(got[i], gold[i])) for i in outputs]
            return
        names = parameters(name)
        expected = {names[i]: gold[i].astype(np.float64) for i in outputs}
        bounds = rounding_bounds(spec(name), inputs, expected, self.profile)
        for i in outputs:
            error = element_errors(got[i], expected[names[i]])
            self.steps.append(Step(where, name, i, worst_fraction(error, 2 * bounds[names[i]]), rms(error),
                                   self.profile.name))

    def _inputs(self, function: str, args: tuple) -> dict:
        """The call's array inputs on the host, the content of the outputs it adds to, and its integer sizes,
        by name, before it runs (an output written whole is not an input)."""
        names, function_spec = parameters(function), spec(function)
        read = set(names) - set(function_spec.written) | set(function_spec.updates)
        arrays = {n: self.backend.to_host(a) for n, a in zip(names, args)
                  if n in read and a is not None and hasattr(a, "shape")}  # token ids and targets too
        return arrays | {n: a for n, a in zip(names, args) if isinstance(a, (int, np.integer))}


def run(model, tokens: np.ndarray, candidate, profile: Profile) -> StepChecker:
    """One forward pass of `model` (on the gold backend) with every call checked against `candidate`
    under `profile`."""
    checker = StepChecker(candidate, model.backend, profile)
    model.observer = checker
    try:
        model.forward(tokens)
    finally:
        model.observer = None
    return checker


def run_training(model, tokens: np.ndarray, targets: np.ndarray, candidate, profile: Profile) -> StepChecker:
    """A training step's gradients on `model` (gold): the forward pass, the loss and the backward pass, every call
    checked against `candidate` under `profile`."""
    from gpt2kit.training.step import TrainingStep

    checker = StepChecker(candidate, model.backend, profile)
    step = TrainingStep(model, *tokens.shape)
    model.observer = checker
    try:
        step.compute_gradients(tokens, targets)
    finally:
        model.observer = None
    return checker


def main(argv=None) -> int:
    parser = OneLineArgumentParser(prog="python -m gpt2kit.gpt2.step_check", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="random", help="weights (default: random 124M)")
    parser.add_argument("--kernels", help="kernels/ directory to check (default: this repo's)")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME", type=variant_argument,
                        help="a milestone variant in its host function's place, e.g. matmul_tf32 (repeatable)")
    add_profile_option(parser.add_argument, "the steps are judged by")
    parser.add_argument("--backward", action="store_true",
                        help="check a training step: the forward pass, the loss and the backward pass (milestone 4)")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--seed", type=SEED, default=0, help="seed of the random token ids, from 0 to 2**31 - 1 "
                                                               "(default %(default)s)")
    args = parser.parse_args(argv)
    return run_command("gpt2kit.gpt2.step_check", lambda: check(args), error_status=2)


def check(args) -> int:
    from gpt2kit.model_runtime.backends import kernel_ops, make_backend, uses_flash
    from gpt2kit.model_runtime.families import check_sources, load_model

    profile = resolve_profile(args.profile, [variant_named(name) for name in args.variant])
    check_sources(args.model, args.kernels)
    exit_without_gpu("gpt2kit.gpt2.step_check")
    candidate = kernel_ops(args.kernels, tuple(args.variant))
    model = load_model(args.model, make_backend("gold"))
    model.flash_attention = uses_flash(tuple(args.variant))  # gold's attention step as the candidate's
    rng = np.random.default_rng(args.seed)
    text = rng.integers(0, model.config.vocab_size, (args.batch, args.tokens + 1), dtype=np.int32)
    print(f"judged under the {profile.name} profile", flush=True)
    if args.backward:
        checker = run_training(model, text[:, :-1], text[:, 1:], candidate, profile)
    else:
        checker = run(model, text[:, :-1], candidate, profile)
    error = "max err" if profile is COURSE else "err/bound"
    print(f"{'step':22s} {'function':18s} {'out':>3s} {error:>9s} {'rmse':>9s}")
    for s in checker.steps:
        print(f"{s.where:22s} {s.function:18s} {s.output:3d} {s.max_error:9.2e} {s.rmse:9.2e}"
              f"{'' if s.passed else '  FAIL'}")
    failure = checker.first_failure()
    if failure is None:
        print(f"all {len(checker.steps)} checked outputs pass")
        return 0
    print(f"first failing step: {failure.where} ({failure.function}, output argument {failure.output}): "
          f"{'max error' if profile is COURSE else 'worst error / bound'} {failure.max_error:.3g}, "
          f"rmse {failure.rmse:.3g}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
