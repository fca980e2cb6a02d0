"""`python -m gpt2.train` end to end on the CPU (a tiny model, the reference backend), and its batches."""

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gpt2.checkpoint import perturbed_parameters, read_llmc
from tests.model.helpers import TINY
from training.data import TextBatches, TextTooShortError

ROOT = Path(__file__).parents[2]
TEXT = "The kit trains the GPT-2 it runs. " * 40  # repetitive: a few steps learn it


def train_cli(*args):
    return subprocess.run([sys.executable, "-m", "gpt2.train", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=300, check=False)


def test_trains_prints_progress_and_writes_a_checkpoint_gpt2_reads(tmp_path, tiny_model):
    text, out = tmp_path / "text.txt", tmp_path / "trained.bin"
    text.write_text(TEXT)
    done = train_cli("--text", str(text), "--model", str(tiny_model), "--backend", "reference", "--batch", "2",
                     "--tokens", "16", "--steps", "12", "--every", "4", "--learning-rate", "0.01", "--out", str(out))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == [f"step {n}/12" for n in (1, 4, 8, 12)]
    losses = [float(re.search(r"loss (\d+\.\d+), [\d,]+ tok/s \(epoch \d+\)$", line).group(1)) for line in lines]
    assert losses[-1] < losses[0] - 2  # it learns the repeated sentence
    assert f"wrote {out}: complete text with python -m gpt2 --model {out}" in done.stderr
    config, trained = read_llmc(out)
    start = perturbed_parameters(TINY, seed=4)
    assert config == TINY and all(not np.array_equal(trained[name], start[name]) for name in start if name != "wpe")
    completion = subprocess.run([sys.executable, "-m", "gpt2", "The kit", "--model", str(out), "--backend",
                                 "reference", "--max-new-tokens", "4", "--seed", "1"], capture_output=True, text=True,
                                cwd=ROOT, timeout=120, check=False)
    assert completion.returncode == 0 and completion.stdout.startswith("The kit"), completion.stderr


@pytest.mark.parametrize("args, message", [
    (("--text", "/no/such.txt"), "gpt2.train: /no/such.txt: cannot read it as UTF-8 text (No such file or directory)"),
    (("--model", "random:gpt-j-6b", "--text", "README.md"),
     "gpt2.train: random:gpt-j-6b: training runs GPT-2 models only (the kit has GPT-2's backward pass)"),
    (("--tokens", "65", "--text", "README.md"), "gpt2.train: --tokens 65 exceeds the model's context of 64"),
    (("--batch", "64", "--tokens", "64", "--text", "pyproject.toml"), "gpt2.train: a text of "),
    (("--learning-rate", "2",), "python -m gpt2.train: argument --learning-rate: must be a number in (0, 1), got 2"),
])
def test_mistakes_are_one_line(tiny_model, args, message):
    model = () if "--model" in args else ("--model", str(tiny_model))
    done = train_cli(*args, *model, "--backend", "reference", "--steps", "1")
    lines = done.stderr.strip().splitlines()
    assert done.returncode in (1, 2) and done.stdout == "" and "Traceback" not in done.stderr
    assert lines[-1].startswith(message), lines


def test_batches_are_consecutive_windows_and_wrap_around():
    batches = TextBatches(np.arange(20), B=2, T=3)
    inputs, targets = next(batches)
    assert inputs.tolist() == [[0, 1, 2], [3, 4, 5]] and targets.tolist() == [[1, 2, 3], [4, 5, 6]]
    assert next(batches)[0].tolist() == [[6, 7, 8], [9, 10, 11]]
    assert next(batches)[0].tolist() == [[12, 13, 14], [15, 16, 17]] and batches.epoch == 0
    assert next(batches)[0].tolist() == [[0, 1, 2], [3, 4, 5]] and batches.epoch == 1  # 18..19 left: too few


def test_a_text_shorter_than_a_batch_is_refused():
    with pytest.raises(TextTooShortError, match="a text of 6 tokens is too short for batches of B=1 rows of T=6 "
                                                "tokens: one needs 7"):
        TextBatches(np.arange(6), B=1, T=6)
