"""Test modules a test submission carries to the grader's worker.

The worker runs the worker kit (grading.sandbox), which holds neither the known-wrong
implementations nor the grader's tests, so a submission that imports one of them carries a
copy of the packages they live in, in its kernels/carried/, and puts it first on its path.
"""

import shutil
from pathlib import Path

ROOT = Path(__file__).parents[2]
CARRIED = ("tests/kernels/wrong", "tests/kernels/wrong_technique", "tests/grading/reachable.py")
PACKAGES = ("tests", "tests/kernels", "tests/grading")  # carried as empty packages: tests/__init__.py reads the kit


def carrying(kernels: Path, line: str) -> str:
    """`line` (an import of a carried module), led by what makes the submission's copy importable; the copy is
    made in `kernels`/carried."""
    carried = kernels / "carried"
    if not carried.exists():
        for package in PACKAGES:
            (carried / package).mkdir(parents=True)
            (carried / package / "__init__.py").touch()
        for path in CARRIED:
            if (ROOT / path).is_dir():
                shutil.copytree(ROOT / path, carried / path, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(ROOT / path, carried / path)
    return ("import sys  # noqa: E402\nfrom pathlib import Path  # noqa: E402\n"
            "sys.path.insert(0, str(Path(__file__).resolve().parent / 'carried'))\n" + line + "\n")
