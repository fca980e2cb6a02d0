"""Runs and times the leaderboard's model on a submission's tapes: the kit's code only.

    python -m gpt2kit.grading.leaderboard_replayer --table FILE [--variant NAME ...]

The ranking process (grading.ranking) starts it once the submission's worker has ended,
with Python's -P and -s, the kit's own checkout on its path and CuPy's kernel cache kept
in memory (as grading.replayer), and speaks to it over its stdin and stdout
(grading.channel). It never imports the submission's Python: its model is the table's
GPT-2 on grading.taped_calls.TapedOps, each host-function call a replay of the worker's
tape for that call, every program built by the trusted build; the generation around it
is the kit's grape executor with the kit's own sampling kernels.

    in  "tapes"   arrays tapes (the worker's message, passed on as it came)
    out "gate"    the gate's outputs (grading.leaderboard.GateOutputs), or "refused"
    in  "run"     {batch, prompt_length, new_tokens, seed}, arrays prompts
    out "tokens"  {seconds}, arrays tokens; or "refused"
    in  "done"

Before a configuration's first run it warms up on prompts of that shape (the first
generation builds and loads the programs, the second captures the graphs, the third
replays them); then it
synchronizes the device, starts its clock, generates, and stops the clock when the
token ids are on the host. "refused" {reason} is one line: a tape that cannot be
replayed (named by its call), or the error a replay raised; the replayer then ends.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Callable

import numpy as np

from gpt2kit.generation.executors import make_executor
from gpt2kit.grading.channel import Channel, worker_channel
from gpt2kit.gpt2.model import GPT2
from gpt2kit.grading.leaderboard import Workload, gate_outputs, leaderboard_model, load_workload, warm_up
from gpt2kit.grading.taped_calls import TapedOps, permits, read_tapes
from gpt2kit.kernel_runtime import KitError
from gpt2kit.kernel_runtime.loader import use_kernels
from gpt2kit.model_runtime.tokenizer import get_tokenizer
from gpt2kit.reference.execution import describe


def taped_model(channel: Channel, workload: Workload, variants: tuple[str, ...]) -> GPT2:
    """The table's model on the tapes that come first on `channel`."""
    tapes = read_tapes(channel.receive("tapes").arrays["tapes"].tobytes().decode())
    use_kernels()  # the kit's own kernels directory: the grape executor's sampling kernels
    return leaderboard_model(workload, TapedOps(tapes, permits(variants)).ops(), variants)


def serve(channel: Channel, workload: Workload, model: GPT2, executor) -> None:
    """The gate's outputs of `model`, then timed runs of `executor` on it, until "done" (module docstring)."""
    channel.send("gate", gate_outputs(model, get_tokenizer().encode(workload.gate_prompt),
                                      workload.gate_steps).arrays())
    warmed = set()
    while (message := channel.receive("run", "done")).kind == "run":
        fields = message.fields
        shape = (int(fields["batch"]), int(fields["prompt_length"]))
        if shape not in warmed:
            warm_up(executor, workload, *shape)
            warmed.add(shape)
        if model.backend.xp is not np:
            model.backend.xp.cuda.Device().synchronize()
        started = time.perf_counter()
        generated = executor.generate(message.arrays["prompts"].tolist(), int(fields["new_tokens"]),
                                      workload.sampling(int(fields["seed"])), stop_at_end_of_text=False)
        seconds = time.perf_counter() - started
        channel.send("tokens", {"tokens": np.array(generated, np.int32)}, seconds=seconds)


def refusing(channel: Channel, run: Callable[[], None]) -> int:
    """Run `run`; any error is the submission's tapes': one "refused" line for its report, and exit status 1."""
    try:
        run()
    except Exception as err:
        channel.send("refused", reason=str(err) if isinstance(err, KitError) else describe(err))
        return 1
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpt2kit.grading.leaderboard_replayer")
    parser.add_argument("--table", required=True)
    parser.add_argument("--variant", action="append", default=[])
    args = parser.parse_args(argv)
    channel = worker_channel()  # before anything can print
    workload, variants = load_workload(args.table), tuple(args.variant)

    def run() -> None:
        model = taped_model(channel, workload, variants)
        serve(channel, workload, model, make_executor(model, "grape"))

    return refusing(channel, run)


if __name__ == "__main__":
    sys.exit(main())
