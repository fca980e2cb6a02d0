"""Step-by-step check: your kernels and gold side by side through a whole forward pass.

    python -m gpt2.step_check [--model M] [--kernels DIR] [--batch 4] [--tokens 64] [--seed 0]

Every host-function call of the forward pass runs twice on the same inputs: gold's into
the model's activations, yours into fresh NaN-filled copies. The two are compared
right away, and the model carries on with gold's numbers (check-and-swap), so one
wrong kernel is reported where it is and does not smear into every later step.

A step passes when, for every element, min(|error|, |error| / max(1e-3, |gold|)) <=
0.05, and the root-mean-square error is <= 1e-3: the course's test_gpt2_kernels
criterion (reference.precision's `course` profile), loose enough for any float32
summation order, tight enough for a forgotten bias or a missing mask.
"""

from __future__ import annotations

import dataclasses
import functools
import sys

import numpy as np

from gpt2.ops import parameters
from kernel_runtime.commands import OneLineArgumentParser, run_command
from kernel_runtime.device import exit_without_gpu
from reference.precision import COURSE_ELEMENT, COURSE_RMSE, course_errors
from reference.registry import spec


@functools.cache
def written_positions(function: str) -> tuple[list[int], list[int]]:
    """Where a host function's outputs, and the scratch it may write, sit among its arguments."""
    names, written = parameters(function), spec(function)
    return ([names.index(n) for n in written.outputs], [names.index(n) for n in written.scratch])


@dataclasses.dataclass
class Step:
    where: str
    function: str
    output: int
    max_error: float
    rmse: float

    @property
    def passed(self) -> bool:
        return self.max_error <= COURSE_ELEMENT and self.rmse <= COURSE_RMSE


def compare(candidate: np.ndarray, gold: np.ndarray) -> tuple[float, float]:
    """(largest per-element min(abs, rel) error, RMSE); NaN or inf anywhere is infinite."""
    scaled, rmse = course_errors(candidate, gold)
    return float(scaled.max(initial=0.0)), rmse


class StepChecker:
    """The model's observer (model.observer = checker): each call runs on gold, then on the candidate."""

    def __init__(self, candidate):
        self.candidate = candidate
        self.steps: list[Step] = []

    def first_failure(self) -> Step | None:
        return next((s for s in self.steps if not s.passed), None)

    def __call__(self, step: str, layer: int | None, kernel, args: tuple) -> None:
        import cupy

        name = kernel.__name__
        outputs, scratch = written_positions(name)
        where = step if layer is None else f"layer {layer} {step}"
        mine = list(args)
        for i in outputs + scratch:
            mine[i] = cupy.full_like(args[i], np.nan)
        kernel(*args)
        getattr(self.candidate, name)(*mine)
        for i in outputs:
            self.steps.append(Step(where, name, i, *compare(cupy.asnumpy(mine[i]), cupy.asnumpy(args[i]))))


def run(model, tokens: np.ndarray, candidate) -> StepChecker:
    """One forward pass of `model` (on the gold backend) with every call checked against `candidate`."""
    checker = StepChecker(candidate)
    model.observer = checker
    try:
        model.forward(tokens)
    finally:
        model.observer = None
    return checker


def main(argv=None) -> int:
    parser = OneLineArgumentParser(prog="python -m gpt2.step_check", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="random", help="weights (default: random 124M)")
    parser.add_argument("--kernels", help="kernels/ directory to check (default: this repo's)")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0, help="seed of the random token ids")
    args = parser.parse_args(argv)
    exit_without_gpu("gpt2.step_check")
    return run_command("gpt2.step_check", lambda: check(args), error_status=2)


def check(args) -> int:
    from gpt2.backends import kernel_ops
    from gpt2.model import GPT2

    candidate = kernel_ops(args.kernels)
    model = GPT2.from_pretrained(args.model, backend="gold")
    rng = np.random.default_rng(args.seed)
    tokens = rng.integers(0, model.config.vocab_size, (args.batch, args.tokens), dtype=np.int32)
    checker = run(model, tokens, candidate)
    print(f"{'step':22s} {'function':18s} {'out':>3s} {'max err':>9s} {'rmse':>9s}")
    for s in checker.steps:
        print(f"{s.where:22s} {s.function:18s} {s.output:3d} {s.max_error:9.2e} {s.rmse:9.2e}"
              f"{'' if s.passed else '  FAIL'}")
    failure = checker.first_failure()
    if failure is None:
        print(f"all {len(checker.steps)} checked outputs pass")
        return 0
    print(f"first failing step: {failure.where} ({failure.function}, output argument {failure.output}): "
          f"max error {failure.max_error:.3g}, rmse {failure.rmse:.3g}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
