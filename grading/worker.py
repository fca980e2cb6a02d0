"""Runs one submission's host functions for one grading item, in a process of its own.

    python -m grading.worker --submission DIR --item NAME --seed N --out DIR

The grader starts one worker per item, so a crash, a hang or a corrupted CUDA
context costs that item only. The worker never judges: it runs each case and
writes what the call left behind (outputs, inputs afterwards, the number of kernel
launches the submission made, any error) to --out, and the grader compares that
with references it computes itself, in its own process.

Inside the worker:
* `kernels` is the submission's own directory, so `import kernels.x` in a submission
  finds the student's file, never the kit's solution;
* reference.cpu and reference.gold are replaced by modules that refuse to work;
* cupy.RawKernel and cupy.RawModule are subclasses that count launches, so a call
  that launched no kernel of its own is visible (its output came from library
  operations such as cupy.matmul, cupy.exp or NumPy).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import types
from pathlib import Path

import numpy as np

from reference.checks import Execution

LAUNCHES = [0]
CUDA_CONTEXT_LOST = 3  # exit status: a CUDA error stopped the worker; its records say which


def is_cuda_error(message: str | None) -> bool:
    """Whether an error message is CUDA's (a sticky error: the process's context is gone)."""
    return message is not None and ("cudaError" in message or "CUDA_ERROR" in message)


def save_execution(path: Path, execution: Execution) -> None:
    """A case's outputs and its inputs after the call, as one .npz the grader reads back."""
    np.savez(path, **{f"out_{k}": v for k, v in execution.outputs.items()},
             **{f"in_{k}": v for k, v in execution.inputs_after.items()})


def load_execution(path: Path) -> Execution:
    with np.load(path) as saved:
        return Execution({k[4:]: saved[k] for k in saved.files if k.startswith("out_")},
                         {k[3:]: saved[k] for k in saved.files if k.startswith("in_")})


def install_launch_counter() -> None:
    import cupy

    class CountingRawKernel(cupy.RawKernel):
        def __call__(self, *args, **kwargs):
            LAUNCHES[0] += 1
            return super().__call__(*args, **kwargs)

    class CountedFunction:
        def __init__(self, kernel):
            self._kernel = kernel

        def __call__(self, *args, **kwargs):
            LAUNCHES[0] += 1
            return self._kernel(*args, **kwargs)

        def __getattr__(self, name):
            return getattr(self._kernel, name)

    class CountingRawModule(cupy.RawModule):
        def get_function(self, name):
            return CountedFunction(super().get_function(name))

    cupy.RawKernel, cupy.RawModule = CountingRawKernel, CountingRawModule


class OffLimits(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):  # tools that walk sys.modules (inspect, pickle) ask for these
            raise AttributeError(name)
        raise ImportError(f"{self.__name__} is the grader's reference: submissions may not use it")


def fence_references() -> None:
    import reference

    for name in ("cpu", "gold"):
        stub = OffLimits(f"reference.{name}")
        sys.modules[f"reference.{name}"] = stub
        setattr(reference, name, stub)


def import_submission(submission: Path) -> types.ModuleType:
    """The submission's kernels/ directory, importable as the package `kernels`."""
    directory = submission / "kernels" if (submission / "kernels").is_dir() else submission
    package = types.ModuleType("kernels")
    package.__path__ = [str(directory)]
    sys.modules["kernels"] = package
    return package


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grading.worker")
    parser.add_argument("--submission", required=True, type=Path)
    parser.add_argument("--item", required=True)
    parser.add_argument("--seed", required=True, type=int)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)

    from gpt2.cuda import module_of
    from grading.items import load_scheme
    from reference.checks import FUNCTIONS, build, cases, execute

    item = load_scheme().item(args.item)
    install_launch_counter()
    fence_references()
    import_submission(args.submission)
    records = args.out / "records.jsonl"
    with open(records, "w") as log:
        for kernel in item.functions:
            module_name = module_of(FUNCTIONS[kernel])
            try:
                function = getattr(importlib.import_module(f"kernels.{module_name}"), FUNCTIONS[kernel])
            except Exception as err:  # a missing file, a syntax error, a missing function
                log.write(json.dumps({"kernel": kernel, "error": f"cannot load kernels/{module_name}.py: "
                                      f"{type(err).__name__}: {err}"}) + "\n")
                continue
            for case in cases(kernel, args.seed):
                problem = build(case)
                before = LAUNCHES[0]
                execution = execute(function, problem)
                record = {"kernel": kernel, "case": case.id, "launches": LAUNCHES[0] - before,
                          "error": execution.error}
                if execution.error is None:
                    save_execution(args.out / f"{case.id}.npz", execution)
                log.write(json.dumps(record) + "\n")
                log.flush()
                if is_cuda_error(execution.error):
                    return CUDA_CONTEXT_LOST  # nothing later in this process can run
    return 0


if __name__ == "__main__":
    sys.exit(main())
