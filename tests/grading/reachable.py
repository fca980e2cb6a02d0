"""Whether any function of the oracle (reference/cpu.py) or of gold (reference/gold.py)
can be reached from the modules a process has loaded.

The walk starts at every module in sys.modules and follows attributes through
modules, classes, namespaces, dicts, lists and tuples, and into each function's
closure and wrapped function, without calling anything.
"""

import sys
import types
from pathlib import Path

from gpt2kit import reference

# the oracle of the kit this process runs (a grader's worker runs the worker kit's)
ORACLE_FILES = {str(Path(reference.__file__).parent / name) for name in ("cpu.py", "gold.py")}


def _children(value):
    if isinstance(value, (types.ModuleType, type, types.SimpleNamespace)):
        try:
            return list(vars(value).values())
        except TypeError:
            return []
    if isinstance(value, dict):
        return list(value.values())
    if isinstance(value, (list, tuple, set, frozenset)):
        return list(value)
    if isinstance(value, types.FunctionType):
        cells = [cell.cell_contents for cell in (value.__closure__ or ()) if _filled(cell)]
        return cells + [value.__dict__.get("__wrapped__")]
    return []


def _filled(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


def _is_oracle(value) -> bool:
    if isinstance(value, types.FunctionType):
        return value.__code__.co_filename in ORACLE_FILES
    if isinstance(value, types.ModuleType):
        return str(vars(value).get("__file__")) in ORACLE_FILES
    return False


def reachable_oracle(limit: int = 2_000_000) -> list[str]:
    """The paths (module.attribute...) by which an oracle function or module is reachable."""
    found, seen = [], set()
    frontier = [(name, module) for name, module in list(sys.modules.items()) if module is not None]
    while frontier and len(seen) < limit:
        path, value = frontier.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        if _is_oracle(value):
            found.append(path)
            continue
        frontier += [(f"{path}.{i}", child) for i, child in enumerate(_children(value))]
    return found
