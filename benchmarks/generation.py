"""Greedy generation speed: KV-cache decoding against full recomputation.

    python -m gpt2kit.benchmarks.generation [--model random] [--backend kernels] [--hf] [--no-recompute]

GPT-2 124M (random weights unless --model: any family, e.g. random:gpt-j-6b), batch 1,
float32, a 32-token prompt and 128 new tokens, greedy. Wall-clock time after a warm-up generation (the logits come
back to the host every token, so each step ends synchronised). Decode tok/s counts
the 127 tokens after the first, whose time is the prefill's. --hf also times Hugging
Face transformers' model (GPT2LMHeadModel, GPTJForCausalLM) generating on the same
weights and GPU: eager, and with a static cache and the forward compiled by torch.compile
(reduce-overhead). --no-recompute leaves out full recomputation (minutes for GPT-J 6B).
"KV cache + CUDA graph" replays one captured decode step per token (generation.decoding);
"KV cache" launches the step's kernels one by one from Python. "grape executor" also
chooses each token on the device (generation.executors), so no step waits for the host.
"""

import sys
import time
import warnings

import numpy as np

from gpt2kit.benchmarks.transformers_model import check_room_for_transformers, silence_tf32_advice
from gpt2kit.model_runtime.backends import make_backend
from gpt2kit.generation.executors import make_executor
from gpt2kit.generation.generate import GREEDY, generate
from gpt2kit.kernel_runtime.commands import OneLineArgumentParser, run_command
from gpt2kit.kernel_runtime.device import exit_without_gpu, first_line
from gpt2kit.model_runtime.families import Family, check_sources, text_family_of
from gpt2kit.reference.variants import variant_argument

PROMPT_TOKENS, NEW_TOKENS = 32, 128


def timed_generation(model, prompt, use_cache, use_graph):
    marks = []
    started = time.perf_counter()
    generate(model, prompt, NEW_TOKENS, GREEDY, use_cache=use_cache, use_graph=use_graph, stop_at_end_of_text=False,
             on_token=lambda _: marks.append(time.perf_counter()))
    total = marks[-1] - started
    return dict(first_token_s=marks[0] - started, decode_tok_s=(NEW_TOKENS - 1) / (marks[-1] - marks[0]),
                end_to_end_tok_s=NEW_TOKENS / total)


def timed_grape(executor, prompt):
    """The grape executor streams every few tokens, so only its end-to-end rate is measured."""
    started = time.perf_counter()
    executor.generate([prompt], NEW_TOKENS, GREEDY, stop_at_end_of_text=False)
    return NEW_TOKENS / (time.perf_counter() - started)


def hf_generation(family: Family, config, params, prompt, compiled: bool, device: str = "cuda",
                  new_tokens: int = NEW_TOKENS):
    """transformers' greedy generate of `new_tokens` after `prompt`, on `family`'s model in transformers holding
    `params`: eager, or with a static cache and its forward compiled by torch.compile (mode reduce-overhead: CUDA
    graphs on a GPU). Timed after warm-up generations of the same length (compiling, then recording the graphs,
    take the first calls). Returns (tokens per second, the generated token ids)."""
    import torch

    from transformers import StaticCache

    model = family.transformers_model(config, params, device)
    ids = torch.tensor([prompt], device=device)
    options = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
    cache = None
    if compiled:
        cache = StaticCache(config=model.config, max_cache_len=ids.shape[1] + new_tokens)
        # The cache's tensors are made now, not by the first compiled call: there they would be outputs of
        # its CUDA graph, which the next replay overwrites.
        cache.early_initialization(ids.shape[0], config.num_heads, config.channels // config.num_heads, model.dtype,
                                   ids.device)
        options["past_key_values"] = cache
        silence_tf32_advice()
        model.forward = torch.compile(model.forward, mode="reduce-overhead")

    def run():
        if cache is not None:
            cache.reset()
        with warnings.catch_warnings():  # transformers >= 5.24 names it `cache`; older ones know only this name
            warnings.filterwarnings("ignore", message="`past_key_values` is deprecated", category=FutureWarning)
            return model.generate(ids, **options)

    with torch.no_grad():
        for _ in range(3 if compiled else 1):
            run()
        synchronize = torch.cuda.synchronize if device == "cuda" else lambda: None
        synchronize()
        started = time.perf_counter()
        tokens = run()
        synchronize()
    return new_tokens / (time.perf_counter() - started), tokens[0, len(prompt):].tolist()


def main(argv=None) -> int:
    parser = OneLineArgumentParser(prog="python -m gpt2kit.benchmarks.generation", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="random")
    parser.add_argument("--backend", default="kernels", choices=("kernels", "gold"))
    parser.add_argument("--variant", nargs="*", default=[], type=variant_argument,
                        help="solution variants to run the kernels on")
    parser.add_argument("--hf", action="store_true",
                        help="also time transformers' generate, eager and static+compiled")
    parser.add_argument("--no-recompute", action="store_true", help="leave out generating by full recomputation")
    parser.add_argument("--cprofile", action="store_true", help="print where the host's time goes (Python's cProfile)")
    args = parser.parse_args(argv)
    return run_command("gpt2kit.benchmarks.generation", lambda: benchmark(args), error_status=2)


def benchmark(args) -> int:
    check_sources(args.model)
    family = text_family_of(args.model)
    exit_without_gpu("gpt2kit.benchmarks.generation", "cannot run")

    backend = make_backend(args.backend, variants=tuple(args.variant))
    family.model.check_backend(backend)
    config, params = family.load(args.model, lambda line: print(line, flush=True))  # transformers' copy reads them
    if args.hf:
        check_room_for_transformers(config, "leaving out --hf")
    model = family.model(config, params, backend=backend)
    prompt = list(np.random.default_rng(0).integers(0, config.vocab_size, PROMPT_TOKENS))
    generate(model, prompt, 8, GREEDY, stop_at_end_of_text=False)  # warm-up: compiles every kernel
    step = "fused" if backend.fused_decode else "unfused"
    print(f"{family.name} {config.num_parameters() / 1e6:.0f}M, {args.backend} backend "
          f"(variants: {' '.join(args.variant) or 'none'}; decode step {step}), "
          f"batch 1, prompt {PROMPT_TOKENS}, {NEW_TOKENS} new tokens, greedy")
    print(f"{'method':22s} {'decode tok/s':>12s} {'end-to-end tok/s':>16s} {'first token ms':>14s}")
    methods = (("KV cache + CUDA graph", True, True), ("KV cache", True, False), ("full recompute", False, False))
    for name, use_cache, use_graph in methods:
        if (use_graph and args.backend != "kernels") or (not use_cache and args.no_recompute):
            continue
        r = timed_generation(model, prompt, use_cache, use_graph)
        print(f"{name:22s} {r['decode_tok_s']:12.0f} {r['end_to_end_tok_s']:16.0f} {1e3 * r['first_token_s']:14.1f}",
              flush=True)
    if args.backend == "kernels":
        grape = make_executor(model, "grape")
        timed_grape(grape, prompt)  # warm-up: captures its graphs
        print(f"{'grape executor':22s} {'':12s} {timed_grape(grape, prompt):16.0f}", flush=True)
    if args.cprofile:
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        profiler.runcall(timed_generation, model, prompt, True, False)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(18)
    if args.hf:
        eager = hf_generation(family, config, params, prompt, compiled=False)[0]
        print(f"{'transformers eager':22s} {'':12s} {eager:16.0f}", flush=True)
        print("(compiling transformers' forward with torch.compile: a minute or so)", flush=True)
        try:
            rate = f"{hf_generation(family, config, params, prompt, compiled=True)[0]:16.0f}"
        except Exception as err:  # torch.compile depends on the installed torch, triton and compiler
            rate = f"could not run: {first_line(err)}"
        print(f"{'transformers static+compile':22s} {'':12s} {rate}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
