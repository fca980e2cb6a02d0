"""What the tests read from the kit's READMEs: which they are, the text of their code blocks, and their pip install
lines."""

import re
from pathlib import Path

ROOT = Path(__file__).parents[1]
# One per audience: students (the kit's, which each handout trims to its milestone), research, course staff.
READMES = {"students": ROOT / "README.md", "research": ROOT / "benchmarks" / "README.md",
           "staff": ROOT / "grading" / "README.md"}
INSTALL = re.compile(r"\.venv/bin/pip install (?P<arguments>[^&#\n]+)")


def code_blocks(readme: str, language: str) -> list[str]:
    """The text of every ```language code block of the README, in order."""
    return re.findall(rf"^```{language}\n(.*?)^```", readme, re.MULTILINE | re.DOTALL)


def bash_blocks(readme: str) -> list[str]:
    return code_blocks(readme, "bash")


def install_lines(readme: str) -> list[str]:
    """The arguments of every `.venv/bin/pip install` in the README's code blocks, as written."""
    found = [m.group("arguments").strip() for block in bash_blocks(readme) for m in INSTALL.finditer(block)]
    return list(dict.fromkeys(a for a in found if a != "-U pip"))
