"""Runs one submission for the leaderboard, in a process of its own.

    python -m grading.leaderboard_worker --submission DIR --table FILE --out DIR [--variant NAME ...]

The leaderboard (grading.leaderboard) starts one worker per submission, under the
table's time limit. The worker never judges: it loads the submission's kernels (the
oracle fenced off, as in grading.worker), builds GPT-2 124M with the table's seeded
weights on them, and saves
1. the gate's outputs (gate.npz): one forward pass over the gate prompt, recorded as
   the kernel tests record a call, so that the pass must come from the submission's
   own kernels; then greedy steps with the KV cache, and the same steps recomputed;
2. one row per configuration (rows.json, rewritten after each): the seconds that the
   grape executor took to generate batch x new tokens, from the prompt to the last
   token, after a warm-up of each batch size that captures its CUDA graphs.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from gpt2.backends import make_backend
from gpt2.decoding import make_decoder
from gpt2.executors import make_executor
from gpt2.generate import Sampling
from gpt2.model import GPT2
from gpt2.tokenizer import get_tokenizer
from grading.leaderboard import (GateOutputs, LeaderboardError, Row, Workload, configurations, load_workload,
                                 model_weights, save_rows)
from grading.worker import fence_references
from kernel_runtime import recording

WARM_UP_TOKENS = 2


def gate_outputs(model: GPT2, prompt: list[int], steps: int) -> GateOutputs:
    """The gate's calls on the submission's kernels (see the module docstring)."""
    tokens = np.array([prompt], np.int32)
    with recording.record() as tape:
        logits = model(tokens)
    if tape.refused is not None:
        raise LeaderboardError(f"the gate's forward pass computed outside the submission's kernels: {tape.refused}")
    logits = model.backend.to_host(logits)[0]
    cached, recomputed = make_decoder(model, "graph", 1), make_decoder(model, "recompute", 1)
    cached_rows, recomputed_rows = [cached.prefill(tokens)[0]], [recomputed.prefill(tokens)[0]]
    cached_tokens, recomputed_tokens = [], []
    for _ in range(steps):
        cached_tokens.append(int(np.argmax(cached_rows[-1])))
        recomputed_tokens.append(int(np.argmax(recomputed_rows[-1])))
        step = np.array([cached_tokens[-1]], np.int32)  # both paths take the same token: their logits compare
        cached_rows.append(cached.step(step)[0])
        recomputed_rows.append(recomputed.step(step)[0])
    return GateOutputs(logits, np.stack(cached_rows), np.stack(recomputed_rows), np.array(cached_tokens),
                       np.array(recomputed_tokens))


def time_configurations(executor, prompts: list[list[int]], workload: Workload, synchronize=lambda: None,
                        progress=lambda message: None, save=lambda rows: None) -> list[Row]:
    """Generate every configuration of `workload` with `executor`, timed from the call to its last token."""
    sampling = Sampling(workload.temperature, workload.top_k, None, workload.sampling_seed)
    rows, warmed = [], set()
    for configuration in configurations(workload):
        batch = [prompts[configuration.prompt]] * configuration.batch
        if configuration.batch not in warmed:  # the first call runs eagerly, the second captures its graphs
            for _ in range(2):
                executor.generate(batch, WARM_UP_TOKENS, sampling, stop_at_end_of_text=False)
            warmed.add(configuration.batch)
        synchronize()
        started = time.perf_counter()
        generated = executor.generate(batch, configuration.new_tokens, sampling, stop_at_end_of_text=False)
        synchronize()
        rows.append(Row(configuration, time.perf_counter() - started, sum(map(len, generated))))
        save(rows)
        progress(f"  {configuration.name}: {rows[-1].tokens_per_second:.0f} tok/s")
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grading.leaderboard_worker")
    parser.add_argument("--submission", required=True, type=Path)
    parser.add_argument("--table", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--variant", action="append", default=[])
    args = parser.parse_args(argv)

    import cupy

    workload = load_workload(args.table)
    fence_references()
    recording.install()
    tokenizer = get_tokenizer()
    model = GPT2(*model_weights(workload),
                 backend=make_backend("kernels", kernels=args.submission, variants=tuple(args.variant)))
    gate_outputs(model, tokenizer.encode(workload.gate_prompt), workload.gate_steps).save(args.out)
    print("gate's outputs saved; timing the configurations", file=sys.stderr, flush=True)
    time_configurations(make_executor(model, "grape"), [tokenizer.encode(p) for p in workload.prompts], workload,
                        synchronize=cupy.cuda.runtime.deviceSynchronize,
                        progress=lambda message: print(message, file=sys.stderr, flush=True),
                        save=lambda rows: save_rows(rows, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
