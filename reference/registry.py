"""Every host function the kit knows, from the specs in reference/specs/.

    SPECS                  host function name -> Spec, in name order
    spec("gelu_forward")   one spec
    SPEC_FILES             host function name -> the path of its spec module
    cases(function, seed)  its test cases for a base seed
    build(case)            a Problem: the case's inputs, drawn from its seed
    host_function(name)    the function itself, from the kernels directory this process runs
    kernel_module(name)    kernels/<name>.py of that directory
    unwritten(name)        whether that function is still a starter kit's TODO stub there
    not_written_yet(names) one line naming those still stubs ("gelu_forward: not written yet (kernels/gelu.py)")

This module holds no oracle: the grader's worker imports it (and reference.execution)
to run a submission, and never reference.cpu, reference.gold or reference.judging.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
import traceback
import types
from pathlib import Path
from typing import Callable

import numpy as np

from gpt2kit.kernel_runtime.errors import KernelLoadError, KitError
from gpt2kit.kernel_runtime.loader import KIT_KERNELS, bound_directory
from gpt2kit.kernel_runtime.stubs import function_holds_stub
from gpt2kit.reference import specs as _specs
from gpt2kit.reference.spec import Case, Problem, Spec


def _discover() -> dict[str, Spec]:
    found: dict[str, Spec] = {}
    for info in sorted(pkgutil.iter_modules(_specs.__path__), key=lambda info: info.name):
        module = importlib.import_module(f"gpt2kit.reference.specs.{info.name}")
        spec = getattr(module, "SPEC", None)
        if not isinstance(spec, Spec):
            raise TypeError(f"{module.__file__} defines no SPEC = Spec(...)")
        if spec.function in found:
            raise TypeError(f"{module.__file__}: a second spec of {spec.function}")
        found[spec.function] = spec
        SPEC_FILES[spec.function] = f"reference/specs/{info.name}.py"
    return found


SPEC_FILES: dict[str, str] = {}  # host function name -> its spec's file, relative to the repository
SPECS: dict[str, Spec] = _discover()


def spec(function: str) -> Spec:
    try:
        return SPECS[function]
    except KeyError:
        raise KitError(f"no host function {function!r} (known: {', '.join(SPECS)})") from None


def graded() -> list[Spec]:
    """The host functions students write, which grading/weights.toml must score."""
    return [s for s in SPECS.values() if s.graded]


def cases(function: str, base_seed: int = 0) -> list[Case]:
    return spec(function).test_cases(base_seed)


@functools.lru_cache(maxsize=2)
def build(case: Case) -> Problem:
    """The inputs of `case`, drawn from its seed. A case and its other inputs (Case.other_inputs) are kept once
    drawn, since a check draws them again (the call, its replay, each judgement), so the arrays are read-only: a
    call gets copies (reference.execution.call_arguments)."""
    function_spec = spec(case.function)
    arguments = function_spec.build(case, np.random.default_rng(case.seed))
    for value in (*arguments.values.values(), *arguments.initial.values()):
        if isinstance(value, np.ndarray):
            value.flags.writeable = False
    return Problem(function_spec, case, arguments)


def host_function(function: str, module_name: str | None = None) -> Callable:
    """`function` as the kernels directory this process runs defines it (kernel_runtime.loader),
    in its spec's module, or in `module_name` (a variant's module, reference.variants).

    A module that fails to import, or lacks the function, raises one KernelLoadError
    line naming the file (and the line, when the error happened inside it)."""
    module = kernel_module(module_name or spec(function).module)
    if not callable(getattr(module, function, None)):
        raise KernelLoadError(f"{module.__file__} defines no {function}()")
    return getattr(module, function)


def kernel_module(module_name: str) -> types.ModuleType:
    """kernels/<module_name>.py of the kernels directory this process runs."""
    try:
        return importlib.import_module(f"gpt2kit.kernels.{module_name}")
    except Exception as err:  # a student's file: a syntax error, a missing import, ...
        raise KernelLoadError(f"cannot load {_where(module_name, err)}: {type(err).__name__}: {err}") from None


def unwritten(function: str, module_name: str | None = None, directory: Path | None = None) -> bool:
    """Whether `function` in its module (its spec's, or `module_name`) in `directory` (default: the kernels
    directory this process runs) still holds a handout's TODO stub in what it runs (kernel_runtime.stubs): in a
    starter kit, a function its student has not written yet, which a tool names (not_written_yet) instead of
    running it. The file is read, not imported: a module that does not import, or is missing, is no stub (loading
    it says what is wrong)."""
    directory = Path(directory or bound_directory() or KIT_KERNELS)
    path = directory / f"{module_name or spec(function).module}.py"
    return path.is_file() and function_holds_stub(path.read_text(), function)


def not_written_yet(functions, module_name: str | None = None, directory: Path | None = None) -> str | None:
    """One line naming those of `functions` (each in its spec's module, or all in `module_name`) still unwritten
    (in `directory`, as unwritten reads it), and their files: "gelu_forward: not written yet (kernels/gelu.py)";
    None when every one is written."""
    stubs = [function for function in functions if unwritten(function, module_name, directory)]
    files = sorted({f"kernels/{module_name or spec(function).module}.py" for function in stubs})
    return f"{', '.join(stubs)}: not written yet ({', '.join(files)})" if stubs else None


def host_functions(functions) -> types.SimpleNamespace:
    """A namespace of host functions by name, e.g. the model's operations."""
    return types.SimpleNamespace(**{name: host_function(name) for name in functions})


def _where(module_name: str, err: Exception) -> str:
    """The module's file, with the line in it where `err` happened if it did."""
    directory = bound_directory()
    path = str(directory / f"{module_name}.py") if directory else f"kernels/{module_name}.py"
    if isinstance(err, SyntaxError) and err.lineno:
        return f"{path}:{err.lineno}"
    lines = [frame.lineno for frame in traceback.extract_tb(err.__traceback__) if frame.filename == path]
    return f"{path}:{lines[-1]}" if lines else path
