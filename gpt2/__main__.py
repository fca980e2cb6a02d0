"""Complete text with the GPT-2 you wrote.

    python -m gpt2kit "The meaning of life is"       # one completion
    python -m gpt2kit                                # an interactive loop (empty line or Ctrl-D ends it)

The model is --model if given, else the first of: $GPT2_MODEL; GPT-2 124M in the
Hugging Face cache; gpt2_124M.bin in the working directory or the home directory
(the course's checkpoint); else a seeded random 124M model, whose text is gibberish.
A --model of any family that generates text runs (GPT-J's too): model_runtime.families
says which family it names and loads it. Without a GPU the NumPy reference backend runs
instead of the kernels (slowly).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

from gpt2kit.model_runtime.backends import BACKENDS, make_backend
from gpt2kit.generation.generate import Sampling, fit_prompt, generate
from gpt2kit.kernel_runtime import GPUUnavailableError, gpu_unavailable_reason
from gpt2kit.kernel_runtime.commands import (NON_NEGATIVE_INT, SEED, OneLineArgumentParser, checked,
                                             raise_lost_interrupt, run_command)
from gpt2kit.model_runtime.families import check_sources, load_model, longest_context
from gpt2kit.model_runtime.tokenizer import get_tokenizer
from gpt2kit.reference.variants import variant_argument

COURSE_CHECKPOINT = "gpt2_124M.bin"


def default_model(warn) -> str:
    """Where the weights come from when --model is not given."""
    if os.environ.get("GPT2_MODEL"):
        return os.environ["GPT2_MODEL"]
    hub = _hub_snapshot("openai-community/gpt2")
    if hub is not None:
        return str(hub)
    for candidate in (Path.cwd() / COURSE_CHECKPOINT, Path.home() / COURSE_CHECKPOINT):
        if candidate.is_file():
            return str(candidate)
    warn("no GPT-2 weights found (pass --model, set GPT2_MODEL, or put gpt2_124M.bin here): "
         "using a random 124M model, so the text will be gibberish")
    return "random"


def _hub_snapshot(repo_id: str) -> Path | None:
    """The cached snapshot directory of a hub model, if huggingface_hub has one."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    found = try_to_load_from_cache(repo_id, "model.safetensors")
    return Path(found).parent if isinstance(found, str) else None


class Streamer:
    """Prints text as tokens arrive; a character split across tokens waits for its last byte."""

    def __init__(self, tokenizer, out=sys.stdout):
        self.tokenizer, self.out, self.tokens, self.printed = tokenizer, out, [], ""

    def __call__(self, token: int) -> None:
        self.tokens.append(token)
        text = self.tokenizer.decode(self.tokens)
        if text.endswith("\ufffd"):
            return
        self.out.write(text[len(self.printed):])
        self.out.flush()
        self.printed = text


TEMPERATURE = checked(float, lambda t: math.isfinite(t) and t >= 0, "a finite number >= 0")
PROBABILITY = checked(float, lambda p: 0 < p <= 1, "a number in (0, 1]")
# at least one prompt token shares the context with the new ones; a model's own (shorter) context is checked once loaded
LONGEST_CONTEXT = longest_context()
NEW_TOKENS = checked(int, lambda n: 0 <= n < LONGEST_CONTEXT, f"an integer from 0 to {LONGEST_CONTEXT - 1}")


def build_parser() -> OneLineArgumentParser:
    parser = OneLineArgumentParser(prog="python -m gpt2kit", description="Complete text with GPT-2 (or GPT-J) on the kit's "
                                                                   "kernels.")
    parser.add_argument("prompt", nargs="?", help="text to complete (default: read one prompt per line from stdin)")
    parser.add_argument("--model", help="llm.c .bin file, Hugging Face directory (GPT-2 or GPT-J), hub name "
                                        "(gpt2, gpt2-medium, ..., gpt-j-6b) or random / random:<size> (e.g. "
                                        "random:gpt-j-6b) (default: $GPT2_MODEL, else GPT-2 124M in "
                                        f"the Hugging Face cache, else {COURSE_CHECKPOINT} here or in the home "
                                        "directory, else random)")
    parser.add_argument("--backend", choices=BACKENDS, help="kernels or gold (CuPy) on the GPU, reference (NumPy) "
                                                            "on the CPU (default: kernels with a GPU, else reference)")
    parser.add_argument("--kernels", metavar="DIR", help="a kernels/ directory to run on the kernels backend "
                                                         "(default: this kit's kernels/)")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME", type=variant_argument,
                        help="a milestone variant to run on the kernels backend, e.g. attention_flash "
                             "(reference/variants.py; repeat for several; default: none, the kit's kernels)")
    parser.add_argument("--max-new-tokens", type=NEW_TOKENS, default=64,
                        help="tokens to generate (default %(default)s)")
    parser.add_argument("--temperature", type=TEMPERATURE, default=1.0, help="0 means greedy (default %(default)s)")
    parser.add_argument("--top-k", type=NON_NEGATIVE_INT, default=40,
                        help="sample among the k likeliest tokens, 0 among all (default %(default)s)")
    parser.add_argument("--top-p", type=PROBABILITY, help="sample among the likeliest tokens whose probabilities "
                                                          "reach p (default: no cut)")
    parser.add_argument("--seed", type=SEED, help="seed of the sampling, from 0 to 2**31 - 1 "
                                                   "(default: a fresh one each run)")
    parser.add_argument("--no-cache", action="store_true", help="recompute the whole sequence for every token "
                                                                "(default: run the new token against a KV cache)")
    parser.add_argument("--no-graph", action="store_true", help="launch each decode step's kernels from Python "
                                                                "(default: replay one CUDA graph per step)")
    return parser


def parse_args(argv) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.prompt == "":  # no tokens to start from: said before the model loads
        parser.error("argument prompt: is empty: give text to complete, or none to type prompts one per line")
    for option, given in (("--kernels", args.kernels is not None), ("--variant", bool(args.variant))):
        if given and args.backend not in (None, "kernels"):
            parser.error(f"argument {option}: applies to --backend kernels, not {args.backend}")
    return args


def choose_backend(args, note) -> str:
    """--backend if given; else kernels where there is a GPU, the NumPy reference where there is none (args of
    this command, or of one with --backend and --kernels only: python -m gpt2kit.gpt2.train)."""
    if args.backend == "reference":
        return "reference"
    reason = gpu_unavailable_reason()
    if reason is None:
        return args.backend or "kernels"
    for option, given in (("--kernels", args.kernels is not None), ("--variant", bool(getattr(args, "variant", ())))):
        if given:
            raise GPUUnavailableError(f"{option} needs a GPU: {reason}")
    if args.backend is not None:
        raise GPUUnavailableError(f"--backend {args.backend} needs a GPU: {reason}")
    note(f"{reason}: running the NumPy reference backend on the CPU (slow)")
    return "reference"


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.max_new_tokens == 0:
        return 0  # nothing to generate, so no model to load and no prompt to echo
    return run_command("gpt2kit", lambda: complete(args))


def complete(args) -> None:
    """Load the model, then complete the prompt, or each line of stdin."""
    def note(message: str) -> None:
        print(f"[gpt2kit] {message}", file=sys.stderr)

    sampling = Sampling(args.temperature, args.top_k or None, args.top_p, args.seed)
    source = args.model or default_model(note)
    check_sources(source, args.kernels)
    backend = choose_backend(args, note)
    tokenizer = get_tokenizer()
    note(f"loading {source} on the {backend} backend ...")
    model = load_model(source, make_backend(backend, args.kernels, tuple(args.variant)))
    interactive = args.prompt is None
    for prompt in _interactive_prompts() if interactive else [args.prompt]:
        raise_lost_interrupt()
        tokens = fit_prompt(tokenizer.encode(prompt), args.max_new_tokens, model.config.max_T, note)
        if not interactive:  # a typed prompt is on the screen already
            print(tokenizer.decode(tokens), end="", flush=True)  # what the model reads, after any cut
        generate(model, tokens, args.max_new_tokens, sampling, use_cache=not args.no_cache,
                 use_graph=not args.no_graph, on_token=Streamer(tokenizer), warn=note)
        print(flush=True)


def _interactive_prompts():
    print("Type a prompt and press Enter; an empty line or Ctrl-D ends.", file=sys.stderr)
    marker = "> " if sys.stdin.isatty() else ""  # piped prompts: stdout holds the completions alone
    while True:
        try:
            line = input(marker)
        except EOFError:
            return
        if not line.strip():
            return
        yield line


if __name__ == "__main__":
    sys.exit(main())
