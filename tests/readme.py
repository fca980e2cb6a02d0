"""What the tests read from a README: the text of its ```bash code blocks."""

import re

BASH_BLOCK = re.compile(r"^```bash\n(.*?)^```", re.MULTILINE | re.DOTALL)


def bash_blocks(readme: str) -> list[str]:
    return BASH_BLOCK.findall(readme)
