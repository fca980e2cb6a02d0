"""A starter kit's unwritten code: the TODO stub that the handout (python -m grading
handout) puts in place of each solution block, and whether a kernels file still holds one.

    holds_stub(path.read_text())   True while a stub line is left in the file

The check is per file and looks for the stub's whole line, exactly as the handout
writes it: a module of several kernels counts as unwritten while any one of them is
still a stub, and a student who writes a kernel under its TODO line without deleting
the line sees the file still counted as unwritten (deleting the line fixes that).
The kit's own files hold solutions, never stubs.
"""

import re

STUB_LINES = {"//": "// TODO: write this kernel (the comment at the top of this file says what it computes)",
              "#": "pass  # TODO: write this (the comment at the top of this file says what it computes)"}
STUB = re.compile(r"^[ \t]*(?:" + "|".join(map(re.escape, STUB_LINES.values())) + r")[ \t]*$", re.MULTILINE)


def holds_stub(text: str) -> bool:
    """Whether the source `text` still holds a handout's stub line."""
    return STUB.search(text) is not None
