"""`python -m gpt2kit` end to end on the CPU: a tiny random model, the reference backend."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import gpt2kit.gpt2.__main__ as cli
from gpt2kit.gpt2 import nsight
from gpt2kit.gpt2.checkpoint import perturbed_parameters, write_hf
from tests.interrupting import interruptible
from tests.model.helpers import TINY

ROOT = Path(__file__).parents[2]


def gpt2_cli(*args, stdin=None, env=None):
    return subprocess.run([sys.executable, "-m", "gpt2kit", *args], input=stdin, capture_output=True, text=True,
                          cwd=ROOT, timeout=120, env=env, check=False)


def start_gpt2_cli(*args):
    return subprocess.Popen([sys.executable, "-m", "gpt2kit", *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=ROOT, preexec_fn=interruptible)


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


def test_interactive_loop_prints_only_the_completions(tiny_model):
    common = ("--model", str(tiny_model), "--backend", "reference", "--max-new-tokens", "3", "--temperature", "0")
    typed = gpt2_cli(*common, stdin="First prompt\n\n")
    given = gpt2_cli("First prompt", *common)
    assert typed.returncode == 0, typed.stderr
    assert given.stdout == "First prompt" + typed.stdout  # the typed prompt is not echoed
    both = gpt2_cli(*common, stdin="First prompt\nSecond prompt\n")
    assert both.stdout.startswith(typed.stdout) and "prompt" not in both.stdout


def one_line_exit(capsys, argv) -> tuple[int, str]:
    """main(argv)'s exit status and its stderr, which must be one line."""
    try:
        status = cli.main(argv)
    except SystemExit as exit:
        status = exit.code
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1, captured.err
    return status, captured.err.rstrip("\n")


@pytest.mark.parametrize("flag, value, rule", [
    ("--max-new-tokens", "-1", "an integer from 0 to 2047"),
    ("--max-new-tokens", "many", "an integer from 0 to 2047"),
    ("--max-new-tokens", "2048", "an integer from 0 to 2047"),  # no room for a prompt in any model's context
    ("--max-new-tokens", "99999999999999999999", "an integer from 0 to 2047"),
    ("--temperature", "nan", "a finite number >= 0"),
    ("--temperature", "inf", "a finite number >= 0"),
    ("--temperature", "-1", "a finite number >= 0"),
    ("--seed", "-1", "a seed, an integer from 0 to 2**31 - 1"),
    ("--seed", "2147483648", "a seed, an integer from 0 to 2**31 - 1"),
    ("--top-k", "-5", "an integer >= 0"),
    ("--top-p", "0", "a number in (0, 1]"),
    ("--top-p", "1.5", "a number in (0, 1]"),
    ("--top-p", "nan", "a number in (0, 1]"),
])
def test_bad_option_is_one_line_at_parsing(capsys, flag, value, rule):
    status, line = one_line_exit(capsys, ["hi", "--model", "/no/such/model.bin", flag, value])
    assert status == 2
    assert line == f"python -m gpt2kit: argument {flag}: must be {rule}, got {value} (see --help)"


def test_unknown_option_misplaced_kernels_and_an_empty_prompt_are_one_line(capsys):
    status, line = one_line_exit(capsys, ["hi", "--bogus"])
    assert (status, line) == (2, "python -m gpt2kit: unrecognized arguments: --bogus (see --help)")
    status, line = one_line_exit(capsys, ["hi", "--backend", "reference", "--kernels", "kernels"])
    assert status == 2
    assert line == "python -m gpt2kit: argument --kernels: applies to --backend kernels, not reference (see --help)"
    status, line = one_line_exit(capsys, ["hi", "--backend", "gold", "--variant", "matmul_tiled"])  # in every kit
    assert (status, line) == (2, "python -m gpt2kit: argument --variant: applies to --backend kernels, not gold "
                                 "(see --help)")
    status, line = one_line_exit(capsys, ["", "--model", "random"])
    assert (status, line) == (2, "python -m gpt2kit: argument prompt: is empty: give text to complete, or none to type "
                                 "prompts one per line (see --help)")


def test_zero_new_tokens_prints_nothing_and_loads_no_model(capsys):
    assert cli.main(["hi", "--model", "/no/such/model.bin", "--max-new-tokens", "0"]) == 0
    assert capsys.readouterr() == ("", "")


@pytest.mark.parametrize("args, asked", [
    (["--kernels", "my_kernels"], "--kernels"),
    (["--backend", "kernels", "--kernels", "my_kernels"], "--kernels"),
    (["--backend", "kernels"], "--backend kernels"),
    (["--backend", "gold"], "--backend gold"),
    (["--variant", "matmul_tiled"], "--variant"),  # a variant of every kit's: an unknown one is refused at parsing
])
def test_gpu_backends_without_a_gpu_say_so_in_one_line(capsys, monkeypatch, tmp_path, tiny_model, args, asked):
    (tmp_path / "my_kernels").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli, "gpu_unavailable_reason", lambda: "no NVIDIA GPU or driver on this machine")
    status, line = one_line_exit(capsys, ["hi", "--model", str(tiny_model), *args])
    assert (status, line) == (1, f"gpt2kit: {asked} needs a GPU: no NVIDIA GPU or driver on this machine")


@pytest.mark.parametrize("model, kernels, message", [
    ("/no/such/model.bin", None, "gpt2kit: /no/such/model.bin: no such file or directory, and not a model name"),
    (None, "/no/such/kernels", "gpt2kit: no kernels directory at /no/such/kernels"),
], ids=["model", "kernels"])
def test_a_missing_path_is_named_before_a_missing_gpu(capsys, monkeypatch, tiny_model, model, kernels, message):
    monkeypatch.setattr(cli, "gpu_unavailable_reason", lambda: "no NVIDIA GPU or driver on this machine")
    status, line = one_line_exit(capsys, ["hi", "--model", model or str(tiny_model), "--backend", "kernels",
                                          *(["--kernels", kernels] if kernels else [])])
    assert status == 1 and line.startswith(message), line


@pytest.mark.parametrize("args, message", [
    (("hi", "--model", "/no/such/model.bin"), "gpt2kit: /no/such/model.bin: no such file"),
    (("hi", "--model", "random:huge"), "gpt2kit: unknown model size 'huge' (GPT-2's: gpt2, gpt2-medium, gpt2-large, "
                                       "gpt2-xl, gpt2-mini, 124M, 355M, 774M, 1558M; GPT-J's: gpt-j-6b; Wav2Vec2's: "
                                       "base, tiny)"),
])
def test_errors_are_one_line(args, message):
    done = gpt2_cli(*args, "--backend", "reference")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1].startswith(message)
    assert "Traceback" not in done.stderr


def hub_cache_holding(cache: Path, repo_id: str, params) -> Path:
    """A huggingface_hub cache (the layout snapshot_download writes) holding `params` as `repo_id`'s main."""
    commit = "0" * 40
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    write_hf(repo / "snapshots" / commit, TINY, params)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    return cache


def test_hub_name_reads_the_hub_cache_offline_even_beside_a_gpt2_folder(tmp_path):
    """Run from the kit's root, where gpt2/ is the package: "gpt2" still means the hub's model."""
    pytest.importorskip("huggingface_hub")
    cache = hub_cache_holding(tmp_path, "openai-community/gpt2", perturbed_parameters(TINY, seed=4))
    offline = {name: value for name, value in os.environ.items() if name != "GPT2_MODEL"} | {
        "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(cache)}
    common = ("Hello", "--backend", "reference", "--max-new-tokens", "3", "--temperature", "0")
    by_name = gpt2_cli(*common, "--model", "gpt2", env=offline)
    assert by_name.returncode == 0, by_name.stderr
    assert by_name.stdout.startswith("Hello")
    by_default = gpt2_cli(*common, env=offline)  # no --model: the cached gpt2 comes first
    assert by_default.stdout == by_name.stdout, by_default.stderr


def test_hub_name_missing_from_an_offline_cache_is_one_line(tmp_path):
    offline_and_empty = os.environ | {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path)}
    done = gpt2_cli("hi", "--model", "gpt2", "--backend", "reference", env=offline_and_empty)
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1].startswith("gpt2kit: openai-community/gpt2: could not download from the "
                                                   "Hugging Face hub (")


def test_prompt_longer_than_the_context_is_cut_and_echoed_cut(tiny_model):
    prompt = "Start " + " ".join(["word"] * 79)  # 80 tokens: "Start", then 79 times " word"
    done = gpt2_cli(prompt, "--model", str(tiny_model), "--backend", "reference", "--max-new-tokens", "4",
                    "--temperature", "0")
    assert done.returncode == 0, done.stderr
    assert "prompt of 80 tokens cut to its last 60: 20 dropped from its start" in done.stderr
    assert done.stdout.startswith(" word" * 60) and "Start" not in done.stdout


def test_closed_pipe_ends_quietly(tiny_model):
    with start_gpt2_cli("--model", str(tiny_model), "--backend", "reference", "--max-new-tokens", "5") as running:
        running.stdin.write(b"First prompt\n")
        running.stdin.flush()
        assert running.stdout.read(1)  # the first completion is on its way ...
        running.stdout.close()          # ... and the reader leaves, like `| head -c 1`
        running.stdin.write(b"Second prompt\n")
        running.stdin.close()
        assert running.wait(timeout=120) == 141
        errors = running.stderr.read().decode()
    assert "Traceback" not in errors and "BrokenPipe" not in errors, errors


def test_ctrl_c_while_loading_exits_quietly_with_130():
    # 355M: seconds of loading even on a loaded machine, so the Ctrl-C lands while NumPy draws the weights, where
    # it is sometimes swallowed (kernel_runtime.commands.raise_lost_interrupt)
    with start_gpt2_cli("--model", "random:gpt2-medium", "--backend", "reference") as running:
        for line in running.stderr:
            if line.startswith(b"[gpt2kit] loading "):
                break
        running.send_signal(signal.SIGINT)
        running.stdin.close()  # a Ctrl-C the CLI lost shows as exit 0 at the end of its input, not as a hang
        assert running.wait(timeout=120) == 130
        assert "Traceback" not in running.stderr.read().decode()


def test_help_shows_every_default(capsys):
    with pytest.raises(SystemExit) as exit:
        cli.main(["--help"])
    assert exit.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--max-new-tokens MAX_NEW_TOKENS tokens to generate (default 64)" in text
    for action in cli.build_parser()._actions:
        assert action.dest == "help" or "default" in action.help, action.dest


def test_nsight_help_describes_itself_in_whole_sentences(capsys):
    with pytest.raises(SystemExit):
        nsight.main(["--help"])
    description = capsys.readouterr().out.split("\n\n")[1]
    assert description.startswith("Profile one forward pass") and description.endswith(".")
