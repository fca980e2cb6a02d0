"""A configuration sweep of the fused decode kernels (kernels/fused_gemv.py): every tuning, its
registers and spills, and its time at the decode step's shapes.

    python -m gpt2kit.benchmarks.sweep [--kind layernorm] [--batch 1 8] [--model gpt-j-6b] [--compile-only]

A tuning is PIECES, the float4s of a weight row each lane loads before using them (all in
flight at once), and BLOCKS, the launch bounds' minimum of blocks per SM (which caps the
registers a thread may take; with a layernorm, also the grid's blocks per SM). Each is
compiled through NVRTC for sm_86 (A40) and sm_90 (H100/H200) as a launch on each --batch
compiles it (for the batch's rows, R1 ... R8: from 4 rows in an 8-row chunk's layout, two
columns a warp, and at most fused_gemv.TWO_COLUMN_BLOCKS blocks an SM, so that there a tuning
of more blocks builds as that one), whose registers and spilled bytes are printed;
`--compile-only` stops there, and needs no GPU. Otherwise each tuning is timed at the shapes
the decode step of GPT-2 124M (or, with --model gpt-j-6b, of GPT-J 6B) gives its kind of kernel
(CUDA events after warm-up, median), with GB/s against the copy bandwidth measured here. The
kit's own tuning is marked with *. A tuning that spills on either architecture is printed but not chosen.
"""

import itertools
import sys

import numpy as np

from gpt2kit.benchmarks.decode import moved_bytes
from gpt2kit.benchmarks.kernels import copy_bandwidth_gbs, gpu_times_ms
from gpt2kit.kernel_runtime.commands import POSITIVE_INT, OneLineArgumentParser, run_command
from gpt2kit.kernel_runtime.compiler import compile_report
from gpt2kit.kernel_runtime.device import exit_without_gpu, nvrtc_unavailable_reason
from gpt2kit.kernel_runtime.loader import use_kernels
from gpt2kit.reference.registry import kernel_module

PIECES = (2, 4, 8)
BLOCKS = (1, 2, 3)
ARCHES = ("sm_86", "sm_90")
# kind -> (layernorm, gelu, residual) and the host function it serves
KINDS = {
    "layernorm": ((True, False, False), "layernorm_matmul_forward"),
    "layernorm_gelu": ((True, True, False), "layernorm_matmul_gelu_forward"),
    "residual": ((False, False, True), "matmul_residual_forward"),
}
# model -> kind -> its decode step's calls of that kind: (name, C, OC)
SHAPES = {
    "gpt2": {"layernorm": (("ln1+qkv", 768, 2304), ("lnf+lm_head", 768, 50304)),
             "layernorm_gelu": (("ln2+fc+gelu", 768, 3072),),
             "residual": (("attproj", 768, 768), ("fcproj", 3072, 768))},
    # GPT-J's layer is parallel: ln1 feeds both qkv and fc
    "gpt-j-6b": {"layernorm": (("ln1+qkv", 4096, 12288), ("lnf+lm_head", 4096, 50400)),
                 "layernorm_gelu": (("ln1+fc+gelu", 4096, 16384),),
                 "residual": (("attproj", 4096, 4096), ("fcproj", 16384, 4096))},
}


def main(argv=None) -> int:
    parser = OneLineArgumentParser(prog="python -m gpt2kit.benchmarks.sweep", description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=tuple(KINDS), action="append",
                        help="sweep only this kind of kernel (default: all three; repeat for several)")
    parser.add_argument("--batch", type=POSITIVE_INT, nargs="+", default=[1, 8],
                        help="rows of the timed calls (default: 1 8)")
    parser.add_argument("--model", choices=tuple(SHAPES), default="gpt2",
                        help="whose decode step's shapes to time (default: gpt2, GPT-2 124M)")
    parser.add_argument("--compile-only", action="store_true",
                        help="print registers and spills only (no GPU needed; default: also time each tuning)")
    args = parser.parse_args(argv)
    if args.compile_only:
        reason = nvrtc_unavailable_reason()
        if reason:
            parser.exit(2, f"python -m gpt2kit.benchmarks.sweep: cannot compile: {reason}\n")
    else:
        exit_without_gpu("gpt2kit.benchmarks.sweep", "cannot time kernels")
    return run_command("gpt2kit.benchmarks.sweep", lambda: sweep(args), error_status=2)


def tunings():
    return [dict(PIECES=pieces, BLOCKS=blocks) for pieces, blocks in itertools.product(PIECES, BLOCKS)]


def sweep(args) -> int:
    use_kernels()  # this kit's kernels/: the sweep compiles its fused_gemv.py with other tunings
    fused_gemv = kernel_module("fused_gemv")
    copy_gbs = None if args.compile_only else copy_bandwidth_gbs()
    if copy_gbs:
        print(f"copy bandwidth (1 GiB device-to-device, read + write): {copy_gbs:.0f} GB/s")
    for kind in args.kind or KINDS:
        parts, function = KINDS[kind]
        shapes = SHAPES[args.model][kind]
        kit_kernel = fused_gemv.fused_kernel(*parts)
        kit = kit_kernel.defines
        timed = [] if args.compile_only else [(name, C, OC, batch) for name, C, OC in shapes for batch in args.batch]
        chunks = sorted({fused_gemv.kernel_for_rows(kit_kernel, batch).defines["FULL_ROWS"] for batch in args.batch})
        print(f"\n{kind} ({function})")
        print(f"  {'PIECES':>6s} {'BLOCKS':>6s} "
              + " ".join(f"{f'regs R{rows} ' + a:>14s} {f'spill R{rows} ' + a:>15s}" for rows in chunks for a in ARCHES)
              + "".join(f" {f'{name} B={batch} us':>22s} {'GB/s':>6s}" for name, _, _, batch in timed))
        for tuning in tunings():
            kernel = fused_gemv.fused_kernel(*parts, tuning=tuning)
            mark = "*" if all(kit[key] == value for key, value in tuning.items()) else " "
            line = f"{mark} {tuning['PIECES']:6d} {tuning['BLOCKS']:6d} "
            resources = [r for rows in chunks for arch in ARCHES
                         for r in compile_report(fused_gemv.kernel_for_rows(kernel, rows), arch)]
            line += " ".join(f"{r.registers:14d} {r.spill_stores + r.spill_loads:15d}" for r in resources)
            for name, C, OC, batch in timed:
                seconds, moved = time_call(fused_gemv.launch_fused, kernel, function, parts, batch, C, OC)
                line += f" {1e6 * seconds:22.1f} {moved / seconds / 1e9:6.0f}"
            print(line, flush=True)
    return 0


def time_call(launch, kernel, function: str, parts: tuple, rows: int, C: int, OC: int) -> tuple[float, int]:
    """Seconds of one call of `kernel` (through fused_gemv's `launch`) on random (rows, C) inputs and an
    (OC, C) weight, and the bytes it moves."""
    import cupy

    layernorm, _, residual = parts
    rng = np.random.default_rng(0)
    inp = cupy.asarray(rng.standard_normal((rows, C)), np.float32)
    weight = cupy.asarray(rng.standard_normal((OC, C)) / np.sqrt(C), np.float32)
    bias, out = cupy.zeros(OC, np.float32), cupy.empty((rows, OC), np.float32)
    ln_weight, ln_bias = (cupy.ones(C, np.float32), cupy.zeros(C, np.float32)) if layernorm else (None, None)
    added = cupy.zeros((rows, OC), np.float32) if residual else None
    ms = gpu_times_ms(lambda: launch(kernel, function, out, inp, ln_weight, ln_bias, weight, bias, added, rows, 1, C,
                                     OC))
    return ms / 1e3, moved_bytes((inp, weight, bias, out, ln_weight, ln_bias, added))


if __name__ == "__main__":
    sys.exit(main())
