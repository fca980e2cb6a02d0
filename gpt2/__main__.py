"""Complete text with the GPT-2 you wrote.

    python -m gpt2 "The meaning of life is"       # one completion
    python -m gpt2                                # an interactive loop (empty line or Ctrl-D ends it)

The model is --model if given, else the first of: $GPT2_MODEL; GPT-2 124M in the
Hugging Face cache; gpt2_124M.bin in the working directory or the home directory
(the course's checkpoint); else a seeded random 124M model, whose text is gibberish.
Without a GPU the NumPy reference backend runs instead of the kernels (slowly).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from gpt2.generate import Sampling, generate
from gpt2.model import GPT2
from gpt2.tokenizer import get_tokenizer
from kernel_runtime import KitError, gpu_unavailable_reason

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


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m gpt2", description="Complete text with GPT-2 on the kit's kernels.")
    parser.add_argument("prompt", nargs="?", help="text to complete (none: interactive loop)")
    parser.add_argument("--model", help="llm.c .bin file, Hugging Face directory, hub name (gpt2, gpt2-medium, "
                                        "...) or random / random:<size>")
    parser.add_argument("--backend", choices=("kernels", "gold", "reference"),
                        help="kernels (default with a GPU), gold, or reference (NumPy, the default without a GPU)")
    parser.add_argument("--kernels", help="a kernels/ directory to run instead of this repo's")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=1.0, help="0 means greedy (default 1.0)")
    parser.add_argument("--top-k", type=int, default=40, help="sample among the k likeliest tokens (default 40; 0: all)")
    parser.add_argument("--top-p", type=float, default=None, help="sample among the likeliest tokens whose "
                                                                  "probabilities reach p")
    parser.add_argument("--seed", type=int, default=None, help="seed of the sampling (default: fresh)")
    parser.add_argument("--no-cache", action="store_true", help="recompute the whole sequence for every token")
    parser.add_argument("--no-graph", action="store_true", help="launch each decode step's kernels from Python "
                                                                "instead of replaying a CUDA graph")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)

    def note(message: str) -> None:
        print(f"[gpt2] {message}", file=sys.stderr)

    try:
        sampling = Sampling(args.temperature, args.top_k or None, args.top_p, args.seed)
        backend = args.backend
        if backend is None:
            reason = gpu_unavailable_reason()
            backend = "kernels" if reason is None else "reference"
            if reason is not None:
                note(f"{reason}: running the NumPy reference backend on the CPU (slow)")
        tokenizer = get_tokenizer()
        source = args.model or default_model(note)
        note(f"loading {source} on the {backend} backend ...")
        model = GPT2.from_pretrained(source, backend=backend, kernels=args.kernels)
        prompts = [args.prompt] if args.prompt is not None else _interactive_prompts()
        for prompt in prompts:
            print(prompt, end="", flush=True)
            generate(model, tokenizer.encode(prompt), args.max_new_tokens, sampling, use_cache=not args.no_cache,
                     use_graph=not args.no_graph, on_token=Streamer(tokenizer), warn=note)
            print(flush=True)
    except KitError as err:
        print(f"gpt2: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
    return 0


def _interactive_prompts():
    print("Type a prompt and press Enter; an empty line or Ctrl-D ends.", file=sys.stderr)
    while True:
        try:
            line = input("> ")
        except EOFError:
            return
        if not line.strip():
            return
        yield line


if __name__ == "__main__":
    sys.exit(main())
