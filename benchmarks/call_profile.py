"""Host function by host function: where a step's GPU time goes, shared by the profiles of a step
(benchmarks.speech_profile, benchmarks.training --profile).

CallClock wraps every host function of a backend's ops with CUDA events before and after each
call; print_tables sums a step's calls by host function and, for the matmuls and convolutions,
by shape, with their TFLOP/s against cuBLAS's float32 rate measured here.
"""

import collections
import statistics

import numpy as np

from gpt2kit.benchmarks.kernels import gpu_times_ms


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


def profiled_runs(ops, run_step, runs: int) -> tuple[list, list[float]]:
    """run_step() `runs` times after a warm-up run (which compiles and loads the kernels), every host function of
    `ops` timed: (the calls in order, as (name, arguments), and each call's median milliseconds). Prints each
    run's total."""
    clock = CallClock(ops)
    times = []
    for run in range(runs + 1):
        clock.calls = []
        run_step()
        times.append(clock.milliseconds())
        print(f"  step {run}/{runs}{' (warm-up)' if run == 0 else ''}: {sum(times[-1]):.1f} ms", flush=True)
    calls = [(name, call_args) for name, call_args, _, _ in clock.calls]
    return calls, [statistics.median(call_times) for call_times in zip(*times[1:])]


def cublas_float32_tflops(n: int = 4096) -> float:
    import cupy

    a, b = cupy.ones((n, n), np.float32), cupy.ones((n, n), np.float32)
    ms = gpu_times_ms(lambda: cupy.matmul(a, b), batches=2, per_batch=8)
    return 2 * n**3 / ms / 1e9


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
