"""Ranking submissions for the leaderboard (grading.leaderboard): the side the submission never runs in.

Per submission this process starts the worker (grading.leaderboard_worker) in a sandbox
(grading.sandbox: the worker kit on its path, a directory of its own, and where the OS
allows no view of the TA's checkout or of other submissions), in a process group of its
own that is killed when it ends, under the table's time limit, and over its stdin and
stdout (grading.channel):
1. receives the gate's outputs and judges them against the float64 reference computed
   here; a submission that fails stops there;
2. per configuration: names the shape (batch, prompt length) and waits for "ready"
   (the worker warms up on prompts of its own); then draws the run's prompts, one
   random prompt per row, and its sampling seed from a secret seed of this submission's
   own (never on the worker's command line, in its environment or in a file: they
   exist here only, and the seed is shown in the report after the runs),
   starts its clock, sends them, and stops the clock when the token ids are back.
Then the worker is told "done", and each run is judged here: every token by the trusted
model (grading.token_check, the gold backend, teacher-forced), and its tokens per second
against the device's memory-bandwidth roofline (Roofline). A run that fails either
scores nothing, and neither does its submission.

What this still trusts, and why it is bounded:
* The worker's process is the submission's: it may compute the tokens with anything
  (PyTorch, cuBLAS, another model library) and may undo the persisting-L2 reset. The
  checks catch wrong tokens, not borrowed speed: that the speed comes from the
  submission's own kernels rests on the gate's recorded pass and on reading the code.
* Persisting L2 could keep part of the weights on chip between steps, but the weights
  (about 500 MB in float32) are ten times any L2, and the roofline allows for a whole
  L2 of them, so it buys nothing the roofline would let through unnoticed.
"""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import numpy as np

from gpt2.config import GPT2Config
from gpt2.logits_check import allowed_logit_error
from gpt2.model import GPT2
from grading.channel import Channel, ChannelError
from grading.grade import crash_reason, kill_group
from grading.handout import MILESTONES
from gpt2.tokenizer import bpe_path, get_tokenizer
from grading.leaderboard import (Configuration, GateOutputs, Row, Standing, Workload, configurations, gate_failure,
                                 model_weights, standing)
from grading.sandbox import Sandbox, WorkerDirectory, worker_sandbox
from grading.token_check import check_run
from kernel_runtime.device import keep_compiled_kernels_private
from reference.precision import Profile

BANDWIDTH_HEADROOM = 1.5  # a device-to-device copy reaches 80-90% of the peak: 1.5x the copy is above any kernel


@dataclasses.dataclass(frozen=True)
class Gate:
    """What the gate compares against, computed here, never in a worker."""
    reference_logits: np.ndarray  # (T, V): the float64 reference over the gate prompt
    allowed: float                # gpt2.logits_check's allowance for the submissions' profile


def make_gate(config: GPT2Config, params, prompt: list[int], profile: Profile) -> Gate:
    tokens = np.array([prompt], np.int32)
    reference = GPT2(config, params, backend="reference")(tokens)
    return Gate(reference[0], allowed_logit_error((config, params), tokens, reference, profile))


@dataclasses.dataclass(frozen=True)
class Roofline:
    """The fastest a configuration can possibly run: each decode step reads the model's weights once
    (all but the position embeddings, of which it needs one row), less what a whole L2 could hold."""
    bytes_per_second: float  # the device's memory bandwidth, generously: BANDWIDTH_HEADROOM x a measured copy
    bytes_per_step: float

    def ceiling(self, batch: int) -> float:
        """Tokens per second that `batch` rows cannot exceed."""
        return batch * self.bytes_per_second / self.bytes_per_step


def measure_roofline(params, profile: Profile) -> Roofline:
    """This process's GPU's roofline for `params`. Under a profile that rounds products' inputs (tf32),
    weights could be kept in 16 bits (TF32 keeps 10 mantissa bits, as float16 does): 2 bytes each."""
    import cupy

    weights = sum(array.size for name, array in params.items() if name != "wpe")
    bytes_per_weight = 2 if profile.product_input_rounding else 4
    runtime = cupy.cuda.runtime
    l2_bytes = runtime.deviceGetAttribute(runtime.cudaDevAttrL2CacheSize, cupy.cuda.Device().id)
    return Roofline(BANDWIDTH_HEADROOM * copy_bandwidth(), weights * bytes_per_weight - l2_bytes)


def copy_bandwidth(nbytes: int = 1 << 30, repeats: int = 10) -> float:
    """Bytes per second (read + written) of the fastest of `repeats` device-to-device copies of `nbytes`."""
    import cupy

    source, destination = cupy.ones(nbytes // 4, np.float32), cupy.empty(nbytes // 4, np.float32)
    start, end, fastest = cupy.cuda.Event(), cupy.cuda.Event(), math.inf
    for _ in range(repeats):
        start.record()
        cupy.copyto(destination, source)
        end.record()
        end.synchronize()
        fastest = min(fastest, cupy.cuda.get_elapsed_time(start, end) / 1e3)
    return 2 * nbytes / fastest


@dataclasses.dataclass
class Judge:
    """Everything a submission is judged with, none of it seen by its worker."""
    workload: Workload
    gate: Gate
    roofline: Roofline
    trusted_model: Callable[[], GPT2]  # built for each submission's check, after its worker has ended
    vocab_size: int


@dataclasses.dataclass(frozen=True)
class Run:
    configuration: Configuration
    prompts: np.ndarray   # (batch, prompt_length), drawn here
    seed: int             # of the sampling, drawn here
    tokens: np.ndarray    # what the worker returned
    seconds: float        # by this process's clock


def run_inputs(seed: int, index: int, configuration: Configuration, vocab_size: int) -> tuple[np.ndarray, int]:
    """The prompts (random token ids, one prompt per row) and the sampling seed of the index-th run."""
    rng = np.random.default_rng([seed, index])
    prompts = rng.integers(0, vocab_size, (configuration.batch, configuration.prompt_length), dtype=np.int32)
    return prompts, int(rng.integers(2**63))


def make_judge(workload: Workload, profile: Profile) -> Judge:
    """The judge of the table's model on this process's GPU: the gate's float64 reference, the roofline
    measured here, the gold backend as the trusted model, its kernels compiled into this process's memory
    only (never read back from a cache a worker could write)."""
    keep_compiled_kernels_private()
    config, params = model_weights(workload)
    gate = make_gate(config, params, get_tokenizer().encode(workload.gate_prompt), profile)
    return Judge(workload, gate, measure_roofline(params, profile), lambda: GPT2(config, params, backend="gold"),
                 config.vocab_size)


def worker_command(table: Path, variants: tuple[str, ...]) -> Callable[[WorkerDirectory], list[str]]:
    """The leaderboard worker's command in its directory: its copies of the submission and of `table`."""
    return lambda place: [sys.executable, "-m", "grading.leaderboard_worker", "--submission", str(place.submission),
                          "--table", str(place.copy_in(table)), *(f"--variant={v}" for v in variants)]


class Worker:
    """A worker process started in `sandbox`, in `place`, in a process group of its own; its channel, its stderr
    passed line by line to `progress`, and its time limit."""

    def __init__(self, command: list[str], sandbox: Sandbox, place: WorkerDirectory, time_limit: float,
                 progress: Callable[[str], None]):
        tokenizer = {"GPT2_BPE_FILE": bpe_path()} if bpe_path().is_file() else {}  # the gate prompt's, offline
        self.sandbox = sandbox
        self.process = sandbox.popen(command, place, tokenizer, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        self.channel = Channel(self.process.stdout, self.process.stdin)
        self.time_limit, self.timed_out, self.lines = time_limit, threading.Event(), []
        self.timer = threading.Timer(time_limit, self._time_out)
        self.timer.start()
        self.reader = threading.Thread(target=self._relay, args=(progress,), daemon=True)
        self.reader.start()

    def _time_out(self) -> None:
        self.timed_out.set()
        kill_group(self.process)

    def _relay(self, progress) -> None:
        for line in self.process.stderr:
            line = line.decode(errors="replace")
            self.lines.append(line)
            progress(line.rstrip())

    def stop(self, broke_off: str | None) -> str | None:
        """Say "done" and wait for the worker to end (within its time limit); why it failed, or None.
        `broke_off`: why this side stopped talking to it early, if it did."""
        try:
            self.channel.send("done")
            self.process.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        self.process.wait()
        kill_group(self.process)  # and whatever it started
        self.timer.cancel()
        self.reader.join(timeout=10)
        if self.timed_out.is_set():
            return f"timed out after {self.time_limit:g} s"
        crash = crash_reason(self.sandbox.status(self.process.returncode), "".join(self.lines))
        return crash or (f"the worker broke off the protocol: {broke_off}" if broke_off else None)


def rank_submission(submission: Path | None, command: Callable[[WorkerDirectory], list[str]], judge: Judge,
                    seed: int, progress: Callable[[str], None] = lambda message: None,
                    sandbox: Sandbox | None = None, name: str | None = None) -> Standing:
    """Run the worker (`command`, given its directory) in `sandbox` (default: the last milestone's worker kit,
    whose every variant module a table may name), with a copy of `submission`; judge its gate, time its runs,
    check their tokens, and score it. `seed`: the secret of its runs' prompts and sampling seeds, this
    submission's own (the report shows it, and a later worker could read a report). `name`: the standing's,
    by default the submission's path."""
    started, workload = time.perf_counter(), judge.workload
    sandbox = sandbox or worker_sandbox(MILESTONES[-1])
    gate_reason, runs, broke_off = None, [], None
    with sandbox.directory(submission) as place:
        worker = Worker(command(place), sandbox, place, workload.time_limit_seconds, progress)
        try:
            outputs = GateOutputs.from_arrays(worker.channel.receive("gate").arrays)
            gate_reason = gate_failure(outputs, judge.gate.reference_logits, judge.gate.allowed)
            if gate_reason is None:
                for index, configuration in enumerate(configurations(workload)):
                    runs.append(timed_run(worker.channel, judge, seed, index, configuration))
                    progress(f"  {configuration.name}: {configuration.tokens / runs[-1].seconds:.0f} tok/s")
        except ChannelError as err:
            broke_off = str(err)
        crash = worker.stop(broke_off)
    if gate_reason is None and crash is None:
        rows = judged_rows(runs, judge, progress)
    else:
        rows = [Row(run.configuration, run.seconds, run.configuration.tokens) for run in runs]
    result = standing(name or str(submission), workload, gate_reason, rows, crash)
    result.seed, result.wall_seconds, result.isolation = seed, time.perf_counter() - started, sandbox.summary
    return result


def timed_run(channel: Channel, judge: Judge, seed: int, index: int, configuration: Configuration) -> Run:
    """One configuration's run, timed here from sending the prompts to receiving the tokens."""
    channel.send("prepare", batch=configuration.batch, prompt_length=configuration.prompt_length)
    channel.receive("ready")
    prompts, sampling_seed = run_inputs(seed, index, configuration, judge.vocab_size)
    started = time.perf_counter()
    channel.send("run", {"prompts": prompts}, new_tokens=configuration.new_tokens, seed=sampling_seed)
    tokens = channel.receive("tokens").arrays.get("tokens")
    seconds = time.perf_counter() - started
    return Run(configuration, prompts, sampling_seed, tokens, seconds)


def judged_rows(runs: list[Run], judge: Judge, progress: Callable[[str], None]) -> list[Row]:
    """A row per run, refused when its tokens are not the trusted model's or its speed is impossible."""
    progress(f"checking {sum(run.configuration.tokens for run in runs):,} tokens with the trusted model ...")
    started, model, rows = time.perf_counter(), judge.trusted_model(), []
    for run in runs:
        tokens_per_second = run.configuration.tokens / run.seconds
        ceiling = judge.roofline.ceiling(run.configuration.batch)
        refused = check_run(model, run.prompts, run.tokens, run.configuration.new_tokens,
                            judge.workload.sampling(run.seed), judge.gate.allowed)
        if refused is None and tokens_per_second > ceiling:
            refused = (f"{tokens_per_second:.0f} tok/s is impossible: the device's memory bandwidth allows at most "
                       f"{ceiling:.0f} (each step reads the weights once)")
        rows.append(Row(run.configuration, run.seconds, run.configuration.tokens, refused))
    xp = model.backend.xp
    del model
    if xp is not np:  # the trusted model's memory, back for the next worker
        xp.get_default_memory_pool().free_all_blocks()
    progress(f"checked in {time.perf_counter() - started:.1f} s")
    return rows
