"""Where one decode step's time goes: each call of the step timed alone, and the step as a graph.

    python -m gpt2kit.benchmarks.decode [--batch 1 8] [--length 256] [--variant NAME ...]

GPT-2 124M (random weights), float32, a KV cache filled with `--length` tokens.
Every call of one decode step (gpt2.model.decode_launches) is recorded, then each
is timed on its own (CUDA events, after warm-up, median; queued behind a spin
kernel, so the numbers are GPU time) and summed per step name over the layers.
For the matmuls and the fused matmuls, which at a few rows are matrix-vector products
that stream their weights, GB/s counts every array they take once, against the
copy bandwidth measured here (1 GiB, "%copy") and against a copy of the call's own
bytes ("%same"). The last lines time the whole step replayed as one CUDA graph
(generation.decoding), whose kernels follow each other without the host: its time per
step sets the ceiling of decode tokens per second. On sm_90 and later it is timed
twice: with the kernels that wait for the previous one launched to overlap it, as
the model runs them, and with every launch ordinary (kernel_runtime.overlap).
"""

import collections
import sys

import numpy as np

from gpt2kit.benchmarks.kernels import copy_bandwidth_gbs, gpu_times_ms
from gpt2kit.model_runtime.backends import make_backend
from gpt2kit.gpt2.checkpoint import random_parameters
from gpt2kit.gpt2.config import preset
from gpt2kit.generation.decoding import make_decoder
from gpt2kit.gpt2.model import GPT2
from gpt2kit.model_runtime.ops import FUSED_DECODE_FUNCTIONS
from gpt2kit.kernel_runtime import overlap
from gpt2kit.kernel_runtime.commands import POSITIVE_INT, OneLineArgumentParser, run_command
from gpt2kit.kernel_runtime.device import exit_without_gpu
from gpt2kit.reference.variants import variant_argument

TIMING = dict(batches=2, per_batch=12, warmup=3)  # a call is microseconds; ~150 calls per step


def main(argv=None) -> int:
    parser = OneLineArgumentParser(prog="python -m gpt2kit.benchmarks.decode", description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=POSITIVE_INT, nargs="+", default=[1, 8], help="rows (default: 1 8)")
    parser.add_argument("--length", type=POSITIVE_INT, default=256, help="tokens in the cache (default %(default)s)")
    parser.add_argument("--variant", nargs="*", default=[], type=variant_argument,
                        help="solution variants to run the model on")
    args = parser.parse_args(argv)
    if args.length + 100 > preset("gpt2").max_T:
        parser.error(f"--length {args.length}: the graph's replays need 100 more positions of GPT-2's "
                     f"{preset('gpt2').max_T}")
    exit_without_gpu("gpt2kit.benchmarks.decode", "cannot run")
    return run_command("gpt2kit.benchmarks.decode", lambda: benchmark(args), error_status=2)


# the calls whose time is streaming a weight matrix: every array they take is read or written once
STREAMS_WEIGHTS = {"matmul_forward", *FUSED_DECODE_FUNCTIONS}


def moved_bytes(args: tuple) -> int:
    """Bytes a weight-streaming call must move: each of its arrays once (weights, input rows, bias, output...)."""
    import cupy

    return sum(a.nbytes for a in args if isinstance(a, cupy.ndarray))


def benchmark(args) -> int:
    import cupy

    config = preset("gpt2")
    params = random_parameters(config, seed=0)
    model = GPT2(config, params, backend=make_backend("kernels", variants=tuple(args.variant)))
    device = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(f"one decode step of GPT-2 124M, float32, {args.length} tokens in the cache, on {device}", flush=True)
    copy_gbs = copy_bandwidth_gbs()
    print(f"copy bandwidth (1 GiB device-to-device, read + write): {copy_gbs:.0f} GB/s")
    rng = np.random.default_rng(0)
    for batch in args.batch:
        step_us = {}
        for overlapped in (True, False) if overlap.device_supports_overlap() else (False,):
            with overlap.overlapping_launches(overlapped):
                step_us[overlapped] = time_step(model, batch, args.length, rng, copy_gbs, table=not step_us)
        for overlapped, us in step_us.items():
            how = "with overlapped launches" if overlapped else "every launch ordinary"
            print(f"the step as one CUDA graph, {how}: {us:.1f} us on the GPU, at most "
                  f"{batch / us * 1e6:,.0f} tok/s ({batch} rows)", flush=True)
        print()
    return 0


def time_step(model, batch: int, length: int, rng, copy_gbs: float, table: bool) -> float:
    """Microseconds of one decode step replayed as a CUDA graph, after printing its call table when asked."""
    import cupy

    config = model.config
    decoder = make_decoder(model, "graph", batch)
    with decoder.stream:
        decoder.prefill(rng.integers(0, config.vocab_size, (batch, length)))
        decoder.step(rng.integers(0, config.vocab_size, batch))  # loads the kernels, captures the graph
        if table:
            calls = []
            model.observer = lambda step, layer, kernel, call_args: calls.append((step, kernel, call_args))
            model.decode_launches(decoder.tokens, decoder.cache, decoder.activations)
            model.observer = None
            print_step_table(batch, calls, copy_gbs)
        step_ms = gpu_times_ms(decoder.graphs[None][0].launch, **TIMING)
    del decoder
    cupy.get_default_memory_pool().free_all_blocks()
    return 1e3 * step_ms


def print_step_table(batch: int, calls: list, copy_gbs: float) -> None:
    us, nbytes, counts = collections.defaultdict(float), collections.defaultdict(int), collections.Counter()
    same_size = {}  # bytes -> GB/s of a copy that moves them
    for step, kernel, call_args in calls:
        us[step] += 1e3 * gpu_times_ms(lambda: kernel(*call_args), **TIMING)
        counts[step] += 1
        if kernel.__name__ in STREAMS_WEIGHTS:
            moved = moved_bytes(call_args)
            nbytes[step] += moved
            if moved not in same_size:
                same_size[moved] = copy_bandwidth_gbs(moved)
            nbytes[step, "same"] += moved / same_size[moved]  # us a same-size copy would take, over 1e3
    total = sum(us.values())
    print(f"\nB={batch}: {len(calls)} calls")
    print(f"{'step':10s} {'calls':>5s} {'us':>8s} {'share':>6s} {'GB/s':>7s} {'%copy':>6s} {'%same':>6s}")
    for step in us:
        line = f"{step:10s} {counts[step]:5d} {us[step]:8.1f} {100 * us[step] / total:5.1f}%"
        if nbytes[step]:
            gbs = nbytes[step] / us[step] / 1e3
            line += f" {gbs:7.0f} {100 * gbs / copy_gbs:5.0f}% {100 * nbytes[step, 'same'] / us[step] / 1e3:5.0f}%"
        print(line)
    print(f"{'sum':10s} {len(calls):5d} {total:8.1f}  (each call alone)")


if __name__ == "__main__":
    sys.exit(main())
