"""Every command of the kit answers a mistake on its command line with one line and status 2
(for those with subcommands, the missing subcommand is the mistake named)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
COMMANDS = ["gpt2", "gpt2.checkpoint", "gpt2.profile", "gpt2.step_check", "gpt2.tokenizer", "reference.verify",
            "benchmarks.kernels", "benchmarks.generation", "benchmarks.grape_study"]
if (ROOT / "grading").exists():  # a student's kit has no grader
    COMMANDS.append("grading")


@pytest.mark.parametrize("command", COMMANDS)
def test_an_unknown_flag_is_one_line(command):
    done = subprocess.run([sys.executable, "-m", command, "--no-such-flag"], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    lines = done.stderr.splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith(f"python -m {command}: ") and lines[0].endswith(" (see --help)")


@pytest.mark.parametrize("flags, message", [
    (["--executors", "baseline,eager"], "argument --executors: must be a comma-separated list of baseline, ptgraph, "
                                        "grape"),
    (["--beams", "1"], "argument --beams: must be an integer in 2..16"),
    (["--max-length", "3"], "argument --max-length: must be an integer >= 7"),
], ids=["executor", "beams", "max-length"])
def test_the_grape_study_names_a_bad_option(flags, message):
    done = subprocess.run([sys.executable, "-m", "benchmarks.grape_study", "runtime", *flags], capture_output=True,
                          text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 2 and done.stderr.splitlines() == [f"python -m benchmarks.grape_study: {message}, "
                                                                 f"got {flags[1]} (see --help)"], done.stderr
