"""Tapes one submission's kernels for the leaderboard, in a process of its own.

    python -m gpt2kit.grading.leaderboard_worker --submission DIR --table FILE [--variant NAME ...]

The ranking process (grading.ranking) starts one worker per submission, sandboxed and
under the table's time limit, and reads its stdout (grading.channel). The worker loads
the submission's kernels (the oracle fenced off, as in grading.worker), builds GPT-2 124M
with the table's seeded weights on host functions that tape the first call of each shape
(grading.taped_calls.Taper), and runs what the trusted replayer will run: the gate's calls
(grading.leaderboard.gate_outputs) and, for every configuration's shape, the warm-up
generations (grading.leaderboard.warm_up). It then sends one message, "tapes", and ends.
It never times and is never told the prompts: what it computes is thrown away, and only
its tapes, replayed by the kit's own code, are judged and timed.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from gpt2kit.generation.executors import make_executor
from gpt2kit.grading.channel import worker_channel
from gpt2kit.grading.leaderboard import configurations, gate_outputs, leaderboard_model, load_workload, warm_up
from gpt2kit.grading.taped_calls import Taper, permits
from gpt2kit.grading.worker import fence_references
from gpt2kit.kernel_runtime import recording
from gpt2kit.model_runtime.backends import kernel_ops
from gpt2kit.model_runtime.tokenizer import get_tokenizer


def tape_the_model(submission: str, table: str, variants: tuple[str, ...]) -> dict[str, str]:
    """Every call the replayer will make, taped from the submission's kernels: key -> tape JSON."""
    workload = load_workload(table)
    taper = Taper(permits(variants))
    model = leaderboard_model(workload, taper.ops(kernel_ops(submission, variants)), variants)
    gate_outputs(model, get_tokenizer().encode(workload.gate_prompt), workload.gate_steps)
    executor = make_executor(model, "grape")
    for shape in dict.fromkeys((c.batch, c.prompt_length) for c in configurations(workload)):
        warm_up(executor, workload, *shape)
    return taper.tapes


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpt2kit.grading.leaderboard_worker")
    parser.add_argument("--submission", required=True)
    parser.add_argument("--table", required=True)
    parser.add_argument("--variant", action="append", default=[])
    args = parser.parse_args(argv)
    channel = worker_channel()  # before anything can print

    fence_references()
    recording.install()
    tapes = tape_the_model(args.submission, args.table, tuple(args.variant))
    print(f"taped {len(tapes)} calls", file=sys.stderr, flush=True)
    channel.send("tapes", {"tapes": np.frombuffer(json.dumps(tapes).encode(), np.uint8)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
