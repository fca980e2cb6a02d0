"""Train GPT-2 on a text, on the kit's kernels (milestone 4's backward passes).

    python -m gpt2.train                                      # GPT-2 mini from scratch, on the kit's READMEs
    python -m gpt2.train --text book.txt --model random:124M --steps 2000
    python -m gpt2 --model gpt2_trained.bin "The kit"         # then complete text with what it learned

The text (--text, repeatable; default: the kit's own README files, so a first run
needs no download) is read through GPT-2's BPE, each file followed by end-of-text.
Every step takes the next B rows of T tokens and their targets (training.data), runs
forward, loss, backward and AdamW (training.step; on the kernels backend the forward
and backward passes replay two CUDA graphs), and every --every steps prints the step,
the loss and tokens per second. At the end the weights are written to --out as
an llm.c checkpoint (float32), which `python -m gpt2 --model` reads.

--model starts from any GPT-2 source python -m gpt2 takes: random:<size> (gpt2-mini,
30M parameters, is the default: minutes on a GPU), or a checkpoint to go on training.
Without a GPU the NumPy reference backend trains, in float64 (slowly).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from gpt2.__main__ import choose_backend
from gpt2.checkpoint import write_llmc
from gpt2.families import check_sources, family_of, load_model
from gpt2.tokenizer import get_tokenizer
from kernel_runtime import KitError
from kernel_runtime.commands import POSITIVE_INT, OneLineArgumentParser, checked, raise_lost_interrupt, run_command
from model_runtime.backends import make_backend
from training.data import TextBatches
from training.step import AdamW, GraphTrainingStep, TrainingStep

KIT_TEXTS = ("README.md", "benchmarks/README.md", "grading/README.md")  # the default text: the kit's own
RATE = checked(float, lambda x: 0 < x < 1, "a number in (0, 1)")
DECAY = checked(float, lambda x: 0 <= x < 1, "a number in [0, 1)")


def build_parser() -> OneLineArgumentParser:
    parser = OneLineArgumentParser(prog="python -m gpt2.train", description=__doc__.splitlines()[0])
    parser.add_argument("--text", action="append", type=Path, metavar="FILE",
                        help="a UTF-8 text to train on (repeatable; default: the kit's README files)")
    parser.add_argument("--model", default="random:gpt2-mini",
                        help="where to start: random:<size> or a GPT-2 checkpoint (default %(default)s)")
    parser.add_argument("--backend", choices=("kernels", "gold", "reference"),
                        help="default: kernels with a GPU, else reference (NumPy, float64, slow)")
    parser.add_argument("--kernels", metavar="DIR", help="a kernels/ directory to train on (default: this kit's)")
    parser.add_argument("--batch", type=POSITIVE_INT, default=4, help="rows per step, B (default %(default)s)")
    parser.add_argument("--tokens", type=POSITIVE_INT, default=64, help="tokens per row, T (default %(default)s)")
    parser.add_argument("--steps", type=POSITIVE_INT, default=200, help="(default %(default)s)")
    parser.add_argument("--learning-rate", type=RATE, default=1e-3, help="AdamW's (default %(default)s)")
    parser.add_argument("--weight-decay", type=DECAY, default=AdamW.weight_decay,
                        help="AdamW's, on every parameter (default %(default)s)")
    parser.add_argument("--every", type=POSITIVE_INT, default=10, help="print progress every N steps "
                                                                      "(default %(default)s)")
    parser.add_argument("--no-graph", action="store_true", help="launch each step's kernels from Python (default on "
                                                                "the kernels backend: replay its two CUDA graphs)")
    parser.add_argument("--out", type=Path, default=Path("gpt2_trained.bin"), help="(default %(default)s)")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return run_command("gpt2.train", lambda: train(args))


def read_texts(paths: list[Path]) -> list[int]:
    """Every text's token ids, each followed by end-of-text."""
    tokenizer, tokens = get_tokenizer(), []
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise KitError(f"{path}: cannot read it as UTF-8 text ({getattr(err, 'strerror', None) or err})") from None
        tokens += tokenizer.encode(text) + [tokenizer.eot_token]
    return tokens


def kit_texts() -> list[Path]:
    root = Path(__file__).resolve().parents[1]
    paths = [root / name for name in KIT_TEXTS]
    if not all(path.is_file() for path in paths):
        raise KitError(f"the kit's README files are not beside its packages ({root}): give a text with --text FILE")
    return paths


def train(args) -> None:
    def note(message: str) -> None:
        print(f"[gpt2.train] {message}", file=sys.stderr, flush=True)

    check_sources(args.model, args.kernels)
    if family_of(args.model) != "gpt2":  # said before a model loads
        raise KitError(f"{args.model}: training runs GPT-2 models only (the kit has GPT-2's backward pass)")
    tokens = read_texts(args.text or kit_texts())
    backend = choose_backend(args, note)
    note(f"loading {args.model} on the {backend} backend ...")
    model = load_model(args.model, make_backend(backend, args.kernels))
    if args.tokens > model.config.max_T:
        raise KitError(f"--tokens {args.tokens} exceeds the model's context of {model.config.max_T}")
    batches = TextBatches(tokens, args.batch, args.tokens)
    graphed = backend == "kernels" and not args.no_graph
    step = (GraphTrainingStep if graphed else TrainingStep)(model, args.batch, args.tokens,
                                                            AdamW(args.learning_rate, weight_decay=args.weight_decay))
    parameters = sum(p.size for p in model.parameters.values())
    note(f"{parameters / 1e6:.1f}M parameters; {len(tokens):,} tokens of text, {args.batch * args.tokens:,} a step")
    started, tokens_seen = time.perf_counter(), 0
    for number in range(1, args.steps + 1):
        raise_lost_interrupt()
        loss = step(*next(batches))
        tokens_seen += args.batch * args.tokens
        if number % args.every == 0 or number in (1, args.steps):
            rate = tokens_seen / (time.perf_counter() - started)
            print(f"step {number}/{args.steps}: loss {loss:.4f}, {rate:,.0f} tok/s (epoch {batches.epoch})",
                  flush=True)
            started, tokens_seen = time.perf_counter(), 0
    weights = {name: model.backend.to_host(p).astype(np.float32) for name, p in model.parameters.items()}
    write_llmc(args.out, model.config, weights)
    note(f"wrote {args.out}: complete text with python -m gpt2 --model {args.out}")


if __name__ == "__main__":
    sys.exit(main())
