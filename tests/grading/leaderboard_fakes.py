"""Leaderboard workers for the CPU tests: the real worker's side of the protocol
(grading.leaderboard_worker.serve) over TINY on the reference backend, honest or with
one cheat, so that the ranking process can be tested without a GPU.

    python -m tests.grading.leaderboard_fakes BEHAVIOUR TABLE
"""

import json
import os
import sys
import time
from pathlib import Path

from gpt2.checkpoint import perturbed_parameters
from generation.executors import make_executor
from generation.generate import GREEDY
from gpt2.model import GPT2
from gpt2.tokenizer import get_tokenizer
from grading.channel import worker_channel
from grading.leaderboard import load_workload
from grading.leaderboard_worker import WARM_UP_TOKENS, gate_outputs, serve
from tests.model.helpers import TINY

WEIGHTS_SEED = 3
SLEEP_SECONDS = 0.25  # what the time-travelling fake spends in each run, by the real clock


def tiny_model(seed: int = WEIGHTS_SEED) -> GPT2:
    return GPT2(TINY, perturbed_parameters(TINY, seed=seed), backend="reference")


class Cheat:
    """The honest baseline executor, with `generate` changed by a behaviour, which is also told how many
    timed runs came before this call (warm-ups, of WARM_UP_TOKENS, are not timed runs)."""

    def __init__(self, model: GPT2, behaviour):
        self.model, self.honest, self.behaviour, self.runs = model, make_executor(model, "baseline"), behaviour, 0
        self.other = make_executor(tiny_model(WEIGHTS_SEED + 1), "baseline")

    def generate(self, prompts, n, sampling, **kwargs):
        timed = n > WARM_UP_TOKENS
        tokens = self.behaviour(self, prompts, n, sampling, self.runs if timed else None, **kwargs)
        self.runs += timed
        return tokens


def honest(cheat, prompts, n, sampling, run, **kwargs):
    return cheat.honest.generate(prompts, n, sampling, **kwargs)


def other_model_after_first_run(cheat, prompts, n, sampling, run, **kwargs):
    """Right for the gate, the warm-ups and the first timed run; another model's tokens after."""
    return (cheat.other if run else cheat.honest).generate(prompts, n, sampling, **kwargs)


def ignores_prompts(cheat, prompts, n, sampling, run, **kwargs):
    """Tokens ready before the prompts came: generated for prompts of its own."""
    return cheat.honest.generate([[1] * len(p) for p in prompts], n, sampling, **kwargs)


def greedy_when_sampling(cheat, prompts, n, sampling, run, **kwargs):
    """Always the most likely token: inside the top-k, but not the model's distribution."""
    return cheat.honest.generate(prompts, n, GREEDY, **kwargs)


def one_token_short(cheat, prompts, n, sampling, run, **kwargs):
    return [row[:-1] for row in cheat.honest.generate(prompts, n, sampling, **kwargs)]


def time_travel(cheat, prompts, n, sampling, run, **kwargs):
    """Stops this process's clocks, then takes its time: the ranking process's clock still runs."""
    for name in ("perf_counter", "monotonic", "time", "perf_counter_ns", "monotonic_ns"):
        setattr(time, name, lambda: 0)
    time.sleep(SLEEP_SECONDS)  # the C clock, which the patches do not reach
    return cheat.honest.generate(prompts, n, sampling, **kwargs)


def writes_results(cheat, prompts, n, sampling, run, **kwargs):
    """Honest, but leaves results of its own where the worker runs, claiming a nanosecond a run."""
    forged = json.dumps([{"batch": len(prompts), "new_tokens": n, "prompt": 0, "seconds": 1e-9,
                          "tokens": len(prompts) * n}])
    for name in ("rows.json", "leaderboard.json", "results.json"):
        Path(name).write_text(forged)
    return cheat.honest.generate(prompts, n, sampling, **kwargs)


def chatty(cheat, prompts, n, sampling, run, **kwargs):
    """Honest, printing what looks like a message to stdout (which is not the channel)."""
    print('{"kind": "tokens", "fields": {}, "arrays": []}', flush=True)
    return cheat.honest.generate(prompts, n, sampling, **kwargs)


def crashes_in_second_run(cheat, prompts, n, sampling, run, **kwargs):
    if run == 1:
        raise RuntimeError("the submission crashed")
    return cheat.honest.generate(prompts, n, sampling, **kwargs)


def hangs(cheat, prompts, n, sampling, run, **kwargs):
    if run is not None:
        time.sleep(3600)
    return cheat.honest.generate(prompts, n, sampling, **kwargs)


def spies(cheat, prompts, n, sampling, run, **kwargs):
    """Writes down what this process could read before its first timed run: command line, environment, files."""
    path = sys.argv[3] if len(sys.argv) > 3 else None  # where the test wants it written
    if path and run is None:
        files = [str(p) for p in Path(".").rglob("*")]
        Path(path).write_text(repr((sys.argv, dict(os.environ), files)))
    return cheat.honest.generate(prompts, n, sampling, **kwargs)


BEHAVIOURS = {f.__name__: f for f in (honest, other_model_after_first_run, ignores_prompts, greedy_when_sampling,
                                      one_token_short, time_travel, writes_results, chatty, crashes_in_second_run,
                                      hangs, spies)}


def main(behaviour: str, table: str, spy_file: str = "") -> int:
    channel = worker_channel()
    workload = load_workload(Path(table))
    model = tiny_model()
    gate = gate_outputs(model, get_tokenizer().encode(workload.gate_prompt), workload.gate_steps)
    serve(channel, gate, Cheat(model, BEHAVIOURS[behaviour]), workload)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
