"""Records one submission's calls for one grading item, in a process of its own.

    python -m gpt2kit.grading.worker --submission DIR --weights FILE --item NAME --seed N --out DIR

The grader starts one worker per item, so a crash, a hang or a corrupted CUDA
context costs that item only. The worker only records: for each variant of the item
it calls the submission's host function on each case, under a recording
(reference.execution.record_call; cuBLAS permitted for the cuBLAS variant only), and
saves each call's tape (kernel_runtime.tape), error and refusal to
--out/<variant>/records.jsonl. Nothing else it could write counts: the grader's
replayer (grading.replayer) replays the tapes on inputs drawn from a seed this
process never sees, and only those replayed outputs are judged. The seed given here
draws the inputs the calls are recorded on; it is no secret.

Inside the worker:
* `gpt2kit.kernels` is the submission's own directory (kernel_runtime.loader), so
  `import gpt2kit.kernels.x` in a submission finds the student's file, never the kit's;
* the oracle is fenced off (reference.cpu, reference.gold and reference.judging
  fail to import), so a mistake that reaches for it fails plainly;
* CuPy is watched (kernel_runtime.recording) before the submission is imported.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import types
from pathlib import Path

from gpt2kit.grading.items import load_scheme
from gpt2kit.kernel_runtime import KitError, recording
from gpt2kit.kernel_runtime.loader import use_kernels
from gpt2kit.reference.execution import CUDA_CONTEXT_LOST, Execution, record_call, save_records
from gpt2kit.reference.registry import build, cases, host_function

FENCED = ("gpt2kit.reference.cpu", "gpt2kit.reference.gold", "gpt2kit.reference.judging")


class OffLimits(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):  # tools that walk sys.modules (inspect, pickle) ask for these
            raise AttributeError(name)
        raise ImportError(f"{self.__name__} is the grader's reference: submissions may not use it")


def fence_references() -> None:
    """Make the oracle modules unimportable here (they are not loaded: nothing this program imports needs them)."""
    from gpt2kit import reference

    for qualified in FENCED:
        if qualified in sys.modules:
            raise RuntimeError(f"{qualified} was imported into the worker")
        stub = OffLimits(qualified)
        sys.modules[qualified] = stub
        setattr(reference, qualified.rsplit(".", 1)[1], stub)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpt2kit.grading.worker")
    parser.add_argument("--submission", required=True, type=Path)
    parser.add_argument("--weights", required=True, type=Path)
    parser.add_argument("--item", required=True)
    parser.add_argument("--seed", required=True, type=int)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)

    item = load_scheme(args.weights).item(args.item)
    fence_references()
    recording.install()
    use_kernels(args.submission)
    for variant in item.variants:
        out = args.out / variant.name
        out.mkdir(parents=True, exist_ok=True)
        try:
            function = host_function(variant.function, variant.module)
        except KitError as err:  # a missing file, a syntax error, a missing function
            save_records([Execution(variant.function, None, error=str(err))], out)
            continue
        for case in cases(variant.function, args.seed):
            execution = record_call(function, build(case), permit=variant.permit)
            save_records([dataclasses.replace(execution, case_id=case.shape_id)], out)
            if execution.cuda_error:
                return CUDA_CONTEXT_LOST  # nothing later in this process can run
    return 0


if __name__ == "__main__":
    sys.exit(main())
