"""Runs one submission for the leaderboard, in a process of its own, answering the ranking process.

    python -m grading.leaderboard_worker --submission DIR --table FILE [--variant NAME ...]

The ranking process (grading.ranking) starts one worker per submission, under the
table's time limit, and speaks to it over its stdin and stdout (grading.channel). The
worker never judges and never times: it loads the submission's kernels (the oracle
fenced off, as in grading.worker), builds GPT-2 124M with the table's seeded weights on
them, and
1. sends the gate's outputs: one forward pass over the gate prompt, recorded as the
   kernel tests record a call, so that the pass must come from the submission's own
   kernels; then greedy steps with the KV cache, and the same steps recomputed;
2. for each configuration the ranking process names (batch, prompt length): warms up
   the grape executor on prompts of that shape (the first call runs eagerly, the second
   captures its CUDA graphs), resets the persisting L2 cache, says "ready", and
   generates the new tokens of the prompts and sampling seed that then come, sending
   their ids back.
It needs no output directory: nothing it writes but its messages counts.
"""

from __future__ import annotations

import argparse
import ctypes
import sys

import numpy as np

from model_runtime.backends import make_backend
from generation.decoding import make_decoder
from generation.executors import make_executor
from generation.generate import decoder_kind
from gpt2.model import GPT2
from gpt2.tokenizer import get_tokenizer
from grading.channel import Channel, worker_channel
from grading.leaderboard import GateOutputs, LeaderboardError, Workload, load_workload, model_weights
from grading.worker import fence_references
from kernel_runtime import recording

WARM_UP_TOKENS = 2
PERSISTING_L2_LIMIT = 6  # cudaLimitPersistingL2CacheSize (CUDA's driver_types.h); CuPy does not name it


def gate_outputs(model: GPT2, prompt: list[int], steps: int) -> GateOutputs:
    """The gate's calls on the submission's kernels (see the module docstring)."""
    tokens = np.array([prompt], np.int32)
    with recording.record() as tape:
        logits = model(tokens)
    if tape.refused is not None:
        raise LeaderboardError(f"the gate's forward pass computed outside the submission's kernels: {tape.refused}")
    logits = model.backend.to_host(logits)[0]
    cached = make_decoder(model, decoder_kind(model, use_cache=True, use_graph=True), 1)
    recomputed = make_decoder(model, "recompute", 1)
    cached_rows, recomputed_rows = [cached.prefill(tokens)[0]], [recomputed.prefill(tokens)[0]]
    cached_tokens, recomputed_tokens = [], []
    for _ in range(steps):
        cached_tokens.append(int(np.argmax(cached_rows[-1])))
        recomputed_tokens.append(int(np.argmax(recomputed_rows[-1])))
        step = np.array([cached_tokens[-1]], np.int32)  # both paths take the same token: their logits compare
        cached_rows.append(cached.step(step)[0].copy())  # the reference backend's step returns its own buffer
        recomputed_rows.append(recomputed.step(step)[0].copy())
    return GateOutputs(logits, np.stack(cached_rows), np.stack(recomputed_rows), np.array(cached_tokens),
                       np.array(recomputed_tokens))


def warm_up_prompts(batch: int, length: int, vocab_size: int) -> list[list[int]]:
    """Prompts of the run's shape, of content of their own (the run's prompts are not known yet)."""
    return [[(row * length + position) % vocab_size for position in range(length)] for row in range(batch)]


def serve(channel: Channel, gate: GateOutputs, executor, workload: Workload, before_run=lambda: None) -> None:
    """The worker's side of the protocol (module docstring), until the ranking process says "done"."""
    channel.send("gate", gate.arrays())
    warmed = set()
    while (message := channel.receive("prepare", "done")).kind == "prepare":
        shape = (int(message.fields["batch"]), int(message.fields["prompt_length"]))
        if shape not in warmed:
            prompts = warm_up_prompts(*shape, executor.model.config.vocab_size)
            for _ in range(2):
                executor.generate(prompts, WARM_UP_TOKENS, workload.sampling(seed=0), stop_at_end_of_text=False)
            warmed.add(shape)
        before_run()
        channel.send("ready")
        run = channel.receive("run")
        generated = executor.generate(run.arrays["prompts"].tolist(), int(run.fields["new_tokens"]),
                                      workload.sampling(int(run.fields["seed"])), stop_at_end_of_text=False)
        channel.send("tokens", {"tokens": np.array(generated, np.int32)})


def reset_persisting_l2() -> None:
    """Evict every line left persisting in L2 and set the persisting limit to 0, so that a run starts
    without weights pinned in L2 by an earlier one (Ampere and later; older GPUs have no persisting L2)."""
    import cupy

    if int(cupy.cuda.Device().compute_capability) < 80:
        return
    cupy.cuda.runtime.deviceSetLimit(PERSISTING_L2_LIMIT, 0)
    status = ctypes.CDLL("libcuda.so.1").cuCtxResetPersistingL2Cache()
    if status != 0:
        raise LeaderboardError(f"cuCtxResetPersistingL2Cache failed with CUresult {status}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grading.leaderboard_worker")
    parser.add_argument("--submission", required=True)
    parser.add_argument("--table", required=True)
    parser.add_argument("--variant", action="append", default=[])
    args = parser.parse_args(argv)
    channel = worker_channel()  # before anything can print

    workload = load_workload(args.table)
    fence_references()
    recording.install()
    model = GPT2(*model_weights(workload),
                 backend=make_backend("kernels", kernels=args.submission, variants=tuple(args.variant)))
    gate = gate_outputs(model, get_tokenizer().encode(workload.gate_prompt), workload.gate_steps)
    print("gate's outputs sent; running the configurations", file=sys.stderr, flush=True)
    serve(channel, gate, make_executor(model, "grape"), workload, before_run=reset_persisting_l2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
