"""Time every host function, and every milestone variant, at GPT-2 124M sizes against gold and
the card's ceilings.

    python -m gpt2kit.benchmarks.kernels [--kernels DIR] [--only NAME] [--profile P] [--csv results.csv]

The rows are the benchmark sizes of the specs in reference/specs/: B=8, T=1024,
C=768, NH=12; the matmul at OC = 2304 (qkv), 768 (attention projection), 3072 (MLP
up) and 50257 (LM head). After the host functions come the variants of
reference/variants.py that live in modules of their own (the TF32 and cuBLAS
matmuls; the others are the host functions' own modules, already timed); a row whose
function is still a starter kit's stub is named, not timed. Timing:
CUDA events around each call, after warm-up, median of many calls. The calls are
queued behind a short spin kernel so that Python's launch overhead never leaves the
GPU idle between the events: the numbers are GPU time.

Ceilings measured here, not taken from a datasheet: the copy bandwidth of a 1 GiB
device-to-device copy (bytes read + written; "%copy"), and of a copy that moves the
row's own bytes ("%same": a small copy does not reach the 1 GiB rate, since the
card's ramp-up and tail weigh more), gold's matmul rate (cuBLAS in float32),
and for a row under the tf32 profile, cuBLAS in TF32 mode (the same call with the
cuBLAS handle's math mode set to CUBLAS_TF32_TENSOR_OP_MATH): "vs ceiling" compares
each matmul with the cuBLAS of its own precision. A row's profile is --profile, else
$KIT_PROFILE, else its variant's own, else fp32 (reference.variants.resolve_profile).
GB/s counts the fewest bytes the operation must move (each input read once, each
output written once); TFLOP/s counts useful flops (for attention, only the causal half).
"""

import contextlib
import csv
import statistics
import sys

import numpy as np

from gpt2kit.kernel_runtime.commands import OneLineArgumentParser, run_command
from gpt2kit.kernel_runtime.device import exit_without_gpu
from gpt2kit.kernel_runtime.files import replacing
from gpt2kit.kernel_runtime.loader import use_kernels
from gpt2kit.reference.execution import call_arguments
from gpt2kit.reference.registry import SPECS, build, host_function, not_written_yet
from gpt2kit.reference.precision import TF32
from gpt2kit.reference.variants import VARIANTS, add_profile_option, resolve_profile

SPIN_SOURCE = r"""
extern "C" __global__ void spin(long long nanoseconds) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < nanoseconds);
}
"""


def gpu_times_ms(call, *, batches=4, per_batch=16, warmup=3):
    """Median GPU milliseconds of `call()`, each call timed by its own pair of events."""
    import cupy

    spin = cupy.RawKernel(SPIN_SOURCE, "spin")
    for _ in range(warmup):
        call()
    cupy.cuda.runtime.deviceSynchronize()
    samples = []
    for _ in range(batches):
        events = [(cupy.cuda.Event(), cupy.cuda.Event()) for _ in range(per_batch)]
        spin((1,), (1,), (np.int64(20_000_000),))  # 20 ms of queue for the host to fill
        for start, end in events:
            start.record()
            call()
            end.record()
        cupy.cuda.runtime.deviceSynchronize()
        samples += [cupy.cuda.get_elapsed_time(start, end) for start, end in events]
    return statistics.median(samples)


def copy_bandwidth_gbs(nbytes: int = 2**31) -> float:
    """GB/s of a device-to-device copy that moves `nbytes` (half read, half written; default 1 GiB each way)."""
    import cupy

    n = max(nbytes // 8, 1)  # float32s each way
    src, dst = cupy.ones(n, np.float32), cupy.empty(n, np.float32)
    ms = gpu_times_ms(lambda: cupy.copyto(dst, src), batches=2, per_batch=10)
    return 2 * n * 4 / ms / 1e6


def workloads(only: str = "", profile: str | None = None):
    """(row name, spec, module, profile, case) for every timed call of the host functions and variants whose
    name contains `only`: each spec's own module, then the variants that live in modules of their own. A
    row's profile is resolved from `profile` (--profile) and its variant."""
    rows = [(spec.function, spec, spec.module, resolve_profile(profile)) for spec in SPECS.values()]
    rows += [(v.name, SPECS[v.function], v.module, resolve_profile(profile, [v])) for v in VARIANTS.values()
             if v.module != SPECS[v.function].module]
    return [(*row, case) for row in rows if only in row[0] or only in row[1].function
            for case in row[1].benchmark_cases()]


CUBLAS_TF32_TENSOR_OP_MATH = 3  # cublasMath_t (cublas_api.h); CuPy's bindings do not name it


@contextlib.contextmanager
def cublas_tf32():
    """cuBLAS in TF32 mode inside the block: single-precision GEMMs on the tensor cores."""
    import cupy
    from cupy.cuda import cublas

    handle = cupy.cuda.device.get_cublas_handle()
    previous = cublas.getMathMode(handle)
    cublas.setMathMode(handle, CUBLAS_TF32_TENSOR_OP_MATH)
    try:
        yield
    finally:
        cublas.setMathMode(handle, previous)


def main(argv=None) -> int:
    parser = OneLineArgumentParser(prog="python -m gpt2kit.benchmarks.kernels", description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", help="kernels/ directory to time (default: this repo's)")
    parser.add_argument("--only", default="", help="time only the host functions whose name contains this")
    add_profile_option(parser.add_argument, "whose cuBLAS is a matmul's ceiling")
    parser.add_argument("--csv", help="also write the table to this CSV file")
    args = parser.parse_args(argv)
    return run_command("gpt2kit.benchmarks.kernels", lambda: benchmark(args), error_status=2)


def benchmark(args) -> int:
    timed = workloads(args.only, args.profile)
    use_kernels(args.kernels)  # a wrong path is named before a missing GPU
    exit_without_gpu("gpt2kit.benchmarks.kernels", "cannot run")

    import cupy

    from gpt2kit.reference import gold

    stubs = {name: not_written_yet([spec.function], module) for name, spec, module, _, _ in timed}
    rows = [(name, spec, case, host_function(spec.function, module), profile)
            for name, spec, module, profile, case in timed if not stubs[name]]
    device = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(f"measuring copy bandwidth on {device} ...", flush=True)
    copy_gbs = copy_bandwidth_gbs()
    print(f"copy bandwidth (1 GiB device-to-device, read + write): {copy_gbs:.0f} GB/s\n")

    header = (f"{'host function':18s} {'size':32s} {'ms':>8s} {'gold ms':>8s} {'vs gold':>8s} "
              f"{'GB/s':>7s} {'%copy':>6s} {'%same':>6s} {'TFLOP/s':>8s} {'gold TF/s':>9s} {'TF32 TF/s':>9s} {'vs ceiling':>10s}")
    print(header)
    for name, stub in stubs.items():
        if stub:  # a starter kit's stub: named, not timed
            print(f"{name:18s} {stub}")
    table, ceilings = [], {}  # case id -> (gold ms, cuBLAS TF32 ms, same-size copy GB/s): timed once per size
    for name, spec, case, function, profile in rows:
        call_args = tuple(call_arguments(build(case), cupy).values())
        ms = gpu_times_ms(lambda: function(*call_args))
        if case.id not in ceilings:
            gold_ms = gpu_times_ms(lambda: getattr(gold, spec.function)(*call_args))
            tf32_ms = float("nan")
            if spec.products is not None:  # a matmul: cuBLAS in TF32 mode too, the ceiling of the tf32 profile
                with cublas_tf32():
                    tf32_ms = gpu_times_ms(lambda: getattr(gold, spec.function)(*call_args))
            ceilings[case.id] = gold_ms, tf32_ms, copy_bandwidth_gbs(spec.traffic(case.size))
        gold_ms, tf32_ms, same_size_copy_gbs = ceilings[case.id]
        nbytes, flops = spec.traffic(case.size), spec.flops(case.size) if spec.flops else 0
        ceiling_ms = tf32_ms if profile is TF32 else gold_ms
        size = case.id.rsplit("-seed", 1)[0]
        row = dict(function=name, size=size, ms=ms, gold_ms=gold_ms, speedup_vs_gold=gold_ms / ms,
                   gbs=nbytes / ms / 1e6, pct_copy=100 * nbytes / ms / 1e6 / copy_gbs,
                   pct_same_size_copy=100 * nbytes / ms / 1e6 / same_size_copy_gbs,
                   tflops=flops / ms / 1e9, gold_tflops=flops / gold_ms / 1e9, tf32_tflops=flops / tf32_ms / 1e9,
                   vs_ceiling=ceiling_ms / ms if flops else float("nan"))
        table.append(row)
        tf = (f"{row['tflops']:8.1f} {row['gold_tflops']:9.1f} {row['tf32_tflops']:9.1f} {row['vs_ceiling']:9.2f}x"
              if flops else "")
        print(f"{name:18s} {size:32s} {ms:8.3f} {gold_ms:8.3f} {row['speedup_vs_gold']:7.2f}x "
              f"{row['gbs']:7.0f} {row['pct_copy']:5.0f}% {row['pct_same_size_copy']:5.0f}% {tf}", flush=True)
        del call_args
        cupy.get_default_memory_pool().free_all_blocks()
    if not table:
        print("\nnothing was timed: every row's function is still a stub")
        return 1
    if args.csv:
        with replacing(args.csv) as partial, open(partial, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(table[0]))
            writer.writeheader()
            writer.writerows(table)
        print(f"\nwrote {args.csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
