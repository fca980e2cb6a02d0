"""`python -m gpt2` end to end on the CPU: a tiny random model, the reference backend."""

import subprocess
import sys
from pathlib import Path

import pytest

from gpt2.checkpoint import write_llmc
from tests.model.helpers import TINY, perturbed_parameters

ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "tiny.bin"
    write_llmc(path, TINY, perturbed_parameters(TINY, seed=4))
    return path


def gpt2_cli(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "gpt2", *args], input=stdin, capture_output=True, text=True,
                          cwd=ROOT, timeout=120)


def test_completes_a_prompt(tiny_model):
    args = ("Hello, my name is", "--model", str(tiny_model), "--backend", "reference", "--max-new-tokens", "6",
            "--seed", "3")
    first, second = gpt2_cli(*args), gpt2_cli(*args)
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("Hello, my name is") and len(first.stdout) > len("Hello, my name is\n")
    assert first.stdout == second.stdout  # same seed, same text


def test_greedy_with_and_without_cache_agree(tiny_model):
    common = ("The", "--model", str(tiny_model), "--backend", "reference", "--max-new-tokens", "8",
              "--temperature", "0")
    assert gpt2_cli(*common).stdout == gpt2_cli(*common, "--no-cache").stdout


def test_interactive_loop(tiny_model):
    done = gpt2_cli("--model", str(tiny_model), "--backend", "reference", "--max-new-tokens", "3",
                    stdin="First prompt\nSecond prompt\n\n")
    assert done.returncode == 0, done.stderr
    assert "First prompt" in done.stdout and "Second prompt" in done.stdout


@pytest.mark.parametrize("args, message", [
    (("hi", "--model", "/no/such/model.bin", "--backend", "reference"), "gpt2: /no/such/model.bin: no such file"),
    (("hi", "--model", "random:huge", "--backend", "reference"), "gpt2: unknown GPT-2 size 'huge'"),
    (("hi", "--backend", "reference", "--temperature", "-1"), "gpt2: temperature must be >= 0"),
])
def test_errors_are_one_line(args, message):
    done = gpt2_cli(*args)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1].startswith(message)
    assert "Traceback" not in done.stderr


def test_prompt_longer_than_the_context_is_cut_with_a_warning(tiny_model):
    done = gpt2_cli(" ".join(["word"] * 80), "--model", str(tiny_model), "--backend", "reference", "--max-new-tokens", "4")
    assert done.returncode == 0, done.stderr
    assert "prompt of 80 tokens cut to its last 60" in done.stderr
