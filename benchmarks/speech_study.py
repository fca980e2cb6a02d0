"""The Grape study's Wav2Vec2 rows: training steps on speech batches of different lengths.

    python -m gpt2kit.benchmarks.grape_study all --model wav2vec2 --out results/grape

Wav2Vec2ForCTC base (94M parameters, random weights: --model wav2vec2, or any Wav2Vec2
source wav2vec2.checkpoint.load reads), float32, B utterances a batch
(--batch, default 4) of 1-16 s at 16 kHz with 10-16 characters a second, each batch
padded to its longest utterance rounded up to a whole second
(wav2vec2.training.SpeechBatches, seed 0), --steps batches (default 20) a run. A step
is forward, CTC loss (summed), backward and AdamW.

runtime: per executor (baseline, ptgraph, grape: wav2vec2.training) a warm-up run over
    the batches (ptgraph captures a graph pair per padded length, grape one per padded
    length and packed rows), then
    --runs timed runs over the same batches, wall clock to each step's loss on the
    host. transformers' Wav2Vec2ForCTC on the same weights and batches, float32 with
    TF32 off (cuDNN's convolutions too), eager, torch.optim.AdamW with the same
    settings, is the reference row. Rows go to speedometer.csv ("Model": "Wav2Vec2").
graph-memory: the buffers and graphs each executor's captured steps hold over the
    batches, forward and backward apart: ptgraph's pair per padded length, each with
    buffers and pools of its own, against grape's pairs (per padded length and packed
    rows) in the memory of the longest. Counted as the bytes of the graphs' buffers
    (activations, or the backward pass's gradients) plus the memory pools their captures
    allocated from (kernel_runtime.device.CapturedGraph), each allocation once; the
    parameters, their gradients and the optimizer's moments, which every executor holds
    once, are left out. Rows "Wav2Vec2 forward" and "Wav2Vec2 backward" go to metadata_compression.csv.
breakdown: one run per executor after a warm-up, a CUDA event on the step's stream as
    each stage of a step begins (InputPrep: the batch into the step's buffers; Model:
    forward, loss and backward; Optimizer: AdamW), nothing synchronised but each step's
    loss: wav2vec2_train_profile.csv.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import numpy as np

from gpt2kit.benchmarks.grape_tables import (GraphMemory, Timing, TrainingBreakdown, write_graph_memory,
                                             write_speedometer, write_training_breakdown)
from gpt2kit.generation.executors import StageClock
from gpt2kit.kernel_runtime.device import give_back_memory
from gpt2kit.model_runtime.families import Family
from gpt2kit.training.step import AdamW
from gpt2kit.wav2vec2.training import SpeechBatches, make_speech_step

OPTIMIZER = AdamW(learning_rate=1e-5, weight_decay=0.0)


class SpeechStudy:
    def __init__(self, family: Family, source: str, B: int, steps: int):
        self.family, self.name = family, family.name
        self.config, self.parameters = family.load(source, lambda line: print(line, flush=True))
        self.B = B
        batches = SpeechBatches(self.config, B, seed=0)
        self.max_samples, self.max_labels = batches.max_samples, batches.max_labels
        self.batches = [next(batches) for _ in range(steps)]
        self.lengths = sorted({audio.shape[1] for audio, *_ in self.batches})

    def attrs(self) -> dict:
        return {"Model": self.name, "Search": "train", "Batches": f"{len(self.batches)} x B{self.B}, 1-16 s"}

    def step(self, executor: str):
        model = self.family.model(self.config, self.parameters, backend="kernels")
        return make_speech_step(model, executor, self.B, self.max_samples, self.max_labels, OPTIMIZER)

    def run(self, executor: str):
        """A run of a fresh `executor` step over the batches: a function to call for each run."""
        step = self.step(executor)
        return lambda: [step(*batch) for batch in self.batches]


def timed_runs(run, runs: int, label: str) -> list[float]:
    """Seconds of each of `runs` calls of run() (each step ends with its loss on the host), after a warm-up call."""
    started = time.perf_counter()
    run()
    print(f"  {label}: warm-up {time.perf_counter() - started:.2f} s", flush=True)
    seconds = []
    for number in range(runs):
        started = time.perf_counter()
        run()
        seconds.append(time.perf_counter() - started)
        print(f"  {label}: run {number + 1}/{runs} {seconds[-1]:.3f} s", flush=True)
    return seconds


def transformers_run(study: SpeechStudy):
    """A run of transformers' eager training steps over the study's batches, on the same weights."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False  # float32, as the kit's
    model = study.family.transformers_model(study.config, study.parameters, "cuda").train()
    o = OPTIMIZER
    optimizer = torch.optim.AdamW(model.parameters(), lr=o.learning_rate, betas=(o.beta1, o.beta2), eps=o.eps,
                                  weight_decay=o.weight_decay)
    batches = [(torch.tensor(audio, device="cuda"),
                torch.tensor(np.arange(audio.shape[1]) < lengths[:, None], dtype=torch.long, device="cuda"),
                torch.tensor(np.where(np.arange(labels.shape[1]) < label_lengths[:, None], labels, -100),
                             device="cuda"))
               for audio, lengths, labels, label_lengths in study.batches]

    def run():
        for audio, mask, labels in batches:
            optimizer.zero_grad(set_to_none=True)
            loss = model(audio, attention_mask=mask, labels=labels).loss
            loss.backward()
            optimizer.step()
            loss.item()
    return run


def runtime(study: SpeechStudy, out: Path, runs: int, executors, with_hf: bool, device: str) -> list[Path]:
    steps = len(study.batches)
    print(f"runtime: {steps} training steps a run (padded lengths {', '.join(f'{s / 16000:g}' for s in study.lengths)}"
          f" s), {runs} timed runs per executor after a warm-up", flush=True)
    timings = []
    for name in executors:
        timings.append(Timing(name, study.attrs(), timed_runs(study.run(name), runs, name)))
        give_back_memory()
    if with_hf:
        import torch

        timings.append(Timing("transformers", study.attrs(), timed_runs(transformers_run(study), runs,
                                                                         "transformers")))
        torch.cuda.empty_cache()
    eager = statistics.median(timings[-1].seconds) if with_hf else None
    print(f"\n{'executor':14s} {'s/run':>8s} {'steps/s':>8s}" + (f" {'vs transformers':>16s}" if eager else ""))
    for t in timings:
        median = statistics.median(t.seconds)
        print(f"{t.name:14s} {median:8.3f} {steps / median:8.2f}" + (f" {eager / median:15.2f}x" if eager else ""))
    return list(write_speedometer(out, timings, device, study.name))


def held(step) -> tuple[float, float, int]:
    """MB that the forward graphs' buffers and pools hold, MB that the backward graphs' add, and how many pairs:
    each allocation counted once, so grape's lengths, which share the longest's buffers and one pool, count it
    once (the pool with the forward graphs)."""
    import cupy

    pairs, counted = list(step.pairs.values()), set()

    def megabytes(buffers, graphs) -> float:
        arrays = [x for held_buffers in buffers for value in vars(held_buffers).values()
                  for x in (value if isinstance(value, list) else [value]) if isinstance(x, cupy.ndarray)]
        allocations = ([(id(x.data.mem), x.data.mem.size) for x in arrays]
                       + [(id(graph.pool), graph.pool.total_bytes()) for graph in graphs])
        new = {key: size for key, size in allocations if key not in counted}
        counted.update(new)
        return sum(new.values()) / 2**20

    forward = megabytes([p.a for p in pairs], [p.forward_graph for p in pairs])
    return forward, megabytes([p.d for p in pairs], [p.backward_graph for p in pairs]), len(pairs)


def graph_memory(study: SpeechStudy, out: Path, device: str) -> list[Path]:
    print(f"graph memory: ptgraph's graph pair per padded length ({len(study.lengths)}), each with memory of its "
          "own, against grape's pair per padded length and packed rows, all in the longest's", flush=True)
    sizes = {}
    for executor in ("ptgraph", "grape"):
        step = study.step(executor)
        for batch in study.batches:  # every length captured (each pair launched once first, then captured)
            step(*batch)
        sizes[executor] = held(step)
        print(f"  {executor}: {sizes[executor][2]} pairs, forward {sizes[executor][0]:.0f} MB, backward "
              f"{sizes[executor][1]:.0f} MB", flush=True)
        del step
        give_back_memory()
    rows = [GraphMemory(f"{study.name} {part}", sizes["ptgraph"][index], sizes["grape"][index])
            for index, part in enumerate(("forward", "backward"))]
    for row in rows:
        print(f"  {row.model}: ptgraph {row.original_mb:.0f} MB, grape {row.compressed_mb:.0f} MB, "
              f"{row.original_mb / row.compressed_mb:.1f}x less", flush=True)
    return list(write_graph_memory(out, rows, device, study.name))


def run_study(family: Family, source: str, experiments, out: Path, runs: int, executors, with_hf: bool, B: int,
              steps: int) -> list[Path]:
    import cupy

    study = SpeechStudy(family, source, B, steps)
    device = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(f"{study.name} {study.config.num_parameters() / 1e6:.0f}M float32 on {device}; {steps} batches of B{B}; "
          f"writing to {out}", flush=True)
    written = []
    if "graph-memory" in experiments:
        written += graph_memory(study, out, device)
    if "runtime" in experiments:
        written += runtime(study, out, runs, executors, with_hf, device)
    if "breakdown" in experiments:
        written += breakdown(study, out, executors, device)
    return written


def breakdown(study: SpeechStudy, out: Path, executors, device: str) -> list[Path]:
    print("breakdown: one run per executor after a warm-up, CUDA events per stage of each step", flush=True)
    rows = []
    for name in executors:
        step = study.step(name)
        for batch in study.batches:  # warm-up: every graph captured
            step(*batch)
        clock = StageClock()
        for batch in study.batches:
            step(*batch, clock=clock)
        with step.stream:  # the end of the last step's update, on the stream the steps ran on
            clock.mark("InputPrep")
        ms = clock.milliseconds()
        rows.append(TrainingBreakdown(name, ms["InputPrep"], ms["Model"], ms["Optimizer"]))
        print(f"  {name:10s} InputPrep {ms['InputPrep']:9.1f} ms  Model {ms['Model']:9.1f} ms  "
              f"Optimizer {ms['Optimizer']:9.1f} ms", flush=True)
        del step
        give_back_memory()
    how = (f"{study.name}, {len(study.batches)} steps of B{study.B}, one run after a warm-up; CUDA events as each "
           "stage begins")
    return list(write_training_breakdown(out, rows, device, how, study.family.key))
