"""Ranking submissions for the leaderboard (grading.leaderboard): the side the submission never runs in.

Per submission this process
1. starts the worker (grading.leaderboard_worker) in a sandbox (grading.sandbox: the
   worker kit on its path, a directory of its own, and where the OS allows no view of
   the TA's checkout or of other submissions), in a process group of its own, under the
   table's time limit, and takes its tapes (grading.taped_calls); the worker has ended,
   its whole group killed, before anything is judged or timed;
2. starts the replayer (grading.leaderboard_replayer: the kit's code, -P -s, its
   compiled kernels in memory only) in a process group of its own, under the same time
   limit, and hands it the tapes; judges the gate's outputs it sends against the float64
   reference computed here; then per configuration draws the run's prompts, one random
   prompt per row, and its sampling seed from a secret seed of this submission's own
   (shown in the report after the runs), and takes back the tokens and the seconds the
   replayer's clock gave their generation.
Each run is then judged here: every token by the trusted model (grading.token_check, the
gold backend, teacher-forced), and its tokens per second against the device's
memory-bandwidth roofline (Roofline). A run that fails either scores nothing, and
neither does its submission.

What this still trusts, and why it is bounded:
* The programs on the tapes are the submission's own CUDA, built here and run on the
  replayer's buffers: they may compute differently at different shapes (the token
  check catches wrong tokens at every timed shape) and may keep state of their own
  between calls only inside the buffers the model gives them, such as the KV cache's
  slots past each row's length (scratch is poisoned at every call, and memory kept
  from an earlier call is refused): the gate and the token check bound what such state
  could change, and the roofline what it could gain.
* Persisting L2 could keep part of the weights on chip between steps, but only a host
  call can set it, and none of the submission's host code runs in the replayer.
"""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

import numpy as np

from gpt2kit.gpt2.config import GPT2Config
from gpt2kit.gpt2.logits_check import allowed_logit_error
from gpt2kit.gpt2.model import GPT2
from gpt2kit.grading.channel import Channel, ChannelError
from gpt2kit.grading.grade import crash_reason, kill_group, trusted_environment
from gpt2kit.grading.handout import MILESTONES
from gpt2kit.grading.leaderboard import (Configuration, GateOutputs, Row, Standing, Workload, configurations,
                                         gate_failure, model_weights, standing)
from gpt2kit.grading.sandbox import Sandbox, WorkerDirectory, worker_sandbox
from gpt2kit.grading.token_check import check_run
from gpt2kit.kernel_runtime.device import keep_compiled_kernels_private
from gpt2kit.model_runtime.tokenizer import bpe_path, get_tokenizer
from gpt2kit.reference.precision import Profile

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
    tokens: np.ndarray    # what the replayer generated
    seconds: float        # by the replayer's clock: the generation, from a synchronized device to tokens on the host


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


@dataclasses.dataclass(frozen=True)
class Commands:
    worker: Callable[[WorkerDirectory], list[str]]  # the worker's command in its directory
    replayer: list[str]                             # the replayer's command


def commands(table: Path, variants: tuple[str, ...]) -> Commands:
    """The worker's command (its copies of the submission and of `table`) and the replayer's (the kit's own
    code only: -P, not the working directory on its path; -s, not the user's site-packages)."""
    chosen = [f"--variant={v}" for v in variants]
    return Commands(lambda place: [sys.executable, "-m", "gpt2kit.grading.leaderboard_worker", "--submission",
                                   str(place.submission), "--table", str(place.copy_in(table)), *chosen],
                    [sys.executable, "-P", "-s", "-m", "gpt2kit.grading.leaderboard_replayer", "--table",
                     str(Path(table).resolve()), *chosen])


class Child:
    """A process started in a group of its own, with `role` in the reports: its channel, its stderr passed line
    by line to `progress`, and its time limit. `status` reads its exit status (a sandbox's, for a worker)."""

    def __init__(self, process: subprocess.Popen, role: str, time_limit: float, progress: Callable[[str], None],
                 status: Callable[[int], int] = lambda returncode: returncode):
        self.process, self.role, self.status = process, role, status
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
        """Say "done" and wait for the process to end (within its time limit); why it failed, or None.
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
            return f"{self.role} timed out after {self.time_limit:g} s"
        crash = crash_reason(self.status(self.process.returncode), "".join(self.lines))
        crash = crash and crash.replace("the worker process", self.role)
        return crash or (f"the {self.role} broke off the protocol: {broke_off}" if broke_off else None)


class Refused(Exception):
    """The replayer's one line on tapes it could not replay."""


def expect(channel: Channel, kind: str):
    """The replayer's next message, which must be `kind`; Refused where it says why it cannot go on."""
    message = channel.receive(kind, "refused")
    if message.kind == "refused":
        raise Refused(str(message.fields.get("reason")))
    return message


def rank_submission(submission: Path | None, started_by: Commands, judge: Judge, seed: int,
                    progress: Callable[[str], None] = lambda message: None, sandbox: Sandbox | None = None,
                    name: str | None = None) -> Standing:
    """Tape `submission` in the worker (run in `sandbox`, by default the last milestone's worker kit, whose every
    variant module a table may name), replay and time its tapes in the replayer, judge the gate and the runs,
    and score it. `seed`: the secret of its runs' prompts and sampling seeds, this submission's own (the report
    shows it, and a later worker could read a report). `name`: the standing's, by default the submission's path."""
    started, workload = time.perf_counter(), judge.workload
    sandbox = sandbox or worker_sandbox(MILESTONES[-1])
    tapes, broke_off = None, None
    with sandbox.directory(submission) as place:
        tokenizer = {"GPT2_BPE_FILE": bpe_path()} if bpe_path().is_file() else {}  # the gate prompt's, offline
        process = sandbox.popen(started_by.worker(place), place, tokenizer, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        worker = Child(process, "the worker process", workload.time_limit_seconds, progress, sandbox.status)
        try:
            tapes = worker.channel.receive("tapes")
        except ChannelError as err:
            broke_off = str(err)
        crash = worker.stop(broke_off)
    gate_reason, runs = None, []
    if crash is None:
        gate_reason, runs, crash = replayed_runs(tapes, started_by.replayer, judge, seed, progress)
    if gate_reason is None and crash is None:
        rows = judged_rows(runs, judge, progress)
    else:
        rows = [Row(run.configuration, run.seconds, run.configuration.tokens) for run in runs]
    result = standing(name or str(submission), workload, gate_reason, rows, crash)
    result.seed, result.wall_seconds, result.isolation = seed, time.perf_counter() - started, sandbox.summary
    return result


def replayed_runs(tapes, command: list[str], judge: Judge, seed: int, progress: Callable[[str], None]
                  ) -> tuple[str | None, list[Run], str | None]:
    """The replayer's part: (why the gate failed, the timed runs, why the replay failed), Nones where nothing did."""
    gate_reason, runs, broke_off, refused = None, [], None, None
    with tempfile.TemporaryDirectory(prefix="leaderboard-replay-") as here:
        process = subprocess.Popen(command, cwd=here, env=trusted_environment(), start_new_session=True,
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        replayer = Child(process, "the replay", judge.workload.time_limit_seconds, progress)
        try:
            replayer.channel.send("tapes", tapes.arrays)
            outputs = GateOutputs.from_arrays(expect(replayer.channel, "gate").arrays)
            gate_reason = gate_failure(outputs, judge.gate.reference_logits, judge.gate.allowed)
            if gate_reason is None:
                for index, configuration in enumerate(configurations(judge.workload)):
                    runs.append(timed_run(replayer.channel, judge, seed, index, configuration))
                    progress(f"  {configuration.name}: {configuration.tokens / runs[-1].seconds:.0f} tok/s")
        except Refused as err:
            refused = f"its tapes were refused: {err}"
        except ChannelError as err:
            broke_off = str(err)
        crash = replayer.stop(broke_off)
    return gate_reason, runs, refused or crash


def timed_run(channel: Channel, judge: Judge, seed: int, index: int, configuration: Configuration) -> Run:
    """One configuration's run: its prompts and sampling seed drawn here, generated and timed by the replayer."""
    prompts, sampling_seed = run_inputs(seed, index, configuration, judge.vocab_size)
    channel.send("run", {"prompts": prompts}, batch=configuration.batch, prompt_length=configuration.prompt_length,
                 new_tokens=configuration.new_tokens, seed=sampling_seed)
    message = expect(channel, "tokens")
    return Run(configuration, prompts, sampling_seed, message.arrays.get("tokens"), float(message.fields["seconds"]))


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
