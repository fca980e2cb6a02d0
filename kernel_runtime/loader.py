"""Which kernels directory a process runs: one per process, as the package `kernels`.

`use_kernels(path)` binds the package name `kernels` to a directory, so that
`import kernels.x` finds that directory's own files everywhere in the process: in
the tests, the quick check, the step check, the benchmarks, the model, and inside
the directory itself (a student's residual.py that imports kernels.encoder gets the
student's encoder.py, never the kit's). The grader's worker binds a submission the
same way, so what a student tests is what the grader grades.

A process runs one kernels directory: binding a second one is an error (start
another process for it). The directory's __init__.py is not run, so one module that
does not import leaves the others usable.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path

from kernel_runtime.errors import KernelLoadError

PACKAGE = "kernels"
KIT_KERNELS = Path(__file__).resolve().parents[1] / PACKAGE  # this kit's own kernels/


def package_attribute(name: str):
    """The package's module __getattr__: a name it does not have. Hugging Face's `kernels` package has this import
    name too; transformers 5.25 and later require it and import its classes (CUDAProperties, LayerRepository, ...)
    from whichever `kernels` comes first, so those get one line that says what to install."""
    if name[:1].isupper():
        raise ImportError(f"{PACKAGE}.{name} is asked for, but this `{PACKAGE}` is the kit's, not Hugging Face's, "
                          f"which transformers 5.25 and later import: pip install 'transformers<5.25' (the kit's hf "
                          f"extra)")
    raise AttributeError(f"module {PACKAGE!r} has no attribute {name!r}")


def kernels_directory(path: str | Path) -> Path:
    """`path` itself, or its kernels/ subdirectory when it has one (a whole kit)."""
    directory = Path(path).expanduser()
    if (directory / PACKAGE).is_dir():
        directory = directory / PACKAGE
    if not directory.is_dir():
        raise KernelLoadError(f"no kernels directory at {path}")
    return directory.resolve()


def bound_directory() -> Path | None:
    """The directory `import kernels.x` reads in this process, if the package is loaded."""
    package = sys.modules.get(PACKAGE)
    return Path(list(package.__path__)[0]).resolve() if package is not None else None


def use_kernels(path: str | Path | None = None) -> Path:
    """Make `import kernels.x` read `path` (None: this kit's kernels/) in this process."""
    directory = KIT_KERNELS if path is None else kernels_directory(path)
    bound = bound_directory()
    if bound is not None:
        if bound != directory:
            raise KernelLoadError(f"this process already runs the kernels in {bound}; "
                                  f"run {directory} in a process of its own")
        return directory
    spec = importlib.machinery.ModuleSpec(PACKAGE, None, is_package=True)
    spec.submodule_search_locations = [str(directory)]
    package = importlib.util.module_from_spec(spec)
    package.__getattr__ = package_attribute
    sys.modules[PACKAGE] = package
    return directory
