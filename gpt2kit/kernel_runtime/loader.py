"""Which kernels directory a process runs: one per process, as the package `gpt2kit.kernels`.

`use_kernels(path)` binds the package name `gpt2kit.kernels` to a directory, so that
`import gpt2kit.kernels.x` finds that directory's own files everywhere in the process:
in the tests, the quick check, the step check, the benchmarks, the model, and inside the
directory itself (a student's residual.py that imports gpt2kit.kernels.encoder gets the
student's encoder.py, never the kit's). The grader's worker binds a submission the same
way, so what a student tests is what the grader grades. An import of gpt2kit.kernels
before any directory is bound binds this kit's own kernels/, the same way
(gpt2kit.KernelsThroughTheLoader): no search of a path ever finds the package.

A process runs one kernels directory: binding a second one is an error (start
another process for it). The directory's __init__.py is not run, so one module that
does not import leaves the others usable.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path

import gpt2kit
from gpt2kit.kernel_runtime.errors import KernelLoadError

PACKAGE = "gpt2kit.kernels"
KIT_KERNELS = gpt2kit.KIT_ROOT / "kernels"  # this kit's own kernels/


def kernels_directory(path: str | Path) -> Path:
    """`path` itself, or its kernels/ subdirectory when it has one (a whole kit)."""
    directory = Path(path).expanduser()
    if (directory / "kernels").is_dir():
        directory = directory / "kernels"
    if not directory.is_dir():
        raise KernelLoadError(f"no kernels directory at {path}")
    return directory.resolve()


def kernels_spec(directory: Path = KIT_KERNELS) -> importlib.machinery.ModuleSpec:
    """The package gpt2kit.kernels reading `directory`'s modules, its __init__.py not run."""
    spec = importlib.machinery.ModuleSpec(PACKAGE, None, is_package=True)
    spec.submodule_search_locations = [str(directory)]
    return spec


def bound_directory() -> Path | None:
    """The directory `import gpt2kit.kernels.x` reads in this process, if the package is loaded."""
    package = sys.modules.get(PACKAGE)
    return Path(list(package.__path__)[0]).resolve() if package is not None else None


def use_kernels(path: str | Path | None = None) -> Path:
    """Make `import gpt2kit.kernels.x` read `path` (None: this kit's kernels/) in this process."""
    directory = KIT_KERNELS if path is None else kernels_directory(path)
    bound = bound_directory()
    if bound is not None:
        if bound != directory:
            raise KernelLoadError(f"this process already runs the kernels in {bound}; "
                                  f"run {directory} in a process of its own")
        return directory
    package = importlib.util.module_from_spec(kernels_spec(directory))
    sys.modules[PACKAGE] = package
    gpt2kit.kernels = package  # as an import binds a subpackage to its parent
    return directory
