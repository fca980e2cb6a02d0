"""Time every kernel at GPT-2 124M sizes against gold and the card's ceilings.

    python -m benchmarks.kernels [--kernels DIR] [--csv results.csv]

Sizes: B=8, T=1024, C=768, NH=12; the matmul at OC = 2304 (qkv), 768 (attention
projection), 3072 (MLP up) and 50257 (LM head). Timing: CUDA events around each
call, after warm-up, median of many calls. The calls are queued behind a short
spin kernel so that Python's launch overhead never leaves the GPU idle between the
events: the numbers are GPU time.

Ceilings measured here, not taken from a datasheet: the copy bandwidth of a 1 GiB
device-to-device copy (bytes read + written) and gold's matmul rate. GB/s counts the
fewest bytes the operation must move (each input read once, each output written
once); TFLOP/s counts useful flops (for attention, only the causal half).
"""

import argparse
import csv
import statistics
import sys

import numpy as np

from gpt2.cuda import gpu_unavailable_reason, load_kernel_package
from reference.checks import FUNCTIONS

B, T, C, NH = 8, 1024, 768, 12
V, MAX_T = 50257, 1024
MATMUL_OUT_CHANNELS = (2304, 768, 3072, 50257)

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


def copy_bandwidth_gbs():
    import cupy

    n = 2**28  # 1 GiB of float32
    src, dst = cupy.ones(n, np.float32), cupy.empty(n, np.float32)
    ms = gpu_times_ms(lambda: cupy.copyto(dst, src), batches=2, per_batch=10)
    return 2 * n * 4 / ms / 1e6


def workloads():
    """(name, size, make_args, bytes, flops) for every timed call."""
    import cupy

    rng = cupy.random.default_rng(0)

    def normal(*shape):
        return rng.standard_normal(shape, dtype=np.float32)

    def empty(*shape):
        return cupy.empty(shape, np.float32)

    N = B * T * C
    yield ("encoder", f"B{B} T{T} C{C}",
           lambda: (empty(B, T, C), rng.integers(0, V, (B, T)).astype(np.int32), normal(V, C), normal(MAX_T, C), B, T, C),
           4 * (N + N + T * C + B * T), 0)
    yield ("layernorm", f"B{B} T{T} C{C}",
           lambda: (empty(B, T, C), empty(B, T), empty(B, T), normal(B, T, C), normal(C), normal(C), B, T, C),
           4 * (2 * N + 2 * C + 2 * B * T), 0)
    for OC in MATMUL_OUT_CHANNELS:
        yield ("matmul", f"{B * T}x{C} @ {C}x{OC}",
               lambda OC=OC: (empty(B, T, OC), normal(B, T, C), normal(OC, C), normal(OC), B, T, C, OC),
               4 * (N + OC * C + B * T * OC + OC), 2 * B * T * C * OC)
    causal = T * (T + 1) // 2
    yield ("attention", f"B{B} T{T} C{C} NH{NH}",
           lambda: (empty(B, T, C), empty(3 * B * T * C), empty(B, NH, T, T), normal(B, T, 3 * C), B, T, C, NH),
           4 * (3 * N + B * NH * T * T + N), 2 * 2 * B * NH * causal * (C // NH))
    yield ("softmax", f"N{B * NH} T{T}",
           lambda: (empty(B * NH, T, T), normal(B * NH, T, T), 0.125, B * NH, T),
           4 * B * NH * (causal + T * T), 0)
    yield ("residual", f"N{N}", lambda: (empty(N), normal(N), normal(N), N), 12 * N, 0)
    yield ("gelu", f"N{4 * N}", lambda: (empty(4 * N), normal(4 * N), 4 * N), 8 * 4 * N, 0)



def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.kernels", description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", help="kernels/ directory to time (default: this repo's)")
    parser.add_argument("--csv", help="also write the table to this CSV file")
    args = parser.parse_args(argv)
    reason = gpu_unavailable_reason()
    if reason is not None:
        print(f"benchmarks.kernels: cannot run: {reason}", file=sys.stderr)
        return 2
    import cupy

    from reference import gold

    package = load_kernel_package(args.kernels)
    device = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(f"measuring copy bandwidth on {device} ...", flush=True)
    copy_gbs = copy_bandwidth_gbs()
    print(f"copy bandwidth (1 GiB device-to-device, read + write): {copy_gbs:.0f} GB/s\n")

    header = (f"{'kernel':10s} {'size':22s} {'ms':>8s} {'gold ms':>8s} {'vs gold':>8s} "
              f"{'GB/s':>7s} {'%copy':>6s} {'TFLOP/s':>8s} {'gold TF/s':>9s}")
    print(header)
    rows = []
    for name, size, make_args, nbytes, flops in workloads():
        call_args = make_args()
        ms = gpu_times_ms(lambda: getattr(package, FUNCTIONS[name])(*call_args))
        gold_ms = gpu_times_ms(lambda: getattr(gold, FUNCTIONS[name])(*call_args))
        row = dict(kernel=name, size=size, ms=ms, gold_ms=gold_ms, speedup_vs_gold=gold_ms / ms,
                   gbs=nbytes / ms / 1e6, pct_copy=100 * nbytes / ms / 1e6 / copy_gbs,
                   tflops=flops / ms / 1e9, gold_tflops=flops / gold_ms / 1e9)
        rows.append(row)
        tf = f"{row['tflops']:8.1f} {row['gold_tflops']:9.1f}" if flops else f"{'':8s} {'':9s}"
        print(f"{name:10s} {size:22s} {ms:8.3f} {gold_ms:8.3f} {row['speedup_vs_gold']:7.2f}x "
              f"{row['gbs']:7.0f} {row['pct_copy']:5.0f}% {tf}", flush=True)
        del call_args
        cupy.get_default_memory_pool().free_all_blocks()
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        print(f"\nwrote {args.csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
