"""Every command of the kit answers a mistake on its command line with one line and status 2
(for those with subcommands, the missing subcommand is the mistake named).

Each command starts in a fresh interpreter once (an unknown flag), which shows nothing its imports
print gets in the way; the other mistakes run the same `python -m` entry in this process, since
what they prove is the parsing and the order of the checks, not the interpreter's start."""

import os
import runpy
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
COMMANDS = ["gpt2kit", "gpt2kit.gpt2.checkpoint", "gpt2kit.gpt2.nsight", "gpt2kit.gpt2.step_check",
            "gpt2kit.gpt2.tokenizer", "gpt2kit.reference.verify", "gpt2kit.benchmarks.kernels",
            "gpt2kit.benchmarks.generation", "gpt2kit.benchmarks.grape_study", "gpt2kit.benchmarks.speech_profile"]
if (ROOT / "grading").exists():  # a student's kit has no grader
    COMMANDS.append("gpt2kit.grading")


def run_fresh(*args, env=None):
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env=None if env is None else os.environ | env)


@pytest.mark.parametrize("command", COMMANDS)
def test_an_unknown_flag_is_one_line(command):
    done = run_fresh(command, "--no-such-flag")
    lines = done.stderr.splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith(f"python -m {command}: ") and lines[0].endswith(" (see --help)")


@pytest.mark.parametrize("flags, message", [
    (["--executors", "baseline,eager"], "argument --executors: must be a comma-separated list of baseline, ptgraph, "
                                        "grape"),
    (["--beams", "1"], "argument --beams: must be an integer in 2..16"),
    (["--max-length", "3"], "argument --max-length: must be an integer >= 7"),
], ids=["executor", "beams", "max-length"])
def test_the_grape_study_names_a_bad_option(flags, message, run_kit):
    done = run_kit("gpt2kit.benchmarks.grape_study", "runtime", *flags)
    assert done.returncode == 2 and done.stderr.splitlines() == [
        f"python -m gpt2kit.benchmarks.grape_study: {message}, got {flags[1]} (see --help)"], done.stderr


@pytest.fixture
def run_kit(capsys, monkeypatch):
    """run_kit(module, *args, env=None): `python -m module args` run in this process, from the kit's root, with
    `env` added to the environment; its exit status and what it wrote, as subprocess.run returns them."""
    def run(module, *args, env=None):
        with monkeypatch.context() as patch:
            patch.chdir(ROOT)
            patch.setattr(sys, "argv", [module, *args])
            for name, value in (env or {}).items():
                patch.setenv(name, value)
            capsys.readouterr()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # runpy: the module was imported before
                try:
                    runpy.run_module(module, run_name="__main__", alter_sys=True)
                    status = 0
                except SystemExit as stop:
                    status = stop.code or 0
                    if not isinstance(status, int):  # a message: printed, with status 1, as Python does
                        print(status, file=sys.stderr)
                        status = 1
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess([module, *args], status, out, err)
    return run


SEED_RULE = "must be a seed, an integer from 0 to 2**31 - 1"
SEED_FLAGS = [("gpt2kit", "hi"), ("gpt2kit.gpt2.step_check",), ("gpt2kit.reference.verify",)]
if (ROOT / "grading").exists():
    SEED_FLAGS += [("gpt2kit.grading", "submission"), ("gpt2kit.grading", "leaderboard", "submission")]


@pytest.mark.parametrize("seed", ["-5", "2147483648", "99999999999999999999999", "abc"])
@pytest.mark.parametrize("command", SEED_FLAGS, ids=" ".join)
def test_a_seed_out_of_range_is_one_line_at_parsing(command, seed, run_kit):
    done = run_kit(*command, "--seed", seed)
    prog = " ".join(part for part in command if part not in ("hi", "submission"))
    assert (done.returncode, done.stderr.splitlines()) == (
        2, [f"python -m {prog}: argument --seed: {SEED_RULE}, got {seed} (see --help)"]), done.stderr


@pytest.mark.parametrize("flag, env, source", [(["--seed", "-5"], {}, "--seed"),
                                               ([], {"KIT_SEED": "abc"}, "$KIT_SEED"),
                                               ([], {"KIT_SEED": "2147483648"}, "$KIT_SEED")])
def test_pytest_s_seed_out_of_range_is_one_usage_line(flag, env, source):
    done = run_fresh("pytest", "tests/kernels/test_arguments.py", "-p", "no:cacheprovider", "--collect-only", *flag,
                   env=env)
    given = flag[1] if flag else env["KIT_SEED"]
    lines = done.stderr.strip().splitlines()  # pytest ends a UsageError with a blank line of its own
    assert done.returncode == 4 and lines == [f"ERROR: {source}: {SEED_RULE}, got {given}"], done.stdout + done.stderr


@pytest.mark.parametrize("command, message", [
    (("gpt2kit.reference.verify", "--kernels", "/no/such/kernels"),
     "gpt2kit.reference.verify: no kernels directory at "),
    (("gpt2kit.gpt2.step_check", "--kernels", "/no/such/kernels"), "gpt2kit.gpt2.step_check: no kernels directory at "),
    (("gpt2kit.gpt2.step_check", "--model", "/no/such/model.bin"),
     "gpt2kit.gpt2.step_check: /no/such/model.bin: no such file"),
    (("gpt2kit.gpt2.nsight", "--kernels", "/no/such/kernels"), "gpt2kit.gpt2.nsight: no kernels directory at "),
    (("gpt2kit.gpt2.nsight", "--model", "/no/such/model.bin"), "gpt2kit.gpt2.nsight: /no/such/model.bin: no such file"),
    (("gpt2kit.benchmarks.kernels", "--kernels", "/no/such/kernels"),
     "gpt2kit.benchmarks.kernels: no kernels directory at "),
    (("gpt2kit.benchmarks.generation", "--model", "/no/such/model.bin"),
     "gpt2kit.benchmarks.generation: /no/such/model.bin: no "),
    (("gpt2kit.benchmarks.grape_study", "runtime", "--model", "/no/such/model.bin"),
     "python -m gpt2kit.benchmarks.grape_study: /no/such/model.bin: no such file"),
    (("gpt2kit.benchmarks.grape_study", "runtime", "--out", "README.md"),
     "python -m gpt2kit.benchmarks.grape_study: --out README.md: README.md is not a directory"),
    (("gpt2kit.benchmarks.training", "--out", "README.md/training"),
     "gpt2kit.benchmarks.training: --out README.md/training: README.md is not a directory"),
], ids=["verify-kernels", "step_check-kernels", "step_check-model", "nsight-kernels", "nsight-model",
        "benchmarks.kernels", "benchmarks.generation", "grape_study-model", "grape_study-out", "training-out"])
def test_a_missing_path_is_named_before_a_missing_gpu(command, message, run_kit):
    done = run_kit(*command)
    lines = done.stderr.splitlines()
    assert done.returncode in (1, 2) and len(lines) == 1 and lines[0].startswith(message), done.stderr


@pytest.mark.parametrize("command", [("gpt2kit", "hi"), ("gpt2kit.gpt2.step_check",),
                                     ("gpt2kit.benchmarks.grape_study", "runtime"), ("gpt2kit.benchmarks.generation",),
                                     ("gpt2kit.benchmarks.decode",)], ids=" ".join)
def test_an_unknown_variant_is_named_at_parsing(command, run_kit):
    from gpt2kit.reference.variants import VARIANTS

    done = run_kit(*command, "--variant", "bogus")
    prog = " ".join(part for part in command if part not in ("hi", "runtime"))
    assert (done.returncode, done.stderr.splitlines()) == (2, [
        f"python -m {prog}: argument --variant: no variant 'bogus'; the variants are {', '.join(VARIANTS)} "
        "(see --help)"]), done.stderr


@pytest.mark.parametrize("command, hidden, message", [
    (("gpt2kit.benchmarks.grape_study", "breakdown"), "matplotlib",
     "matplotlib is not installed: the figures are drawn with it: pip install -e '.[experiments]'"),
    (("gpt2kit.benchmarks.grape_study", "runtime"), "transformers",
     "transformers is not installed: the comparison with transformers needs it: pip install -e '.[hf]'"),
    (("gpt2kit.benchmarks.training",), "torch",
     "torch is not installed: the comparison with transformers needs PyTorch: the README's Setup says how to add it"),
], ids=["study-figures", "study-transformers", "training-torch"])
def test_a_benchmark_names_what_to_install_before_a_missing_gpu(command, hidden, message, run_kit, monkeypatch):
    import importlib.util

    find_spec = importlib.util.find_spec
    installed = ("matplotlib", "torch", "transformers")  # as if: only `hidden` is missing
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: (
        None if name == hidden else object() if name in installed else find_spec(name, *args)))
    done = run_kit(*command)
    prog = "python -m gpt2kit.benchmarks.grape_study" if command[0] == "gpt2kit.benchmarks.grape_study" else command[0]
    assert done.returncode in (1, 2) and done.stderr.splitlines() == [f"{prog}: {message}"], done.stderr


@pytest.mark.parametrize("flag, env, message", [
    (["--profile", "bogus"], {}, "--profile: no precision profile 'bogus'"),
    ([], {"KIT_PROFILE": "bogus"}, "$KIT_PROFILE: no precision profile 'bogus'"),
], ids=["flag", "environment"])
def test_verify_takes_a_profile_as_the_other_checks_do(flag, env, message, run_kit):
    done = run_kit("gpt2kit.reference.verify", *flag, env=env)
    assert done.returncode == 2 and done.stderr.splitlines() == [
        f"gpt2kit.reference.verify: {message}; the profiles are fp32, tf32, course"], done.stderr
