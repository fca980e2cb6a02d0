"""The students' starter kit, generated from this repository.

Every kernel body between `// BEGIN SOLUTION` and `// END SOLUTION` in kernels/
becomes a TODO stub: it compiles, writes nothing, and so fails its tests cleanly (the
outputs stay NaN). Everything else is kept, except what only the staff use: the
grader and its tests, the known-wrong implementations and the test that runs them,
the Slurm job tests and the CI setup; and, this being milestone 1's kit, milestone 2's
variant modules and their tests. The README loses what it says of those: each
section between `<!-- staff only -->` and `<!-- end staff only -->`, and each line
that ends with `<!-- staff -->`, so that it mentions only what the handout holds.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from kernel_runtime import KitError
from reference.variants import new_modules

REPO_ROOT = Path(__file__).resolve().parents[1]
MILESTONE_2 = ("tests/kernels/test_variants.py", *(f"kernels/{m}.py" for m in new_modules(2)))
LEFT_OUT = ("grading/", "tests/grading/", "tests/kernels/wrong/", "tests/kernels/test_known_wrong.py",
            "tests/slurm/", "slurm/grade_class.slurm", ".ci/", *MILESTONE_2)
SOLUTION = re.compile(r"^([ \t]*)// BEGIN SOLUTION\n.*?^[ \t]*// END SOLUTION\n", re.MULTILINE | re.DOTALL)
LEFTOVER_MARKER = re.compile(r"^[ \t]*// (BEGIN|END) SOLUTION", re.MULTILINE)
STAFF_SECTION = re.compile(r"^<!-- staff only.*?^<!-- end staff only -->\n\n?", re.MULTILINE | re.DOTALL)
STAFF_LINE = re.compile(r"^.*<!-- staff -->\n", re.MULTILINE)
STUB = "{indent}// TODO: write this kernel (the comment at the top of this file says what it computes)\n"


class HandoutError(KitError):
    """The handout cannot be written."""


def strip_solutions(text: str) -> tuple[str, int]:
    """`text` with every solution block replaced by a stub, and how many there were."""
    return SOLUTION.subn(lambda m: STUB.format(indent=m.group(1)), text)


def students_readme(text: str) -> str:
    """The README without its staff-only sections and lines."""
    return STAFF_LINE.sub("", STAFF_SECTION.sub("", text))


def repository_files(root: Path) -> list[Path]:
    """The files of the working tree that git does not ignore (tracked or not), when `root` is a
    git checkout; else every file but caches and builds."""
    if (root / ".git").exists():
        try:
            listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                                    cwd=root, capture_output=True, check=True).stdout
            return sorted({Path(p) for p in listed.decode().split("\0") if p})
        except (OSError, subprocess.CalledProcessError):
            pass  # no git here: walk the tree instead
    skip = {".git", ".venv", "__pycache__", ".pytest_cache", ".kitcache", "build"}
    files = []
    for path in root.rglob("*"):
        parts = path.relative_to(root).parts
        if path.is_file() and not skip & set(parts) and not any(p.endswith(".egg-info") for p in parts):
            files.append(path.relative_to(root))
    return files


def make_handout(destination: Path, root: Path = REPO_ROOT) -> list[str]:
    """Write the starter kit to `destination` (which must not exist); returns the stubbed kernel files."""
    if destination.exists():
        raise HandoutError(f"{destination} already exists; choose a new directory")
    try:
        return _write_handout(destination, root)
    except OSError as err:
        raise HandoutError(f"{destination}: cannot write the handout ({err.strerror or err})") from None


def _write_handout(destination: Path, root: Path) -> list[str]:
    stubbed = []
    for relative in repository_files(root):
        name = relative.as_posix()
        if any(name == left or name.startswith(left) for left in LEFT_OUT) or not (root / relative).exists():
            continue
        target = destination / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if name == "README.md":
            target.write_text(students_readme((root / relative).read_text()))
        elif name.startswith("kernels/") and name.endswith(".py"):
            text, count = strip_solutions((root / relative).read_text())
            if LEFTOVER_MARKER.search(text):
                raise HandoutError(f"{name}: unbalanced solution markers")
            target.write_text(text)
            if count:
                stubbed.append(f"{name} ({count} kernel{'s' if count > 1 else ''})")
        else:
            shutil.copy2(root / relative, target)
    return stubbed
