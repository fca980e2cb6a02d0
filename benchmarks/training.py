"""GPT-2 training steps: the kit's kernels against PyTorch (transformers' GPT2LMHeadModel), and their loss curves.

    python -m gpt2kit.benchmarks.training [--model random:124M] [--batch 4] [--tokens 1024] [--runs 10]
                                  [--curve-steps 60] [--out results/training] [--no-compile]
                                  [--variant NAME ...] [--profile]

One training step is forward, loss, backward and AdamW on a batch of B rows of T
tokens (llm.c's default: GPT-2 124M, B=4, T=1024, float32). Timed after three
warm-up steps, each step to its loss on the host (so each ends synchronised), the
median of --runs:

* kit, CUDA graphs: training.step.GraphTrainingStep (forward and backward replayed);
* kit, launched: training.step.TrainingStep, every kernel launched from Python;
  both on the kit's kernels, or with --variant's modules in place of their host
  functions' (`--variant matmul_3xtf32`: the forward's matmuls on the tensor cores too,
  at float32 accuracy, as the backward's are), the rows then named "kit + matmul_3xtf32";
* PyTorch eager: the same weights in transformers' model on the same GPU, float32
  (TF32 off, as PyTorch's default is), torch.optim.AdamW with the same settings;
* PyTorch torch.compile: that model's forward compiled (default mode).

PyTorch eager runs first, so every row says how it compares with it; the table goes to
training_step.csv in --out. Then --curve-steps steps of the kit and of PyTorch eager from
the same weights on the same batches of the same text (the kit's READMEs, as python -m
gpt2.train reads them): training_loss.csv and training_loss.png in --out, the two curves
on one plot. --profile then times the kit's launched step host function by host function
(CUDA events around every call, each call's median over --runs steps: the table of
benchmarks.speech_profile, benchmarks.call_profile's).
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
import time
from pathlib import Path


from gpt2kit.benchmarks.call_profile import cublas_float32_tflops, print_tables, profiled_runs
from gpt2kit.benchmarks.grape_tables import FIGURES, pyplot, read_csv, save_figure, write_csv
from gpt2kit.benchmarks.transformers_model import TRANSFORMERS, silence_tf32_advice
from gpt2kit.gpt2.checkpoint import load as load_gpt2, transformers_model
from gpt2kit.gpt2.model import GPT2
from gpt2kit.gpt2.train import kit_texts, read_texts
from gpt2kit.kernel_runtime.commands import POSITIVE_INT, OneLineArgumentParser, check_installed, run_command
from gpt2kit.kernel_runtime.device import exit_without_gpu, first_line
from gpt2kit.kernel_runtime.files import check_writable_directory
from gpt2kit.model_runtime.backends import make_backend
from gpt2kit.reference.variants import variant_argument
from gpt2kit.training.data import TextBatches
from gpt2kit.training.step import AdamW, GraphTrainingStep, TrainingStep

OPTIMIZER = AdamW(learning_rate=3e-4, weight_decay=0.0)  # llm.c's
CURVE_COLUMNS = ("step", "kit", "pytorch")  # LossPoint's
STEP_COLUMNS = ("method", "ms_per_step", "tokens_per_s", "vs_pytorch_eager")  # StepTime's
METHOD_WIDTH = 36  # "kit + matmul_3xtf32, CUDA graphs" and the like


def timed_steps(step, batches, runs: int) -> float:
    """Median seconds of one step (each ends with its loss on the host), after three warm-up steps."""
    for _ in range(3):
        step(*next(batches))
    times = []
    for _ in range(runs):
        inputs, targets = next(batches)
        started = time.perf_counter()
        step(inputs, targets)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def pytorch_step(config, params, compiled: bool):
    """step(inputs, targets) -> loss on the host: transformers' model holding `params` on the GPU, trained by
    torch.optim.AdamW with OPTIMIZER's settings (dropout off: the model stays in eval mode, as the kit has none)."""
    import torch

    model = transformers_model(config, params, "cuda")
    if compiled:
        silence_tf32_advice()
    forward = torch.compile(model) if compiled else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=OPTIMIZER.learning_rate,
                                  betas=(OPTIMIZER.beta1, OPTIMIZER.beta2), eps=OPTIMIZER.eps,
                                  weight_decay=OPTIMIZER.weight_decay)

    def step(inputs, targets) -> float:
        optimizer.zero_grad(set_to_none=True)
        logits = forward(torch.as_tensor(inputs, dtype=torch.long, device="cuda")).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 torch.as_tensor(targets, dtype=torch.long, device="cuda").reshape(-1))
        loss.backward()
        optimizer.step()
        return loss.item()

    return step


@dataclasses.dataclass
class StepTime:
    method: str
    seconds: float
    tokens: int  # per step
    eager_seconds: float

    def row(self) -> dict:
        return dict(method=self.method, ms_per_step=f"{1e3 * self.seconds:.2f}",
                    tokens_per_s=f"{self.tokens / self.seconds:.0f}",
                    vs_pytorch_eager=f"{self.eager_seconds / self.seconds:.3f}")

    def line(self) -> str:
        return (f"{self.method:{METHOD_WIDTH}s} {1e3 * self.seconds:9.1f} {self.tokens / self.seconds:9,.0f} "
                f"{self.eager_seconds / self.seconds:16.2f}x")


@dataclasses.dataclass
class LossPoint:
    step: int
    kit: float
    pytorch: float

    def row(self) -> dict:
        return dataclasses.asdict(self)


def write_curve(out: Path, kit: list[float], pytorch: list[float], title: str) -> tuple[Path, Path]:
    """training_loss.csv and .png: each step's loss, the kit's and PyTorch's."""
    rows = [LossPoint(n + 1, a, b) for n, (a, b) in enumerate(zip(kit, pytorch))]
    csv_path = write_csv(out / "training_loss.csv", CURVE_COLUMNS, rows)
    return csv_path, plot_curve(csv_path, title)


def plot_curve(csv_path: Path, title: str) -> Path:
    rows = read_csv(csv_path)
    steps = [int(r["step"]) for r in rows]
    figure, axes = pyplot().subplots(figsize=(7.0, 4.5))
    axes.plot(steps, [float(r["kit"]) for r in rows], label="the kit's kernels (CUDA graphs)", linewidth=2)
    axes.plot(steps, [float(r["pytorch"]) for r in rows], label="PyTorch eager (transformers)", linestyle="--")
    axes.set_xlabel("step")
    axes.set_ylabel("mean cross-entropy loss")
    axes.set_title(title, fontsize=9)
    axes.legend()
    return save_figure(figure, Path(csv_path).with_suffix(".png"))


def main(argv=None) -> int:
    parser = OneLineArgumentParser(prog="python -m gpt2kit.benchmarks.training", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="random:124M", help="a GPT-2 source (default %(default)s)")
    parser.add_argument("--batch", type=POSITIVE_INT, default=4)
    parser.add_argument("--tokens", type=POSITIVE_INT, default=1024)
    parser.add_argument("--runs", type=POSITIVE_INT, default=10, help="timed steps per method (default %(default)s)")
    parser.add_argument("--curve-steps", type=int, default=60, help="steps of the loss curves, 0 for none "
                                                                    "(default %(default)s)")
    parser.add_argument("--out", type=Path, default=Path("results/training"), help="where the curve goes")
    parser.add_argument("--no-compile", action="store_true", help="leave out torch.compile")
    parser.add_argument("--variant", nargs="*", default=[], type=variant_argument,
                        help="solution variants to run the kit's steps on")
    parser.add_argument("--profile", action="store_true",
                        help="last, the kit's launched step host function by host function")
    args = parser.parse_args(argv)
    return run_command("gpt2kit.benchmarks.training", lambda: benchmark(args), error_status=2)


def benchmark(args) -> int:
    check_writable_directory(args.out, f"--out {args.out}")
    check_installed(TRANSFORMERS | (FIGURES if args.curve_steps > 0 else {}))
    exit_without_gpu("gpt2kit.benchmarks.training", "cannot run")
    config, params = load_gpt2(args.model, lambda line: print(line, flush=True))
    B, T = args.batch, min(args.tokens, config.max_T)
    tokens = read_texts(kit_texts())
    print(f"GPT-2 {config.num_parameters() / 1e6:.0f}M, B={B}, T={T}, float32, AdamW lr "
          f"{OPTIMIZER.learning_rate}; median of {args.runs} steps after 3 warm-up ones", flush=True)
    print(f"{'method':{METHOD_WIDTH}s} {'ms/step':>9s} {'tok/s':>9s} {'vs PyTorch eager':>17s}")
    kit = GPT2(config, params, backend=make_backend("kernels", variants=tuple(args.variant)))
    kit_name = " + ".join(("kit", *args.variant))
    methods = [("PyTorch eager", lambda: pytorch_step(config, params, compiled=False)),
               (f"{kit_name}, CUDA graphs", lambda: GraphTrainingStep(kit, B, T, OPTIMIZER)),
               (f"{kit_name}, launched", lambda: TrainingStep(kit, B, T, OPTIMIZER))]
    if not args.no_compile:
        methods.append(("PyTorch torch.compile", lambda: pytorch_step(config, params, compiled=True)))
    times = []
    for name, make in methods:
        try:
            seconds = timed_steps(make(), TextBatches(tokens, B, T), args.runs)
        except Exception as err:  # torch.compile depends on the installed torch, triton and compiler
            if "compile" not in name:
                raise
            print(f"{name:{METHOD_WIDTH}s} could not run: {first_line(err)}", flush=True)
            continue
        times.append(StepTime(name, seconds, B * T, times[0].seconds if times else seconds))
        print(times[-1].line(), flush=True)
    print(f"wrote {write_csv(args.out / 'training_step.csv', STEP_COLUMNS, times)}", flush=True)
    if args.curve_steps > 0:
        curves = []
        for make in (lambda: GraphTrainingStep(GPT2(config, params, backend=kit.backend), B, T, OPTIMIZER),
                     lambda: pytorch_step(config, params, compiled=False)):
            step, batches = make(), TextBatches(tokens, B, T)
            curves.append([step(*next(batches)) for _ in range(args.curve_steps)])
        title = (f"GPT-2 {config.num_parameters() / 1e6:.0f}M from the same weights on the same batches of the kit's "
                 f"READMEs\nB={B}, T={T}, AdamW lr {OPTIMIZER.learning_rate}")
        paths = write_curve(args.out, *curves, title)
        worst = max(abs(a - b) / b for a, b in zip(*curves))
        print(f"loss curves: step {args.curve_steps} kit {curves[0][-1]:.4f}, PyTorch {curves[1][-1]:.4f}; largest "
              f"relative difference {worst:.2e}; wrote {', '.join(map(str, paths))}", flush=True)
    if args.profile:  # last: it wraps the kit's host functions for good
        profile_step(TrainingStep(kit, B, T, OPTIMIZER), TextBatches(tokens, B, T), args.runs)
    return 0


def profile_step(step: TrainingStep, batches, runs: int) -> None:
    """The kit's launched step, host function by host function (benchmarks.call_profile)."""
    ceiling = cublas_float32_tflops()
    print(f"\nthe kit's launched step, host function by host function; cuBLAS float32 (4096^3 matmul): "
          f"{ceiling:.1f} TFLOP/s", flush=True)
    calls, ms = profiled_runs(step.model.backend.ops, lambda: step(*next(batches)), runs)
    print_tables(calls, ms, ceiling)


if __name__ == "__main__":
    sys.exit(main())
