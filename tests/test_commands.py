"""Every command of the kit answers a mistake on its command line with one line and status 2
(for those with subcommands, the missing subcommand is the mistake named)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
COMMANDS = ["gpt2", "gpt2.checkpoint", "gpt2.profile", "gpt2.step_check", "gpt2.tokenizer", "reference.verify",
            "benchmarks.kernels", "benchmarks.generation"]
if (ROOT / "grading").exists():  # a student's kit has no grader
    COMMANDS.append("grading")


@pytest.mark.parametrize("command", COMMANDS)
def test_an_unknown_flag_is_one_line(command):
    done = subprocess.run([sys.executable, "-m", command, "--no-such-flag"], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    lines = done.stderr.splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith(f"python -m {command}: ") and lines[0].endswith(" (see --help)")
