"""Cheats aimed at the grader's own processes: each works on the process it runs in (the worker's
arguments, its modules, its output directory), so a kernel test run in that same process could be
fooled, and only the grader's replay on inputs the worker never sees must catch it.

Each sets FUNCTION and defines that host function; tests/grading/test_grader_gpu.py appends
`from tests.kernels.wrong.grader.<name> import <FUNCTION>` to a copy of the kit's kernels and
grades it. Nothing else imports them: several change the process that imports them.
(tests.kernels.wrong.names() leaves this package out.)
"""

import ast
import pkgutil
from pathlib import Path


def names() -> list[str]:
    return sorted(info.name for info in pkgutil.iter_modules(__path__))


def function_of(name: str) -> str:
    """The FUNCTION a cheat defines, read from its file: importing it would let it loose here."""
    tree = ast.parse((Path(__file__).with_name(f"{name}.py")).read_text())
    return next(ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                and [getattr(t, "id", None) for t in node.targets] == ["FUNCTION"])
