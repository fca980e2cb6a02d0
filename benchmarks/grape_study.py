"""The Grape study's three experiments on the kit's models: runtime, breakdown, graph memory.

    python -m gpt2kit.benchmarks.grape_study runtime      --out results/grape   # speedometer.csv + .png
    python -m gpt2kit.benchmarks.grape_study breakdown    --out results/grape   # gpt2_generate_profile.csv + .png
    python -m gpt2kit.benchmarks.grape_study graph-memory --out results/grape   # metadata_compression.csv + .png
    python -m gpt2kit.benchmarks.grape_study all          --out results/grape
    python -m gpt2kit.benchmarks.grape_study all --model random:gpt-j-6b --max-length 256 --out results/grape
    python -m gpt2kit.benchmarks.grape_study all --model wav2vec2 --out results/grape   # training (speech_study)
    python -m gpt2kit.benchmarks.grape_study runtime --executors grape --no-hf --variant layernorm_matmul ...

GPT-2 124M in float32 (random weights unless --model; any source python -m gpt2kit takes,
GPT-J's included), a random prompt of 5 tokens. A model's rows replace that model's
rows in speedometer.csv and metadata_compression.csv and keep the other models', as
the artifact lays them out (a row per executor per model); its breakdown goes to
<family>_generate_profile.csv (gpt2_..., gptj_...). A model of a family that trains on
speech (model_runtime.families), --model wav2vec2 (Wav2Vec2 base, random weights) or
any Wav2Vec2 source, has its training steps on speech batches of different lengths
measured instead (benchmarks.speech_study): its runtime and graph-memory rows go to
the same tables.
Configurations: Grape's, beam search with 5 beams up to 1024 tokens (length penalty 1,
no early stopping), and greedy batch 1 to the same length. Executors: baseline,
ptgraph and grape (generation.executors), and transformers' eager generate on the same
weights as a reference row (--no-hf leaves it out).

runtime: per executor, a warm-up run (it reaches every length, so ptgraph has captured
    all its graphs) and --runs timed runs, wall clock after a synchronize. It prints
    each run's GPU time per step too: grape's captured stages replayed back to back
    with CUDA events around them and nothing from the host between them, which is the
    GPU's time for the steps alone; the wall clock over it is what the host adds.
breakdown: one run per executor after a warm-up, a CUDA event as each stage begins
    (generation.executors.StageClock), on the executor's stream; no synchronisation is added,
    so grape's graphs run as they do untimed, and a stage the host runs (baseline's and
    ptgraph's choosing) shows as the time the GPU waits for the host to queue the next
    stage.
graph-memory: device memory that graphs hold, over every length: ptgraph's one graph
    per length (each with its activations), and grape's shared graphs with the buffers
    they own (activations, the selection's state). Measured as the growth of CuPy's
    pool (the buffers) plus the growth of the driver's memory
    outside the pool (cudaMemGetInfo: the graphs themselves; it moves in steps of
    2 MB, so a few small graphs may show none) around capture and instantiation; the
    KV cache, which every executor needs, is left out.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from gpt2kit.benchmarks.grape_tables import (FIGURES, Breakdown, GraphMemory, Timing, write_breakdown,
                                             write_graph_memory, write_speedometer)
from gpt2kit.benchmarks.transformers_model import TRANSFORMERS, check_room_for_transformers
from gpt2kit.generation.beam_search import BeamSearch
from gpt2kit.generation.executors import StageClock, make_executor
from gpt2kit.generation.generate import GREEDY
from gpt2kit.kernel_runtime.commands import POSITIVE_INT, OneLineArgumentParser, check_installed, checked, run_command
from gpt2kit.kernel_runtime.device import exit_without_gpu, give_back_memory
from gpt2kit.kernel_runtime.files import check_writable_directory
from gpt2kit.model_runtime.backends import make_backend
from gpt2kit.model_runtime.executors import EXECUTORS
from gpt2kit.model_runtime.families import TRAINS_ON_SPEECH, Family, check_sources, family_of
from gpt2kit.reference.variants import variant_argument

EXPERIMENTS = ("runtime", "breakdown", "graph-memory")


class Study:
    """The model, the prompt and the configurations every experiment shares."""

    def __init__(self, family: Family, config, parameters: dict, max_length: int, beams: int, prompt_length: int,
                 backend):
        self.family, self.name = family, family.name
        self.parameters = parameters  # also handed to transformers
        self.model = model = family.model(config, parameters, backend=backend)
        self.max_length, self.beams = max_length, beams
        self.prompt = [int(t) for t in np.random.default_rng(0).integers(0, model.config.vocab_size, prompt_length)]
        self.new_tokens = max_length - prompt_length
        self.search = BeamSearch(beams, length_penalty=1.0, early_stopping=False)
        self.executors = {}

    def executor(self, name: str):
        if name not in self.executors:
            self.executors[name] = make_executor(self.model, name)
        return self.executors[name]

    def beam_run(self, name: str, clock=None):
        return self.executor(name).beam_search([self.prompt], self.new_tokens, self.search, clock=clock)

    def greedy_run(self, name: str):
        return self.executor(name).generate([self.prompt], self.new_tokens, GREEDY, stop_at_end_of_text=False)

    def attrs(self, search: str) -> dict:
        return {"Model": self.name, "Search": search, "Tokens": f"{len(self.prompt)}->{self.max_length}"}


def timed(run, runs: int, label: str) -> list[float]:
    """Seconds of each of `runs` calls of run(), after one warm-up call, each after a synchronize."""
    import cupy

    started = time.perf_counter()
    run()
    cupy.cuda.Device().synchronize()
    print(f"  {label}: warm-up {time.perf_counter() - started:.2f} s", flush=True)
    seconds = []
    for number in range(runs):
        cupy.cuda.Device().synchronize()
        started = time.perf_counter()
        run()
        cupy.cuda.Device().synchronize()
        seconds.append(time.perf_counter() - started)
        print(f"  {label}: run {number + 1}/{runs} {seconds[-1]:.3f} s", flush=True)
    return seconds


def grape_gpu_seconds(study: Study, beams: bool) -> float:
    """GPU seconds of a whole grape run's prefill and steps, its graphs queued back to back."""
    import cupy

    executor = study.executor("grape")
    run = executor.run(study.beams if beams else 1)
    stages = ([run.reorder_stage] if beams else []) + [run.model_stage, *run.choose_stages.values()]
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    prompts = np.array([study.prompt], np.int32)
    with run.stream:
        start.record()
        if beams:
            run.start_beams(prompts, study.search, study.max_length)
        else:
            run.decoder.prefill_on_device(prompts)
        for _ in range(study.new_tokens - 1):
            for stage in stages:
                stage(run.stream)
        end.record()
    end.synchronize()
    return cupy.cuda.get_elapsed_time(start, end) / 1e3


def hf_runs(study: Study, runs: int) -> dict[str, list[float]]:
    import torch

    model = study.family.transformers_model(study.model.config, study.parameters, "cuda")
    ids = torch.tensor([study.prompt], device="cuda")

    def beam():
        with torch.no_grad():
            model.generate(ids, num_beams=study.beams, max_length=study.max_length, early_stopping=False,
                           length_penalty=1.0, do_sample=False, pad_token_id=50256)

    def greedy():
        with torch.no_grad():
            model.generate(ids, max_new_tokens=study.new_tokens, min_new_tokens=study.new_tokens, do_sample=False,
                           pad_token_id=50256)

    return {"beam": timed(beam, runs, "transformers beam"), "greedy": timed(greedy, runs, "transformers greedy")}


def runtime(study: Study, out: Path, runs: int, executors, with_hf: bool, device: str) -> list[Path]:
    print(f"runtime: {runs} timed runs per executor after a warm-up", flush=True)
    beams, greedy = [], []  # the figure shows the beam rows, then the greedy ones
    beam_attrs, greedy_attrs = study.attrs(f"beam{study.beams}"), study.attrs("greedy") | {"Batch": 1}
    for name in executors:
        beams.append(Timing(name, beam_attrs, timed(lambda: study.beam_run(name), runs, f"{name} beam{study.beams}")))
        greedy.append(Timing(name, greedy_attrs, timed(lambda: study.greedy_run(name), runs, f"{name} greedy")))
    grape_gpu = ({search: grape_gpu_seconds(study, search == "beam") for search in ("beam", "greedy")}
                 if "grape" in executors else {})
    if with_hf:
        import torch

        # transformers loads its own copy of the weights: the kit's executors (ptgraph's graph for every length
        # among them) go back to the device first, or GPT-J's copy finds no room on an 80 GB card
        study.executors.clear()
        give_back_memory()
        hf = hf_runs(study, runs)
        torch.cuda.empty_cache()  # transformers' weights go back to the device (GPT-J's are 24 GB)
        beams.append(Timing("transformers", beam_attrs, hf["beam"]))
        greedy.append(Timing("transformers", greedy_attrs, hf["greedy"]))
    table = [(b.name, statistics.median(b.seconds), statistics.median(g.seconds)) for b, g in zip(beams, greedy)]
    steps = study.new_tokens - 1
    print(f"\n{'executor':14s} {'beam s':>8s} {'beam ms/step':>12s} {'greedy s':>9s} {'greedy tok/s':>12s}")
    for name, beam_s, greedy_s in table:
        print(f"{name:14s} {beam_s:8.3f} {1e3 * beam_s / steps:12.3f} {greedy_s:9.3f} "
              f"{study.new_tokens / greedy_s:12.0f}")
    for search, gpu in grape_gpu.items():
        median = table[executors.index("grape")][1 if search == "beam" else 2]
        print(f"grape {search}: GPU {1e3 * gpu / steps:.3f} ms/step (its graphs back to back), wall "
              f"{1e3 * median / steps:.3f} ms/step: the host adds {100 * (median / gpu - 1):.1f}%")
    return list(write_speedometer(out, beams + greedy, device, study.name))


def breakdown(study: Study, out: Path, executors, device: str) -> list[Path]:
    print(f"breakdown: beam{study.beams}, one run per executor after a warm-up, CUDA events per stage", flush=True)
    rows = []
    for name in executors:
        study.beam_run(name)  # warm-up: every length reached, every graph captured
        clock = StageClock()
        study.beam_run(name, clock)
        ms = clock.milliseconds()
        rows.append(Breakdown(name, ms["InputPrep"], ms["Model"], ms["BeamSearch"]))
        print(f"  {name:10s} InputPrep {ms['InputPrep']:9.1f} ms  Model {ms['Model']:9.1f} ms  "
              f"BeamSearch {ms['BeamSearch']:9.1f} ms", flush=True)
    how = (f"beam{study.beams}, {len(study.prompt)}->{study.max_length} tokens, one run after a warm-up; "
           "CUDA events as each stage begins, no added syncs")
    return list(write_breakdown(out, rows, device, how, study.family.key))


def held_by(work) -> float:
    """MB that work() leaves held: CuPy pool bytes in use, plus the driver's memory outside the pool."""
    import cupy

    pool = cupy.get_default_memory_pool()

    def settled() -> tuple[int, int, int]:
        give_back_memory()  # what earlier work dropped goes back first
        return pool.used_bytes(), pool.total_bytes(), cupy.cuda.runtime.memGetInfo()[0]

    used, total, free = settled()
    work()
    used_after, total_after, free_after = settled()
    outside_pool = (free - free_after) - (total_after - total)
    print(f"    (pool in use +{(used_after - used) / 2**20:.1f} MB, driver outside the pool "
          f"{outside_pool / 2**20:+.1f} MB)", flush=True)
    return (used_after - used + max(outside_pool, 0)) / 2**20  # below the driver's resolution: 0


def graphs_held(study: Study, rows: int) -> tuple[float, int, float, int]:
    """(MB, graphs) of ptgraph over every length, then of grape, for `rows` rows (beams, or 1: greedy)."""
    ptgraph = make_executor(study.model, "ptgraph").decoder(rows)
    prompts = np.repeat(np.array([study.prompt], np.int32), rows, axis=0)
    ptgraph.prefill(prompts)
    ptgraph.step(prompts[:, 0])  # loads the kernels (and captures its own length)
    lengths = range(len(study.prompt) + 1, study.max_length - 1)
    ptgraph_mb = held_by(lambda: ptgraph.capture(lengths))
    ptgraph_mb *= len(ptgraph.graphs) / len(lengths)  # the one captured while loading weighs as the others

    grape = make_executor(study.model, "grape")
    if rows > 1:
        grape_mb = held_by(lambda: [grape.beam_search([study.prompt], 4, BeamSearch(rows)) for _ in range(2)])
    else:
        grape_mb = held_by(lambda: [grape.generate([study.prompt], 4, GREEDY) for _ in range(2)])
    grape_mb -= grape.run(rows).decoder.cache_bytes() / 2**20  # its KV cache (not graph memory)
    grape_graphs = sum(stage.graph is not None for run in grape.runs.values() for stage in run.stages())
    return ptgraph_mb, len(ptgraph.graphs), grape_mb, grape_graphs


def graph_memory(study: Study, out: Path, device: str) -> list[Path]:
    print("graph memory: every length of ptgraph against grape's shared graphs", flush=True)
    rows = []
    for label, batch in ((f"{study.name} beam{study.beams}", study.beams), (f"{study.name} greedy", 1)):
        ptgraph_mb, graphs, grape_mb, grape_graphs = graphs_held(study, batch)
        gc.collect()  # the graphs and the buffers they own go back before the next configuration
        rows.append(GraphMemory(label, ptgraph_mb, grape_mb))
        print(f"  {label}: ptgraph {graphs} graphs {ptgraph_mb:.1f} MB ({ptgraph_mb / graphs:.3f} MB each); "
              f"grape {grape_graphs} graphs {grape_mb:.1f} MB; {ptgraph_mb / grape_mb:.1f}x less", flush=True)
    # no token counts here: the figure also holds the rows of other models' runs, of other lengths
    return list(write_graph_memory(out, rows, device, study.name))


def main(argv=None) -> int:
    parser = OneLineArgumentParser(prog="python -m gpt2kit.benchmarks.grape_study", description=__doc__.splitlines()[0])
    parser.add_argument("experiment", choices=EXPERIMENTS + ("all",))
    parser.add_argument("--out", type=Path, default=Path("results/grape"), help="directory for the CSVs and PNGs")
    parser.add_argument("--model", default="random", help="any model python -m gpt2kit takes: a checkpoint, an HF "
                                                          "directory, a hub name, random:gpt-j-6b (default: random, "
                                                          "GPT-2 124M); or a Wav2Vec2's, e.g. wav2vec2 (base, "
                                                          "random weights): its training")
    parser.add_argument("--runs", type=POSITIVE_INT, default=5, help="timed runs per executor (default 5)")
    parser.add_argument("--max-length", type=checked(int, lambda n: 7 <= n, "an integer >= 7"), default=1024,
                        help="prompt plus new tokens (default 1024)")
    parser.add_argument("--beams", type=checked(int, lambda n: 2 <= n <= 16, "an integer in 2..16"), default=5)
    parser.add_argument("--executors", default=",".join(EXECUTORS),
                        type=checked(lambda s: s.split(","), lambda names: set(names) <= set(EXECUTORS),
                                     f"a comma-separated list of {', '.join(EXECUTORS)}"))
    parser.add_argument("--no-hf", action="store_true", help="leave out transformers' reference rows")
    parser.add_argument("--variant", nargs="*", default=[], type=variant_argument,
                        help="solution variants to run the kit's kernels on (the fused decode step's, for instance)")
    parser.add_argument("--batch", type=POSITIVE_INT, default=4, help="wav2vec2: utterances a batch (default 4)")
    parser.add_argument("--steps", type=POSITIVE_INT, default=20, help="wav2vec2: training steps a run (default 20)")
    args = parser.parse_args(argv)

    def body() -> int:
        from gpt2kit.model_runtime.checkpoint_files import CheckpointError

        experiments = EXPERIMENTS if args.experiment == "all" else (args.experiment,)
        # what can be checked at once, before hours on a GPU: the paths, then what must be installed
        check_writable_directory(args.out, f"--out {args.out}")
        check_sources(args.model)
        family = family_of(args.model)
        check_installed(FIGURES | (TRANSFORMERS if "runtime" in experiments and not args.no_hf else {}))
        exit_without_gpu("gpt2kit.benchmarks.grape_study", "cannot run")
        if family.does == TRAINS_ON_SPEECH:
            from gpt2kit.benchmarks.speech_study import run_study

            written = run_study(family, args.model, experiments, args.out, args.runs, args.executors,
                                not args.no_hf, args.batch, args.steps)
            print("wrote " + ", ".join(str(p) for p in written))
            return 0
        import cupy  # after the GPU check: a machine without a GPU may have no CuPy either

        backend = make_backend("kernels", variants=tuple(args.variant))  # a variant unknown: refused before loading

        config, params = family.load(args.model, lambda line: print(line, flush=True))
        if args.max_length > config.max_T:
            raise CheckpointError(f"--max-length {args.max_length} exceeds the model's context of {config.max_T}")
        if "runtime" in experiments and not args.no_hf:
            check_room_for_transformers(config, "--no-hf")
        study = Study(family, config, params, args.max_length, args.beams, prompt_length=5, backend=backend)
        device = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
        print(f"{study.name} {config.num_parameters() / 1e6:.0f}M float32 on {device}; prompt of 5 random tokens, "
              f"up to {args.max_length}; writing to {args.out}", flush=True)
        written = []
        if "graph-memory" in experiments:  # first: nothing else holds graphs yet
            written += graph_memory(study, args.out, device)
        if "runtime" in experiments:
            written += runtime(study, args.out, args.runs, args.executors, not args.no_hf, device)
        if "breakdown" in experiments:
            written += breakdown(study, args.out, args.executors, device)
        print("wrote " + ", ".join(str(p) for p in written))
        return 0

    return run_command("python -m gpt2kit.benchmarks.grape_study", body)


if __name__ == "__main__":
    sys.exit(main())
