"""What the tests read from a README: the text of its ```bash code blocks, and its pip install lines."""

import re

BASH_BLOCK = re.compile(r"^```bash\n(.*?)^```", re.MULTILINE | re.DOTALL)
INSTALL = re.compile(r"\.venv/bin/pip install (?P<arguments>[^&#\n]+)")


def bash_blocks(readme: str) -> list[str]:
    return BASH_BLOCK.findall(readme)


def install_lines(readme: str) -> list[str]:
    """The arguments of every `.venv/bin/pip install` in the README's code blocks, as written."""
    found = [m.group("arguments").strip() for block in bash_blocks(readme) for m in INSTALL.finditer(block)]
    return list(dict.fromkeys(a for a in found if a != "-U pip"))
