"""Replays a worker's tapes on inputs only the grader knows: the outputs that are judged.

    python -m gpt2kit.grading.replayer --records DIR --weights FILE --item NAME     (the seed comes on stdin)

The grader (grading.grade) starts it after the item's worker has ended, in a fresh
directory of its own, with Python's -P and -s (neither the working directory nor the
user's site-packages on its path), CuPy's kernel cache kept in memory and the
driver's JIT cache off, so that nothing a submission left on disk is read back as
code. It never imports the submission's Python, nor anything under its directory:
it reads the worker's records (reference.execution.load_records: every tape checked
as it is read) and compiles each tape's programs itself (kernel_runtime.replay).

Its first line of standard input is `{"seed": N}`: the secret base seed of the
inputs, never on a command line, in an environment or in a file. For every case of
every variant of the item it replays the case's tape on the case's inputs for that
seed and on the case's other inputs. Every program is built by the one trusted build
(kernel_runtime.hermetic: the same bytes and options whatever looks at them), and a
tape's library steps replay only where the variant permits their library. For a
variant whose technique shows in compiled code, the first of those replays runs the
programs instrumented (kernel_runtime.replay.count_instructions): what the kernels
execute is counted on the very replay whose outputs are judged, and the launched
kernels' instruction classes are read from the same PTX.

It answers on its standard output, through a grading.channel.Channel (so that nothing
it or CuPy prints can break a message):
    "case"    {variant, case: shape id, replay_error}, arrays out_*, in_* and replay_*
    "counts"  {variant, counts: {kernel: {class: count}}, static: {kernel: [class]}, error},
              per variant with a technique
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpt2kit.grading.channel import worker_channel
from gpt2kit.grading.items import load_scheme
from gpt2kit.kernel_runtime.replay import device_arch
from gpt2kit.reference.execution import CUDA_CONTEXT_LOST, describe, is_cuda_error, load_records, replay_on
from gpt2kit.reference.registry import build, cases
from gpt2kit.reference.techniques import INSTRUCTION_CLASSES, TECHNIQUES, add_counts, static_classes

ARRAYS = {"out_": 0, "in_": 1, "replay_": 2}  # prefix of each array -> which of the three dicts it is


def split_arrays(arrays: dict) -> tuple[dict, dict, dict]:
    """A case message's arrays as (outputs, inputs after, replay outputs)."""
    parts = ({}, {}, {})
    for name, array in arrays.items():
        for prefix, index in ARRAYS.items():
            if name.startswith(prefix):
                parts[index][name[len(prefix):]] = array
                break
    return parts


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpt2kit.grading.replayer")
    parser.add_argument("--records", required=True, type=Path)
    parser.add_argument("--weights", required=True, type=Path)
    parser.add_argument("--item", required=True)
    args = parser.parse_args(argv)
    channel = worker_channel()
    seed = int(channel.receive("seed").fields["seed"])

    for variant in load_scheme(args.weights).item(args.item).variants:
        records = load_records(args.records / variant.name)
        tapes = {}
        for record in records:
            if record.case_id is not None and record.tape is not None and record.error is None:
                tapes.setdefault(record.case_id, record.tape)
        counting = variant.technique is not None and TECHNIQUES[variant.technique].in_ptx
        counted, count_error, launched = {}, None, {}
        for case in cases(variant.function, seed):
            tape = tapes.get(case.shape_id)
            if tape is None:
                continue
            arrays, replay_error = {}, None
            try:
                outputs, inputs_after, counts = replay_on(tape, build(case), variant.permit,
                                                          INSTRUCTION_CLASSES if counting else None)
                replayed, _, _ = replay_on(tape, build(case.other_inputs()), variant.permit)
                arrays = ({f"out_{k}": v for k, v in outputs.items()} | {f"in_{k}": v for k, v in inputs_after.items()}
                          | {f"replay_{k}": v for k, v in replayed.items()})
                add_counts(counted, counts)
                launched |= dict.fromkeys(tape.kernels_launched())
            except Exception as err:  # a tape that does not replay fails its case, with the reason
                replay_error = describe(err)
            channel.send("case", arrays, variant=variant.name, case=case.shape_id, replay_error=replay_error)
            if is_cuda_error(replay_error):
                return CUDA_CONTEXT_LOST  # nothing later in this process can run
        if counting:
            static = {}
            try:
                if launched:
                    static = {kernel: sorted(found) for kernel, found in static_classes(launched, device_arch()).items()}
            except Exception as err:  # evidence that cannot be looked at is no evidence
                count_error = describe(err)
            channel.send("counts", variant=variant.name, counts=counted, static=static, error=count_error)
    return 0


if __name__ == "__main__":
    sys.exit(main())
