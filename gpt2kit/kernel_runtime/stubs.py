"""A starter kit's unwritten code: the TODO stub that the handout (python -m gpt2kit.grading
handout) puts in place of each solution block, and whether a kernels file, or one
host function of it, still holds one.

    holds_stub(path.read_text())                      True while a stub line is left in the file
    function_holds_stub(path.read_text(), "gelu_forward")   ... in what that function runs

The check looks for the stub's whole line, exactly as the handout writes it, so a
student who writes a kernel under its TODO line without deleting the line sees it
still counted as unwritten (deleting the line fixes that). A host function's check
reads its module's source, without running it: the function's own body, the module's
functions and variables it names (and theirs, a factory of kernels included), the
CUDA kernels those make (CudaKernel or cupy.RawKernel, by name) and the __device__
functions those kernels call. So in a module of several host functions (attention.py,
decode.py) one written function counts as written while another is still a stub.
Where the source does not tell (it does not parse, lacks the function, or names a
kernel it does not define), the whole file is judged.
The kit's own files hold solutions, never stubs.
"""

from __future__ import annotations

import ast
import re

STUB_LINES = {"//": "// TODO: write this kernel (the comment at the top of this file says what it computes)",
              "#": "pass  # TODO: write this (the comment at the top of this file says what it computes)"}
STUB = re.compile(r"^[ \t]*(?:" + "|".join(map(re.escape, STUB_LINES.values())) + r")[ \t]*$", re.MULTILINE)
KERNEL_MAKERS = ("CudaKernel", "RawKernel")  # called as Maker(source, "kernel_name", ...)
DEVICE_FUNCTION = re.compile(r"__device__[^{;=]*?\b(\w+)\s*\([^{;]*\)\s*\{")


def holds_stub(text: str) -> bool:
    """Whether the source `text` still holds a handout's stub line."""
    return STUB.search(text) is not None


def function_holds_stub(source: str, function: str) -> bool:
    """Whether a stub line is left in what `function` of the kernel module `source` runs (the module docstring
    says how that is read)."""
    try:
        python, kernels = reached(source, function)
    except (SyntaxError, KeyError):
        return holds_stub(source)
    lines = source.splitlines()
    if any(holds_stub("\n".join(lines[node.lineno - 1:node.end_lineno])) for node in python):
        return True
    devices = set(DEVICE_FUNCTION.findall(source))
    seen, bodies = set(kernels), [cuda_body(source, kernel) for kernel in kernels]
    while bodies:
        body = bodies.pop()
        if body is None:
            return holds_stub(source)
        if holds_stub(body):
            return True
        for called in set(re.findall(r"\b(\w+)\s*\(", body)) & devices - seen:
            seen.add(called)
            bodies.append(cuda_body(source, called, "__device__"))
    return False


def reached(source: str, function: str) -> tuple[list[ast.FunctionDef], set[str]]:
    """The module-level functions that `function` of the module `source` reaches through the names it uses (it
    included), following the module's functions and variables, and the kernels (by name) made on the way.
    SyntaxError if the source does not parse, KeyError if it defines no `function`."""
    tree = ast.parse(source)
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    variables = {target.id: node.value for node in tree.body if isinstance(node, ast.Assign)
                 for target in node.targets if isinstance(target, ast.Name)}
    reach, kernels, seen = [functions[function]], set(), {function}
    python = list(reach)
    while reach:
        for node in ast.walk(reach.pop()):
            if isinstance(node, ast.Call) and _called_name(node.func) in KERNEL_MAKERS and len(node.args) > 1 \
                    and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
                kernels.add(node.args[1].value)
            elif isinstance(node, ast.Name) and node.id not in seen and (node.id in functions or node.id in variables):
                seen.add(node.id)
                reach.append(functions.get(node.id) or variables[node.id])
                python += [functions[node.id]] if node.id in functions else []
    return python, kernels


def _called_name(func: ast.expr) -> str | None:
    """CudaKernel for CudaKernel(...), RawKernel for cupy.RawKernel(...)."""
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def cuda_body(source: str, name: str, qualifier: str = "__global__") -> str | None:
    """The body, between its braces, of the CUDA function `name` (a __global__ kernel, or a __device__ function)
    defined in `source`; None if it defines none."""
    head = re.search(rf"{qualifier}[^{{;]*?\b{re.escape(name)}\s*\([^{{;]*\)\s*\{{", source)
    if head is None:
        return None
    depth, start = 0, head.end() - 1
    for end in range(start, len(source)):
        depth += {"{": 1, "}": -1}.get(source[end], 0)
        if depth == 0:
            return source[start + 1:end]
    return None
