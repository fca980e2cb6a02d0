"""Profile one forward pass of GPT-2 on the kernels with nsys or ncu.

The pass is marked for the profilers: NVTX ranges around the pass, each layer and
each kernel call (named after its step: ln1, qkv, attention, ...), inside a
cudaProfilerStart/Stop window so that nsys and ncu see that pass alone.

    nsys profile -t cuda,nvtx --capture-range=cudaProfilerApi -o forward python -m gpt2kit.gpt2.nsight
    ncu --nvtx --profile-from-start off -o forward python -m gpt2kit.gpt2.nsight

A warm-up pass first compiles every kernel outside the window.
"""

import sys
import time

import numpy as np

from gpt2kit.kernel_runtime.commands import POSITIVE_INT, OneLineArgumentParser, run_command
from gpt2kit.kernel_runtime.device import exit_without_gpu


def main(argv=None) -> int:
    parser = OneLineArgumentParser(prog="python -m gpt2kit.gpt2.nsight", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="random", help="weights (default: random 124M)")
    parser.add_argument("--kernels", metavar="DIR", help="kernels/ directory to profile (default: this kit's)")
    parser.add_argument("--batch", type=POSITIVE_INT, default=4, help="rows of tokens (default %(default)s)")
    parser.add_argument("--tokens", type=POSITIVE_INT, default=64, help="tokens per row (default %(default)s)")
    args = parser.parse_args(argv)
    return run_command("gpt2kit.gpt2.nsight", lambda: profile_one_pass(args), error_status=2)


def profile_one_pass(args) -> int:
    from gpt2kit.model_runtime.backends import make_backend
    from gpt2kit.model_runtime.families import check_sources, load_model

    check_sources(args.model, args.kernels)
    exit_without_gpu("gpt2kit.gpt2.nsight")
    import cupy  # after the GPU check: a machine without a GPU may have no CuPy either

    model = load_model(args.model, make_backend("kernels", args.kernels))
    tokens = np.random.default_rng(0).integers(0, model.config.vocab_size, (args.batch, args.tokens), dtype=np.int32)
    model(tokens)  # warm-up: compiles and loads every kernel; says if the tokens exceed the context
    cupy.cuda.Device().synchronize()
    model.nvtx = True
    cupy.cuda.profiler.start()
    started = time.perf_counter()
    with model.profile_range(f"forward B={args.batch} T={args.tokens}"):
        model(tokens)
    cupy.cuda.Device().synchronize()
    cupy.cuda.profiler.stop()
    print(f"profiled one forward pass, B={args.batch} T={args.tokens}: {1e3 * (time.perf_counter() - started):.1f} ms "
          f"(with profiling overhead)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
