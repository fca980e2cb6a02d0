"""Runs one submission's variants for one grading item, in a process of its own.

    python -m grading.worker --submission DIR --weights FILE --item NAME --seed N --out DIR

The grader starts one worker per item, so a crash, a hang or a corrupted CUDA
context costs that item only. The worker never judges: for each variant of the item
it executes each case (reference.execution: the call recorded, then replayed on other
inputs; cuBLAS permitted for the cuBLAS variant only) and saves the Execution record
to --out/<variant>/; the grader judges that record against references it computes
itself, in its own process. For a variant with a technique, the worker also saves
what the evidence shows (reference.techniques: the compiled code of the kernels the
calls launched, or their cuBLAS calls) to --out/<variant>/technique.json: only here
are the submission's kernels loaded.

Inside the worker:
* `kernels` is the submission's own directory (kernel_runtime.loader), so
  `import kernels.x` in a submission finds the student's file, never the kit's;
* the oracle never enters: this program imports the case catalogue (reference.spec,
  reference.specs, reference.registry) and reference.execution only, and
  reference.cpu, reference.gold and reference.judging are fenced off, so importing
  them fails too;
* CuPy is watched (kernel_runtime.recording) before the submission is imported.
"""

from __future__ import annotations

import argparse
import json
import sys
import types
from pathlib import Path

from grading.items import load_scheme
from kernel_runtime import KitError, recording
from kernel_runtime.loader import use_kernels
from reference.execution import CUDA_CONTEXT_LOST, Execution, execute
from reference.registry import build, cases, host_function
from reference.techniques import missing_technique

TECHNIQUE_FILE = "technique.json"

FENCED = ("reference.cpu", "reference.gold", "reference.judging")


class OffLimits(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):  # tools that walk sys.modules (inspect, pickle) ask for these
            raise AttributeError(name)
        raise ImportError(f"{self.__name__} is the grader's reference: submissions may not use it")


def fence_references() -> None:
    """Make the oracle modules unimportable here (they are not loaded: nothing this program imports needs them)."""
    import reference

    for qualified in FENCED:
        if qualified in sys.modules:
            raise RuntimeError(f"{qualified} was imported into the worker")
        stub = OffLimits(qualified)
        sys.modules[qualified] = stub
        setattr(reference, qualified.rsplit(".", 1)[1], stub)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grading.worker")
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
            Execution(variant.function, None, error=str(err)).save(out)
            continue
        executions = []
        for case in cases(variant.function, args.seed):
            execution = execute(function, build(case), permit=variant.permit)
            execution.save(out)
            if execution.cuda_error:
                return CUDA_CONTEXT_LOST  # nothing later in this process can run
            executions.append(execution)
        if variant.technique:
            save_technique_evidence(out, variant.technique, executions)
    return 0


def save_technique_evidence(out: Path, technique: str, executions: list[Execution]) -> None:
    """What the calls show of `technique`: {"technique": name, "missing": why not, or null}."""
    try:
        missing = missing_technique(technique, executions)
    except KitError as err:  # its kernels do not compile for the course's GPU
        missing = f"cannot check for {technique}: {err}".splitlines()[0]
    (out / TECHNIQUE_FILE).write_text(json.dumps({"technique": technique, "missing": missing}) + "\n")


if __name__ == "__main__":
    sys.exit(main())
