"""What the tests read from the kit's READMEs: which they are, and the text of their ```bash code blocks."""

import re
from pathlib import Path

ROOT = Path(__file__).parents[1]
# One per audience: students (the kit's, which each handout trims to its milestone), research, course staff.
READMES = {"students": ROOT / "README.md", "research": ROOT / "benchmarks" / "README.md",
           "staff": ROOT / "grading" / "README.md"}
BASH_BLOCK = re.compile(r"^```bash\n(.*?)^```", re.MULTILINE | re.DOTALL)


def bash_blocks(readme: str) -> list[str]:
    return BASH_BLOCK.findall(readme)
