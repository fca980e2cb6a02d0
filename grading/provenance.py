"""Which kernels a submission's tapes launched are the staff's own solutions.

The staff's solutions are the CUDA functions of the kit's kernels/*.py whose body holds
a solution block (`// BEGIN SOLUTION`): the code a starter kit hands out as a stub.
Helpers the kit hands out whole (a warp reduction outside any block) are not among
them, so a submission that keeps using one is not named. They are read as text from
the files' string constants (and the constant parts of f-strings; a function cut by a
placeholder is not read), never by importing the modules.

A tape's side: for each program, the `__global__` kernels the tape launched and the
`__device__` functions they call, directly or through one another, in the same
source. A kernel that is only defined beside them does not count.

Two definitions are the same when they are equal after comments are dropped, runs of
whitespace collapsed and whitespace next to punctuation removed, with the function's
own name set aside: reformatting, comments and renaming the function do not hide a
copy, while any change to a token of its signature or body does. This only reports:
the score stays what the cases earned, and a TA reads the code and decides.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import re
from pathlib import Path
from typing import Iterable

from gpt2kit.kernel_runtime.hermetic import without_comments
from gpt2kit.kernel_runtime.loader import KIT_KERNELS
from gpt2kit.kernel_runtime.tape import Tape

SOLUTION_MARKER = "// BEGIN SOLUTION"
QUALIFIERS = ("__global__", "__device__")
# a qualifier, the rest of the declaration (attributes such as __launch_bounds__(...) included), the name, the
# parameters and the opening brace of the body
DEFINITION_HEAD = re.compile(r"\b(__global__|__device__)\b[^{};=]*?\b(?!__launch_bounds__\b)([A-Za-z_]\w*)\s*"
                             r"\([^{};]*\)[^{};()]*\{")
CALLED = re.compile(r"\b(\w+)\(")
OWN_NAME = "@"  # stands for the function's own name in its normalised definition: a renamed copy is still one


@dataclasses.dataclass(frozen=True)
class Definition:
    """One CUDA function defined in a source."""
    qualifier: str   # __global__ or __device__
    name: str
    text: str        # as written, comments included
    normalised: str  # comments and inessential whitespace dropped, its own name as OWN_NAME

    @property
    def kind(self) -> str:
        return "kernel" if self.qualifier == "__global__" else "device function"


def normalised(code: str) -> str:
    """Comment-free CUDA code as one line: whitespace runs collapsed, none left next to punctuation."""
    return re.sub(r" ?([^\w\s]) ?", r"\1", " ".join(code.split()))


def definitions(source: str) -> list[Definition]:
    """Every `__global__` and `__device__` function defined (with a body) in the CUDA `source`, in order."""
    code, found, at = without_comments(source), [], 0
    while head := DEFINITION_HEAD.search(code, at):
        end = _closing_brace(code, head.end() - 1)
        if end is None:  # its body never closes: a fragment, not a definition
            at = head.end()
            continue
        name = head[2]
        own = re.sub(rf"\b{name}\b", OWN_NAME, normalised(code[head.start():end + 1]))
        found.append(Definition(head[1], name, source[head.start():end + 1], own))
        at = end + 1
    return found


def _closing_brace(code: str, opening: int) -> int | None:
    depth = 0
    for at in range(opening, len(code)):
        depth += {"{": 1, "}": -1}.get(code[at], 0)
        if depth == 0:
            return at
    return None


def cuda_strings(python: str) -> list[str]:
    """The string constants of a Python source (f-strings' constant parts included) that hold CUDA functions."""
    return [node.value for node in ast.walk(ast.parse(python))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and any(qualifier in node.value for qualifier in QUALIFIERS)]


@functools.cache
def staff_solutions(kernels: Path = KIT_KERNELS) -> dict[str, tuple[Definition, str]]:
    """Normalised definition -> (the definition, its file as kernels/<name>.py) of every CUDA function of the
    kit's kernels whose body holds a solution block; read once per process."""
    index = {}
    for path in sorted(kernels.glob("*.py")):
        for source in cuda_strings(path.read_text()):
            for definition in definitions(source):
                if SOLUTION_MARKER in definition.text:
                    index.setdefault(definition.normalised, (definition, f"{kernels.name}/{path.name}"))
    return index


def launched_definitions(source: str, kernels: set[str]) -> list[Definition]:
    """The definitions in `source` of the kernels named, and of the device functions they reach by calls."""
    defined = definitions(source)
    devices = {d.name: d for d in defined if d.qualifier == "__device__"}
    reached = [d for d in defined if d.qualifier == "__global__" and d.name in kernels]
    for definition in reached:  # grows as it goes: each device function reached is read for its own calls
        reached += [devices.pop(called) for called in CALLED.findall(definition.normalised) if called in devices]
    return reached


def staff_kernels_taped(variant: str, tapes: Iterable[Tape]) -> list[str]:
    """One line per function the tapes launched (or called from a launched kernel) that is a staff solution:
    "matmul_forward: taped kernel matmul_forward_kernel is the staff solution's (kernels/matmul.py)"."""
    launched = {}  # source -> the kernels launched from it, over every tape: each source is read once
    for tape in tapes:
        for program, kernel in tape.kernels_launched():  # a name expression (k<float>) names the function k
            launched.setdefault(program.source, set()).add(kernel.split("<")[0].split("::")[-1].strip())
    solutions, lines = staff_solutions(), []
    for source, kernels in launched.items():
        for taped in launched_definitions(source, kernels):
            if taped.normalised in solutions:
                staff, path = solutions[taped.normalised]
                renamed = "" if staff.name == taped.name else f" {staff.name}"
                lines.append(f"{variant}: taped {taped.kind} {taped.name} is the staff solution's{renamed} ({path})")
    return list(dict.fromkeys(lines))
