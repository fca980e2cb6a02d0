"""Known-wrong variants (milestones 2 and 3): each passes its cases, or would, without the technique
its variant must show, or with cuBLAS where cuBLAS is not allowed.

One file per way a variant can claim a technique it does not use. Each sets VARIANT
(reference.variants) and defines that variant's host function. The kernel tests
(test_wrong_techniques.py) and the grader of its milestone must give each no credit for
its variant, with the reason; the milestone-1 checks alone would pass most of them.
"""

import importlib
import pkgutil


def names() -> list[str]:
    """The module name of every known-wrong variant here, without importing any."""
    return sorted(info.name for info in pkgutil.iter_modules(__path__))


def load(name: str):
    return importlib.import_module(f"{__name__}.{name}")
