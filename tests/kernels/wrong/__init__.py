"""Known-wrong implementations: each must be rejected by the kernel tests.

One file per mistake students make. Each sets KERNEL (which tests judge it) and
defines that kernel's host function with the bug. Several are mutants: the kit's
own solution source with one line changed (`mutate` fails loudly if that line is
ever rewritten, so a mutant cannot silently turn back into the solution).
test_known_wrong.py runs every case of KERNEL on each and expects at least one to fail.
"""

import importlib
import pkgutil


def mutate(source: str, old: str, new: str) -> str:
    if source.count(old) != 1:
        raise ValueError(f"mutation target {old!r} must occur exactly once in the source")
    return source.replace(old, new)


def all_wrong() -> list:
    """Every known-wrong module in this package."""
    return [importlib.import_module(f"{__name__}.{info.name}") for info in pkgutil.iter_modules(__path__)]
