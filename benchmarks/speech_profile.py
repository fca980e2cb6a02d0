"""Where a Wav2Vec2 training step's GPU time goes: host function by host function.

    python -m gpt2kit.benchmarks.speech_profile [--batch 4] [--seconds 16] [--runs 5]

Wav2Vec2ForCTC base (random weights), float32, on the kernels backend: one training
step (forward, CTC loss, backward) of `--batch` utterances of `--seconds` each, run
`--runs` times after a warm-up, with a CUDA event recorded before and after every
host function call. A call's time is its median over the runs. The convolutions and
matmuls, which are bound by arithmetic, also show their TFLOP/s, against cuBLAS's
float32 matmul measured here on a 4096 x 4096 x 4096 product ("%cuBLAS"); they are
listed again shape by shape. The optimizer is left out: it is the same for every
length and shows in the Grape study's breakdown (wav2vec2_train_profile.csv).
"""

import collections
import statistics
import sys

import numpy as np

from gpt2kit.benchmarks.kernels import gpu_times_ms
from gpt2kit.kernel_runtime.commands import POSITIVE_INT, OneLineArgumentParser, run_command
from gpt2kit.kernel_runtime.device import exit_without_gpu

SAMPLE_RATE = 16000


def main(argv=None) -> int:
    parser = OneLineArgumentParser(prog="python -m gpt2kit.benchmarks.speech_profile",
                                   description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=POSITIVE_INT, default=4, help="utterances a step (default %(default)s)")
    parser.add_argument("--seconds", type=POSITIVE_INT, default=16,
                        help="each utterance's length (default %(default)s)")
    parser.add_argument("--runs", type=POSITIVE_INT, default=5, help="timed steps (default %(default)s)")
    args = parser.parse_args(argv)
    exit_without_gpu("gpt2kit.benchmarks.speech_profile", "cannot run")
    return run_command("gpt2kit.benchmarks.speech_profile", lambda: benchmark(args), error_status=2)


ARITHMETIC = {  # the calls counted in FLOPs: where their sizes start among their arguments, and how many
    "matmul_forward": (4, 4), "matmul_backward": (6, 4), "conv1d_forward": (4, 9), "conv1d_backward": (6, 9)}


def sizes(name: str, args: tuple) -> tuple:
    """A matmul's (B, T, C, OC), a convolution's (B, T, C, OC, K, stride, padding, groups, T_out)."""
    start, count = ARITHMETIC[name]
    return args[start:start + count]


def flops(name: str, args: tuple) -> int:
    """Floating-point operations of a convolution or matmul call (multiply and add: 2 per product term); 0 else."""
    if name not in ARITHMETIC:
        return 0
    if name.startswith("matmul"):
        B, T, C, OC = sizes(name, args)
        return 2 * B * T * C * OC * (1 if name == "matmul_forward" else 2)  # backward: dinp and dweight
    B, T, C, OC, K, stride, padding, groups, T_out = sizes(name, args)
    products = 2 * B * T_out * OC * (C // groups) * K
    if name == "conv1d_forward":
        return products
    return products * (2 if args[0] is not None else 1)  # dweight, and dinp unless not wanted (the audio's)


def shape(name: str, args: tuple) -> str:
    if name.startswith("matmul"):
        B, T, C, OC = sizes(name, args)
        return f"B{B} T{T} {C}->{OC}"
    B, T, C, OC, K, stride, padding, groups, T_out = sizes(name, args)
    return f"B{B} T{T}->{T_out} {C}->{OC} K{K} stride{stride}" + (f" groups{groups}" if groups > 1 else "")


class CallClock:
    """Wraps every host function of `ops` so that each call is recorded with CUDA events around it."""

    def __init__(self, ops):
        self.calls = []  # (name, args, start event, end event), in the order of the step
        for name in [n for n in dir(ops) if not n.startswith("_") and callable(getattr(ops, n))]:
            setattr(ops, name, self.timed(name, getattr(ops, name)))

    def timed(self, name, function):
        import cupy

        def call(*args):
            start, end = cupy.cuda.Event(), cupy.cuda.Event()
            start.record()
            function(*args)
            end.record()
            self.calls.append((name, args, start, end))
        return call

    def milliseconds(self) -> list[float]:
        import cupy

        cupy.cuda.Device().synchronize()
        return [cupy.cuda.get_elapsed_time(start, end) for _, _, start, end in self.calls]


def cublas_float32_tflops(n: int = 4096) -> float:
    import cupy

    a, b = cupy.ones((n, n), np.float32), cupy.ones((n, n), np.float32)
    ms = gpu_times_ms(lambda: cupy.matmul(a, b), batches=2, per_batch=8)
    return 2 * n**3 / ms / 1e9


def benchmark(args) -> int:
    import cupy

    from gpt2kit.wav2vec2.checkpoint import random_parameters
    from gpt2kit.wav2vec2.config import PRESETS
    from gpt2kit.wav2vec2.model import Wav2Vec2ForCTC

    config = PRESETS["base"]
    model = Wav2Vec2ForCTC(config, random_parameters(config, seed=0), backend="kernels")
    B, S = args.batch, args.seconds * SAMPLE_RATE
    device = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(f"one training step of Wav2Vec2 base, float32, {B} utterances of {args.seconds} s, on {device}", flush=True)
    ceiling = cublas_float32_tflops()
    print(f"cuBLAS float32 (4096^3 matmul): {ceiling:.1f} TFLOP/s")
    rng = np.random.default_rng(0)
    audio = rng.standard_normal((B, S)).astype(np.float32)
    audio_lengths = np.full(B, S, np.int32)
    label_lengths = np.full(B, 12 * args.seconds, np.int32)  # 12 characters a second: every utterance feasible
    labels = rng.integers(1, config.vocab_size, (B, int(label_lengths.max())), dtype=np.int32)
    a, d, grads = model.new_activations(B, S), model.new_gradients(B, S), model.zero_grads()
    clock = CallClock(model.backend.ops)
    runs = []
    for run in range(args.runs + 1):  # the first is the warm-up: it compiles and loads the kernels
        clock.calls = []
        model.forward(audio, audio_lengths, a)
        model.loss(labels, label_lengths, a, d)
        model.backward(a, d, grads)
        runs.append(clock.milliseconds())
        print(f"  step {run}/{args.runs}{' (warm-up)' if run == 0 else ''}: {sum(runs[-1]):.1f} ms", flush=True)
    calls = [(name, call_args) for name, call_args, _, _ in clock.calls]
    ms = [statistics.median(times) for times in zip(*runs[1:])]
    print_tables(calls, ms, ceiling)
    return 0


def print_tables(calls: list, ms: list[float], ceiling: float) -> None:
    total = sum(ms)
    per_function, count, work = collections.defaultdict(float), collections.Counter(), collections.Counter()
    per_shape = collections.defaultdict(float)
    for (name, call_args), call_ms in zip(calls, ms):
        call_flops = flops(name, call_args)
        keys = [name, (name, shape(name, call_args))] if call_flops else [name]
        for key in keys:
            count[key] += 1
            work[key] += call_flops
        per_function[name] += call_ms
        if call_flops:
            per_shape[keys[1]] += call_ms

    def rate(key, call_ms: float) -> str:
        tflops = work[key] / call_ms / 1e9
        return f" {tflops:8.1f} {100 * tflops / ceiling:7.0f}%" if work[key] else ""

    print(f"\n{'host function':34s} {'calls':>5s} {'ms':>8s} {'share':>6s} {'TFLOP/s':>8s} {'%cuBLAS':>8s}")
    for name, function_ms in sorted(per_function.items(), key=lambda item: -item[1]):
        print(f"{name:34s} {count[name]:5d} {function_ms:8.2f} {100 * function_ms / total:5.1f}%"
              + rate(name, function_ms))
    print(f"{'every call, summed':34s} {len(calls):5d} {total:8.2f}")
    print(f"\n{'convolutions and matmuls by shape':58s} {'calls':>5s} {'ms':>8s} {'TFLOP/s':>8s} {'%cuBLAS':>8s}")
    for key, shape_ms in sorted(per_shape.items(), key=lambda item: -item[1]):
        print(f"{key[0] + ' ' + key[1]:58s} {count[key]:5d} {shape_ms:8.2f}" + rate(key, shape_ms))


if __name__ == "__main__":
    sys.exit(main())
