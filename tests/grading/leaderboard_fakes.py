"""Fake leaderboard processes for the CPU tests, so that the ranking process can be tested
without a GPU:

    python -m tests.grading.leaderboard_fakes worker BEHAVIOUR TABLE [SPY_FILE]
    python -m tests.grading.leaderboard_fakes replayer BEHAVIOUR TABLE

A fake worker sends no tapes at all (an empty set), or misbehaves. A fake replayer is
the real one's side of the protocol (grading.leaderboard_replayer.serve) over TINY on the
reference backend, honest or with a behaviour that stands for tapes that compute
wrongly, or for a replay that fails.
"""

import os
import sys
import time
from pathlib import Path

import numpy as np

from gpt2kit.gpt2.checkpoint import perturbed_parameters
from gpt2kit.generation.executors import make_executor
from gpt2kit.generation.generate import GREEDY
from gpt2kit.gpt2.model import GPT2
from gpt2kit.grading.channel import worker_channel
from gpt2kit.grading.leaderboard import WARM_UP_TOKENS, load_workload
from gpt2kit.grading.leaderboard_replayer import refusing, serve
from tests.model.helpers import TINY

WEIGHTS_SEED = 3


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


def crashes_in_second_run(cheat, prompts, n, sampling, run, **kwargs):
    if run == 1:
        raise RuntimeError("the submission crashed")
    return cheat.honest.generate(prompts, n, sampling, **kwargs)


def hangs(cheat, prompts, n, sampling, run, **kwargs):
    if run is not None:
        time.sleep(3600)
    return cheat.honest.generate(prompts, n, sampling, **kwargs)


def refuses(cheat, prompts, n, sampling, run, **kwargs):
    if run == 1:
        raise RuntimeError("a replay of the submission's tape failed")
    return cheat.honest.generate(prompts, n, sampling, **kwargs)


REPLAYS = {f.__name__: f for f in (honest, other_model_after_first_run, ignores_prompts, greedy_when_sampling,
                                   one_token_short, crashes_in_second_run, hangs, refuses)}


def worker(behaviour: str, spy_file: str = "") -> None:
    """honest: no tapes; crashes; hangs; silent: ends without a word; spies: after its tapes, writes down
    everything it is sent (it should be told nothing but "done") and what it could read."""
    channel = worker_channel()
    if behaviour == "crashes":
        raise RuntimeError("the submission crashed")
    if behaviour == "hangs":
        time.sleep(3600)
    if behaviour == "silent":
        return
    channel.send("tapes", {"tapes": np.frombuffer(b"{}", np.uint8)})
    if behaviour == "spies":
        received = []
        try:
            while True:
                received.append(channel.receive("done", "run", "prompts").kind)
        except Exception:  # the pipe closed
            pass
        files = [str(p) for p in Path(".").rglob("*")]
        Path(spy_file).write_text(repr((received, sys.argv, dict(os.environ), files)))


def replayer(behaviour: str, table: str) -> int:
    channel = worker_channel()
    workload, model = load_workload(Path(table)), tiny_model()
    channel.receive("tapes")
    cheat = Cheat(model, REPLAYS[behaviour])
    if behaviour == "crashes_in_second_run":
        serve(channel, workload, model, cheat)
        return 0
    return refusing(channel, lambda: serve(channel, workload, model, cheat))


def main(role: str, behaviour: str, table: str, spy_file: str = "") -> int:
    if role == "worker":
        worker(behaviour, spy_file)
        return 0
    return replayer(behaviour, table)


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
