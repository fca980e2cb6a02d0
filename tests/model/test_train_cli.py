"""`python -m gpt2kit.gpt2.train` end to end on the CPU (a tiny model, the reference backend), and its batches; its
training state, saved on Ctrl-C, going on as if never stopped."""

import contextlib
import io
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gpt2kit.gpt2 import train
from gpt2kit.gpt2.checkpoint import perturbed_parameters, read_llmc
from tests.interrupting import HOLD_SECONDS, PROMPTLY, interrupted, pausing
from tests.model.helpers import TINY
from tests.repository import ignored_by_the_kit
from gpt2kit.training.data import TextBatches, TextTooShortError
from gpt2kit.training.state import read_state

ROOT = Path(__file__).parents[2]
TEXT = "The kit trains the GPT-2 it runs. " * 40  # repetitive: a few steps learn it


def train_cli(*args):
    return subprocess.run([sys.executable, "-m", "gpt2kit.gpt2.train", *args], capture_output=True, text=True, cwd=ROOT,
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
    assert f"wrote {out}: complete text with python -m gpt2kit --model {out}" in done.stderr
    config, trained = read_llmc(out)
    start = perturbed_parameters(TINY, seed=4)
    assert config == TINY and all(not np.array_equal(trained[name], start[name]) for name in start if name != "wpe")
    completion = subprocess.run([sys.executable, "-m", "gpt2kit", "The kit", "--model", str(out), "--backend",
                                 "reference", "--max-new-tokens", "4", "--seed", "1"], capture_output=True, text=True,
                                cwd=ROOT, timeout=120, check=False)
    assert completion.returncode == 0 and completion.stdout.startswith("The kit"), completion.stderr


@pytest.mark.parametrize("args, message", [
    (("--text", "/no/such.txt"),
     "gpt2kit.gpt2.train: /no/such.txt: cannot read it as UTF-8 text (No such file or directory)"),
    (("--model", "random:gpt-j-6b", "--text", "README.md"),
     "gpt2kit.gpt2.train: random:gpt-j-6b: training runs GPT-2 models only (the kit has GPT-2's backward pass)"),
    (("--tokens", "65", "--text", "README.md"), "gpt2kit.gpt2.train: --tokens 65 exceeds the model's context of 64"),
    (("--batch", "64", "--tokens", "64", "--text", "pyproject.toml"), "gpt2kit.gpt2.train: a text of "),
    (("--learning-rate", "2",),
     "python -m gpt2kit.gpt2.train: argument --learning-rate: must be a number in (0, 1), got 2"),
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


def train_here(*args) -> tuple[int, str, str]:
    """`python -m gpt2kit.gpt2.train args` in this process (faster than a child): its status, stdout and stderr."""
    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(io.StringIO()) as err:
        status = train.main(list(map(str, args)))
    return status, out.getvalue(), err.getvalue()


@pytest.fixture
def run_options(tmp_path, tiny_model):
    """run_options(steps, out): the options of a short run on the tiny model, the CPU and a repeated sentence."""
    text = tmp_path / "text.txt"
    text.write_text(TEXT)

    def options(steps: int, out: Path) -> list:
        return ["--text", text, "--model", tiny_model, "--backend", "reference", "--batch", 2, "--tokens", 16,
                "--learning-rate", 0.01, "--steps", steps, "--out", out]
    return options


def assert_same_run(out: Path, other: Path) -> None:
    """Two runs' trained models and training states are the same, bit for bit."""
    assert out.read_bytes() == other.read_bytes()
    state, other_state = read_state(train.state_path(out)), read_state(train.state_path(other))
    assert state.run == other_state.run
    for name, array in state.parameters.items():
        np.testing.assert_array_equal(array, other_state.parameters[name], err_msg=name)
        for moment, other_moment in zip(state.moments[name], other_state.moments[name]):
            np.testing.assert_array_equal(moment, other_moment, err_msg=name)


def straight_run(run_options, tmp_path, steps: int) -> Path:
    out = tmp_path / f"straight-{steps}.bin"
    assert train_here(*run_options(steps, out))[0] == 0
    return out


def test_resuming_a_saved_state_gives_what_a_run_never_stopped_gives(tmp_path, run_options):
    out = tmp_path / "resumed.bin"
    assert train_here(*run_options(1, out))[0] == 0
    status, printed, _ = train_here(*run_options(2, out), "--resume", train.state_path(out))
    assert status == 0 and printed.splitlines()[0].startswith("step 2/2: ")
    assert_same_run(out, straight_run(run_options, tmp_path, 2))


def test_ctrl_c_in_a_step_saves_a_state_that_goes_on_as_if_never_stopped(tmp_path, run_options):
    out = tmp_path / "trained.bin"
    stopped = interrupted([sys.executable, "-m", "gpt2kit.gpt2.train", *map(str, run_options(1000, out)), "--every",
                           "1"], "step 1/")
    assert stopped.status == 130 and stopped.seconds < PROMPTLY, stopped
    assert not out.exists()  # only the end writes the model; the state is saved
    done = read_state(train.state_path(out)).run["steps"]
    assert done >= 1 and f"[gpt2.train] saved: go on with --resume {train.state_path(out)}" in stopped.lines
    assert train_here(*run_options(done + 1, out), "--resume", train.state_path(out))[0] == 0
    assert_same_run(out, straight_run(run_options, tmp_path, done + 1))


def test_ctrl_c_in_the_optimizer_s_update_lets_it_finish_then_saves_that_step(tmp_path, run_options):
    """AdamW changes every parameter or none: a Ctrl-C in its update (held here a second in its first call) waits
    for the update to finish, so that the state saved is a whole step's."""
    out = tmp_path / "trained.bin"
    stopped = interrupted([*pausing("gpt2kit.reference.cpu:adamw_update", "hold"), "gpt2kit.gpt2.train",
                           *map(str, run_options(1000, out))], "pausing in ")
    assert stopped.status == 130 and stopped.seconds < HOLD_SECONDS + PROMPTLY, stopped
    assert read_state(train.state_path(out)).run["steps"] == 1
    assert train_here(*run_options(2, out), "--resume", train.state_path(out))[0] == 0
    assert_same_run(out, straight_run(run_options, tmp_path, 2))


@pytest.mark.parametrize("mode", ["raise", "swallow"])
def test_ctrl_c_while_the_trained_model_is_written_keeps_the_previous_one_and_saves_the_state(tmp_path, run_options,
                                                                                              mode):
    out = tmp_path / "trained.bin"
    out.write_bytes(b"the previous model")
    stopped = interrupted([*pausing("gpt2kit.kernel_runtime.files:_flush_to_disk", mode), "gpt2kit.gpt2.train",
                           *map(str, run_options(1, out))], "pausing in ")
    assert stopped.status == 130 and stopped.seconds < PROMPTLY, stopped
    assert out.read_bytes() == b"the previous model"
    assert read_state(train.state_path(out)).run["steps"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["text.txt", "trained.bin", "trained.state.npz"]


def test_ctrl_c_while_the_model_loads_writes_nothing(tmp_path, run_options):
    out = tmp_path / "trained.bin"
    stopped = interrupted([*pausing("gpt2kit.model_runtime.families:load_model", "raise"), "gpt2kit.gpt2.train",
                           *map(str, run_options(2, out))], "pausing in ")
    assert stopped.status == 130 and stopped.seconds < PROMPTLY, stopped
    assert sorted(p.name for p in tmp_path.iterdir()) == ["text.txt"]


@pytest.mark.parametrize("out, message", [
    ("/nonexistent/dir/x.bin", "--out /nonexistent/dir/x.bin: no directory /nonexistent/dir to write it in"),
    ("{tmp}", "--out {tmp}: is a directory; name a file to write"),
], ids=["no-directory", "a-directory"])
def test_an_output_training_cannot_write_is_one_line_before_anything_loads(tmp_path, run_options, out, message):
    status, printed, err = train_here(*run_options(2, out.format(tmp=tmp_path)))
    assert (status, printed, err) == (1, "", f"gpt2kit.gpt2.train: {message.format(tmp=tmp_path)}\n")


def test_resume_takes_only_a_state_of_a_run_with_the_same_options(tmp_path, run_options):
    out = tmp_path / "trained.bin"
    assert train_here(*run_options(1, out))[0] == 0
    state = train.state_path(out)
    status, _, err = train_here(*run_options(2, out), "--resume", state, "--batch", 3)
    assert (status, err) == (1, f"gpt2kit.gpt2.train: --resume {state}: saved by a run with --batch 2, not 3: resume "
                                "with the options it was started with\n")
    status, _, err = train_here(*run_options(2, out), "--resume", out)
    assert status == 1 and err.startswith(f"gpt2kit.gpt2.train: {out}: not a training state the kit saved (")
    assert len(err.splitlines()) == 1


def test_training_s_default_output_goes_where_git_ignores_it(tmp_path, run_options, monkeypatch):
    monkeypatch.chdir(tmp_path)
    options = run_options(1, "unused")
    assert train_here(*options[:options.index("--out")])[0] == 0
    written = sorted(p.relative_to(tmp_path).as_posix() for p in (tmp_path / "results").iterdir())
    assert written == ["results/gpt2_trained.bin", "results/gpt2_trained.state.npz"]
    assert ignored_by_the_kit(tmp_path / "repository", written) == written
