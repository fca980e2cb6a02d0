"""Whole-model prefill: one forward pass of GPT-2 124M over B x T tokens, the kit's kernels
(with each milestone-2 matmul, and flash attention) beside gold and transformers in the same process.

    python -m gpt2kit.benchmarks.prefill [--batch 8] [--tokens 1024] [--no-hf]

Random weights, float32, random token ids. Each row times `forward(tokens)` to the
logits: CUDA events around each call, after warm-up, median of several (the events
and transformers' work share CUDA's default stream). The rows:

    kernels                 the kit's kernels (tiled matmul, reduction layernorm and softmax)
    kernels + matmul_tf32   the same with the TF32 tensor-core matmul (the tf32 profile)
    kernels + matmul_cublas the same with the cuBLAS matmul (float32)
    kernels + split-K       the same with the split-K matmul (milestone 3; float32): a short
                            prompt's matmuls, whose tiles are too few for the GPU (--tokens 64)
    kernels + 3xTF32        the same with the 3xTF32 matmul (milestone 3): tensor cores, float32 accuracy
    kernels + flash         the kit's kernels with flash attention (milestone 3; float32)
    kernels + flash + tf32  flash attention and the TF32 matmul
    kernels + flash + 3xTF32  flash attention and the 3xTF32 matmul
    kernels + 3xTF32 flash + 3xTF32  3xTF32 flash attention and the 3xTF32 matmul: the fastest within the
                            fp32 bounds
    gold                    reference.gold: CuPy library operations, cuBLAS float32
    transformers fp32       GPT2LMHeadModel, eager (no torch.compile), its default attention, float32
    transformers tf32       the same with torch.backends.cuda.matmul.allow_tf32

"vs transformers" is transformers fp32's time over the row's. A row whose variant this kit lacks (an
earlier milestone's) or has not written yet is skipped with one line saying so.
"""

import sys

import numpy as np

from gpt2kit.benchmarks.kernels import gpu_times_ms
from gpt2kit.model_runtime.backends import make_backend
from gpt2kit.gpt2.checkpoint import random_parameters, transformers_model
from gpt2kit.gpt2.config import preset
from gpt2kit.gpt2.model import GPT2
from gpt2kit.kernel_runtime.commands import POSITIVE_INT, OneLineArgumentParser, run_command
from gpt2kit.kernel_runtime.device import exit_without_gpu
from gpt2kit.reference.variants import VARIANTS, first_unwritten

KIT_ROWS = (("kernels", "kernels", ()), ("kernels + matmul_tf32", "kernels", ("matmul_tf32",)),
            ("kernels + matmul_cublas", "kernels", ("matmul_cublas",)),
            ("kernels + split-K", "kernels", ("matmul_split_k",)),
            ("kernels + 3xTF32", "kernels", ("matmul_3xtf32",)),
            ("kernels + flash", "kernels", ("attention_flash",)),
            ("kernels + flash + tf32", "kernels", ("attention_flash", "matmul_tf32")),
            ("kernels + flash + 3xTF32", "kernels", ("attention_flash", "matmul_3xtf32")),
            ("kernels + 3xTF32 flash + 3xTF32", "kernels", ("attention_flash_3xtf32", "matmul_3xtf32")),
            ("gold", "gold", ()))
TIMING = dict(batches=2, per_batch=6, warmup=2)  # a call is tens of milliseconds


def main(argv=None) -> int:
    parser = OneLineArgumentParser(prog="python -m gpt2kit.benchmarks.prefill", description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=POSITIVE_INT, default=8)
    parser.add_argument("--tokens", type=POSITIVE_INT, default=1024)
    parser.add_argument("--no-hf", action="store_true", help="leave transformers out")
    args = parser.parse_args(argv)
    if args.tokens > preset("gpt2").max_T:
        parser.error(f"--tokens {args.tokens}: GPT-2 holds at most {preset('gpt2').max_T} positions")
    exit_without_gpu("gpt2kit.benchmarks.prefill", "cannot run")
    return run_command("gpt2kit.benchmarks.prefill", lambda: benchmark(args), error_status=2)


def row_not_in_this_kit(variants: tuple[str, ...]) -> str | None:
    """Why a row's variants cannot run in this kit (an earlier milestone's starter kit lacks later variants, and a
    student's may not be written yet), or None."""
    missing = [name for name in variants if name not in VARIANTS]
    if missing:
        return f"this kit has no {', '.join(missing)}"
    return first_unwritten(VARIANTS[name] for name in variants)


def benchmark(args) -> int:
    import cupy

    config = preset("gpt2")
    params = random_parameters(config, seed=0)
    tokens = np.random.default_rng(0).integers(0, config.vocab_size, (args.batch, args.tokens)).astype(np.int32)
    print(f"prefill of GPT-2 124M, B={args.batch} T={args.tokens}, float32 weights, on "
          f"{cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}", flush=True)
    times = {}
    for name, backend, variants in KIT_ROWS:
        skipped = row_not_in_this_kit(variants)
        if skipped:
            print(f"  {name}: skipped, {skipped}", flush=True)
            continue
        model = GPT2(config, params, backend=make_backend(backend, variants=variants))
        device_tokens = model.backend.upload(tokens)
        times[name] = gpu_times_ms(lambda: model.forward(device_tokens), **TIMING)
        print(f"  {name}: {times[name]:.2f} ms", flush=True)
        del model
        cupy.get_default_memory_pool().free_all_blocks()
    if not args.no_hf:
        times |= transformers_times(config, params, tokens)
    baseline = times.get("transformers fp32")
    print(f"\n{'':26s} {'ms':>8s} {'tokens/s':>10s} {'vs transformers fp32':>21s}")
    for name, ms in times.items():
        versus = f"{baseline / ms:20.2f}x" if baseline else ""
        print(f"{name:26s} {ms:8.2f} {args.batch * args.tokens / ms * 1e3:10.0f} {versus}")
    return 0


def transformers_times(config, params, tokens) -> dict:
    import torch

    model = transformers_model(config, params)
    ids = torch.from_numpy(tokens.astype(np.int64)).cuda()
    times = {}
    for name, tf32 in (("transformers fp32", False), ("transformers tf32", True)):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        with torch.no_grad():
            times[name] = gpu_times_ms(lambda: model(ids), **TIMING)
        print(f"  {name}: {times[name]:.2f} ms", flush=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    return times


if __name__ == "__main__":
    sys.exit(main())
