"""Train GPT-2 on a text, on the kit's kernels (milestone 4's backward passes).

    python -m gpt2kit.gpt2.train                                      # GPT-2 mini from scratch, on the kit's READMEs
    python -m gpt2kit.gpt2.train --text book.txt --model random:124M --steps 2000
    python -m gpt2kit.gpt2.train --resume results/gpt2_trained.state.npz --steps 400   # 200 steps more
    python -m gpt2kit --model results/gpt2_trained.bin "The kit"   # then complete text with what it learned

The text (--text, repeatable; default: the kit's own README files, so a first run
needs no download) is read through GPT-2's BPE, each file followed by end-of-text.
Every step takes the next B rows of T tokens and their targets (training.data), runs
forward, loss, backward and AdamW (training.step; on the kernels backend the forward
and backward passes replay two CUDA graphs), and every --every steps prints the step,
the loss and tokens per second. At the end the weights are written to --out as
an llm.c checkpoint (float32), which `python -m gpt2kit --model` reads: by default
results/gpt2_trained.bin, in a directory git ignores.

Beside --out goes the training state (NAME.state.npz for --out NAME.bin; see
training.state): the weights and AdamW's moments as the backend holds them, and the
steps done. It is saved at the end, every --save-every steps, and on Ctrl-C, which
stops the step at once (the optimizer's update, which must change every parameter or
none, first finishes: a blink on a GPU, seconds for gpt2-mini on the CPU). Ctrl-C
again while the state is saved stops without it. `--resume STATE` goes on from it,
with the options it was started with (each is checked), to --steps in all: the same
weights, bit for bit on the CPU, as a run never stopped.

--model starts from any GPT-2 source python -m gpt2kit takes: random:<size> (gpt2-mini,
30M parameters, is the default: minutes on a GPU), or a checkpoint to go on training.
Without a GPU the NumPy reference backend trains, in float64 (slowly).
"""

from __future__ import annotations

import dataclasses
import hashlib
import sys
import time
from pathlib import Path

import numpy as np

from gpt2kit.gpt2.__main__ import choose_backend
from gpt2kit.gpt2.checkpoint import check_parameters, write_llmc
from gpt2kit.gpt2.config import ConfigError, GPT2Config
from gpt2kit.gpt2.family import FAMILY
from gpt2kit.gpt2.model import GPT2
from gpt2kit.kernel_runtime import KitError
from gpt2kit.kernel_runtime.commands import (POSITIVE_INT, OneLineArgumentParser, checked, forget_interrupts,
                                             interrupts_deferred, raise_lost_interrupt, run_command)
from gpt2kit.kernel_runtime.files import check_writable_file
from gpt2kit.model_runtime.backends import make_backend
from gpt2kit.model_runtime.checkpoint_files import CheckpointError
from gpt2kit.model_runtime.families import check_sources, family_of, load_model
from gpt2kit.model_runtime.tokenizer import get_tokenizer
from gpt2kit.training.data import TextBatches
from gpt2kit.training.state import TrainingState, read_state, save_state
from gpt2kit.training.step import AdamW, GraphTrainingStep, TrainingStep

KIT_TEXTS = ("README.md", "benchmarks/README.md", "grading/README.md")  # the default text: the kit's own
DEFAULT_OUT = Path("results/gpt2_trained.bin")  # results/ is the kit's place for what it makes: git ignores it
RATE = checked(float, lambda x: 0 < x < 1, "a number in (0, 1)")
DECAY = checked(float, lambda x: 0 <= x < 1, "a number in [0, 1)")


def build_parser() -> OneLineArgumentParser:
    parser = OneLineArgumentParser(prog="python -m gpt2kit.gpt2.train", description=__doc__.splitlines()[0])
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
    parser.add_argument("--out", type=Path, help=f"the trained model, an llm.c checkpoint (default: {DEFAULT_OUT}, "
                                                  "its directory made if need be); the training state goes beside it")
    parser.add_argument("--save-every", type=POSITIVE_INT, metavar="N",
                        help="also save the training state every N steps (default: at the end and on Ctrl-C)")
    parser.add_argument("--resume", type=Path, metavar="STATE",
                        help="go on from a training state saved by a run of the same options, to --steps in all")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return run_command("gpt2kit.gpt2.train", lambda: train(args))


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


def state_path(out: Path) -> Path:
    """Where the training state of a run writing `out` goes: beside it."""
    return out.with_name(f"{out.stem}.state.npz")


def run_settings(args, tokens: list[int]) -> dict:
    """What a resumed run must share with the run it goes on from: its options, and its text (by digest)."""
    text = hashlib.sha256(np.asarray(tokens, np.int32).tobytes()).hexdigest()
    return {"--model": args.model, "--batch": args.batch, "--tokens": args.tokens,
            "--learning-rate": args.learning_rate, "--weight-decay": args.weight_decay, "text": text}


def check_same_run(path: Path, saved, settings: dict) -> None:
    """KitError naming the first of `settings` (run_settings) that the run saved at `path` did not have."""
    saved = saved if isinstance(saved, dict) else {}
    for option, value in settings.items():
        if saved.get(option) == value:
            continue
        if option == "text":
            raise KitError(f"--resume {path}: saved by a run on another text: give it the same --text files")
        raise KitError(f"--resume {path}: saved by a run with {option} {saved.get(option)}, not {value}: resume "
                       "with the options it was started with")


def resumed_model(path: Path, state: TrainingState, backend) -> tuple[GPT2, int]:
    """The model a saved state holds, on `backend`, and the steps done."""
    try:
        config, steps = GPT2Config(**state.run["config"]), int(state.run["steps"])
    except (KeyError, TypeError, ValueError, ConfigError) as err:
        raise CheckpointError(f"{path}: a training state that describes no GPT-2 run ({err})") from None
    check_parameters(config, state.parameters, str(path))
    return GPT2(config, state.parameters, backend=backend), steps


def train(args) -> None:
    def note(message: str) -> None:
        print(f"[gpt2.train] {message}", file=sys.stderr, flush=True)

    check_sources(args.model, args.kernels)
    if family_of(args.model) is not FAMILY:  # said before a model loads
        raise KitError(f"{args.model}: training runs GPT-2 models only (the kit has GPT-2's backward pass)")
    out = args.out or DEFAULT_OUT
    check_writable_file(out, f"--out {out}", parents_made=args.out is None)  # a given directory must be there
    if args.out is None:
        out.parent.mkdir(parents=True, exist_ok=True)
    check_writable_file(state_path(out), f"the training state {state_path(out)}")
    resumed = read_state(args.resume) if args.resume else None
    tokens = read_texts(args.text or kit_texts())
    settings = run_settings(args, tokens)
    if resumed:
        check_same_run(args.resume, resumed.run.get("settings"), settings)
    backend = choose_backend(args, note)
    if resumed:
        note(f"going on from {args.resume} on the {backend} backend ...")
        model, steps_done = resumed_model(args.resume, resumed, make_backend(backend, args.kernels))
    else:
        note(f"loading {args.model} on the {backend} backend ...")
        model, steps_done = load_model(args.model, make_backend(backend, args.kernels)), 0
    if args.tokens > model.config.max_T:
        raise KitError(f"--tokens {args.tokens} exceeds the model's context of {model.config.max_T}")
    batches = TextBatches(tokens, args.batch, args.tokens)
    graphed = backend == "kernels" and not args.no_graph
    step = (GraphTrainingStep if graphed else TrainingStep)(model, args.batch, args.tokens,
                                                            AdamW(args.learning_rate, weight_decay=args.weight_decay))
    if resumed:
        step.go_on_from(resumed.moments, steps_done)
        for _ in range(steps_done):  # the batches the saved run took
            next(batches)
    parameters = sum(p.size for p in model.parameters.values())
    note(f"{parameters / 1e6:.1f}M parameters; {len(tokens):,} tokens of text, {args.batch * args.tokens:,} a step")

    saved = steps_done  # the steps of the latest state on disk

    def save() -> None:
        nonlocal saved
        run = {"config": dataclasses.asdict(model.config), "settings": settings, "steps": step.steps}
        save_state(state_path(out), TrainingState(run, model.parameters, step.moments), model.backend.to_host)
        saved = step.steps

    try:
        started, tokens_seen = time.perf_counter(), 0
        for number in range(steps_done + 1, args.steps + 1):
            raise_lost_interrupt()
            loss = step.compute_gradients(*next(batches))
            with interrupts_deferred():  # every parameter updated or none: a state saved on Ctrl-C is a whole step's
                step.update()
            tokens_seen += args.batch * args.tokens
            if number % args.every == 0 or number in (steps_done + 1, args.steps):
                rate = tokens_seen / (time.perf_counter() - started)
                print(f"step {number}/{args.steps}: loss {loss:.4f}, {rate:,.0f} tok/s (epoch {batches.epoch})",
                      flush=True)
                started, tokens_seen = time.perf_counter(), 0
            if args.save_every and number % args.save_every == 0:
                save()
                note(f"saved the training state of step {number} to {state_path(out)}")
        weights = {name: model.backend.to_host(p).astype(np.float32) for name, p in model.parameters.items()}
        write_llmc(out, model.config, weights)
        if step.steps > saved:
            save()
    except KeyboardInterrupt:
        if step.steps > saved:
            forget_interrupts()  # this one is answered; a new one stops the saving
            note(f"Ctrl-C: saving the training state of step {step.steps} to {state_path(out)} (Ctrl-C again stops "
                 "without it) ...")
            save()
            note(f"saved: go on with --resume {state_path(out)}")
        raise
    note(f"wrote {out}: complete text with python -m gpt2kit --model {out}; the training state is {state_path(out)}")


if __name__ == "__main__":
    sys.exit(main())
