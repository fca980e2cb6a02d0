"""The students' starter kit of a milestone, generated from this repository.

Every solution block in kernels/ (a kernel body between `// BEGIN SOLUTION` and
`// END SOLUTION`, or Python between `# BEGIN SOLUTION` and `# END SOLUTION`) becomes
a TODO stub: it compiles, writes nothing, and so fails its tests cleanly (the outputs
stay NaN). Everything else is kept, except what only the staff use: the grader and
its tests, the known-wrong implementations and the tests that run them, the Slurm
job tests and the CI setup; and what belongs to later milestones (a later milestone's
variant modules, such as milestone 2's TF32 matmul or milestone 3's split-K one, and
milestone 2's test of variants; a later milestone's host functions, their spec and
kernel module).

Milestone 2's kit stubs milestone 1's kernels too: the course's students carry their
own milestone-1 kernels forward (copying their kernels/*.py over the stubs), and the
kit's would hand them the tiling and reduction items, which are those same kernels.
Milestone 3's kit does the same and adds flash and local attention, the fused
matmuls and the split-K matmul (stubbed). Every
kit holds the KV cache's kernels (decode.py) whole: the model generates with them
from milestone 1 on, so milestone 3's KV-cache item grades a student's own copy.

The README loses what it says of what the kit leaves out: each section between
`<!-- staff only -->` and `<!-- end staff only -->`, each line that ends with
`<!-- staff -->`, and each section between `<!-- milestone N -->` and
`<!-- end milestone N -->` for a later milestone N.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from grading.items import WEIGHTS_FILES
from kernel_runtime import KitError
from reference.registry import SPEC_FILES, SPECS
from reference.variants import new_modules

REPO_ROOT = Path(__file__).resolve().parents[1]
MILESTONES = tuple(sorted(WEIGHTS_FILES))  # a handout for each milestone the grader knows


def _module_files(module: str) -> list[str]:
    """A kernel module and its own test file, tests/kernels/test_<module>.py, when it has one."""
    test = f"tests/kernels/test_{module}.py"
    return [f"kernels/{module}.py", *([test] if (REPO_ROOT / test).exists() else [])]


def _milestone_files() -> dict[int, tuple[str, ...]]:
    """milestone -> the files only its kit (and later ones) has: the variant modules of milestone 2 on, each with
    its own test file if it has one, and milestone 2's test of variants; a later milestone's host functions
    (their spec and kernel module)."""
    files = {m: [path for module in new_modules(m) for path in _module_files(module)] for m in MILESTONES if m > 1}
    files[2].insert(0, "tests/kernels/test_variants.py")
    for spec in SPECS.values():
        if spec.milestone > 1:
            files.setdefault(spec.milestone, []).extend((f"kernels/{spec.module}.py", SPEC_FILES[spec.function]))
    return {milestone: tuple(dict.fromkeys(paths)) for milestone, paths in files.items()}  # each path once


MILESTONE_FILES = _milestone_files()
STAFF_FILES = ("grading/", "tests/grading/", "tests/kernels/wrong/", "tests/kernels/wrong_technique/",
               "tests/kernels/test_known_wrong.py", "tests/kernels/test_wrong_techniques.py", "tests/slurm/",
               "slurm/grade_class.slurm", ".ci/")
SOLUTION = re.compile(r"^([ \t]*)(//|#) BEGIN SOLUTION\n.*?^[ \t]*\2 END SOLUTION\n", re.MULTILINE | re.DOTALL)
LEFTOVER_MARKER = re.compile(r"^[ \t]*(//|#) (BEGIN|END) SOLUTION", re.MULTILINE)
STAFF_SECTION = re.compile(r"^<!-- staff only.*?^<!-- end staff only -->\n\n?", re.MULTILINE | re.DOTALL)
STAFF_LINE = re.compile(r"^.*<!-- staff -->\n", re.MULTILINE)
STUBS = {"//": "{indent}// TODO: write this kernel (the comment at the top of this file says what it computes)\n",
         "#": "{indent}pass  # TODO: write this (the comment at the top of this file says what it computes)\n"}


class HandoutError(KitError):
    """The handout cannot be written."""


def left_out(milestone: int) -> tuple[str, ...]:
    """The paths (files, or directories ending in /) milestone `milestone`'s kit leaves out."""
    return STAFF_FILES + tuple(path for later, paths in MILESTONE_FILES.items() if later > milestone for path in paths)


def strip_solutions(text: str) -> tuple[str, int]:
    """`text` with every solution block replaced by a stub, and how many there were."""
    return SOLUTION.subn(lambda m: STUBS[m.group(2)].format(indent=m.group(1)), text)


def students_readme(text: str, milestone: int = 1) -> str:
    """The README without its staff-only sections and lines, and without the sections of later milestones."""
    text = re.sub(r"^<!-- milestone (\d+) -->.*?^<!-- end milestone \1 -->\n\n?",
                  lambda section: "" if int(section.group(1)) > milestone else section.group(0), text,
                  flags=re.MULTILINE | re.DOTALL)
    return re.sub(r"^<!-- (end )?milestone \d+ -->\n", "", STAFF_LINE.sub("", STAFF_SECTION.sub("", text)),
                  flags=re.MULTILINE)


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


def make_handout(destination: Path, root: Path = REPO_ROOT, milestone: int = 1) -> list[str]:
    """Write milestone `milestone`'s starter kit to `destination` (which must not exist); returns the
    stubbed kernel files."""
    if milestone not in MILESTONES:
        raise HandoutError(f"no milestone {milestone}; the handouts are for milestones {', '.join(map(str, MILESTONES))}")
    if destination.exists():
        raise HandoutError(f"{destination} already exists; choose a new directory")
    try:
        return _write_handout(destination, root, milestone)
    except OSError as err:
        raise HandoutError(f"{destination}: cannot write the handout ({err.strerror or err})") from None


def _write_handout(destination: Path, root: Path, milestone: int) -> list[str]:
    stubbed, leave_out = [], left_out(milestone)
    for relative in repository_files(root):
        name = relative.as_posix()
        if any(name == left or name.startswith(left) for left in leave_out) or not (root / relative).exists():
            continue
        target = destination / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if name == "README.md":
            target.write_text(students_readme((root / relative).read_text(), milestone))
        elif name.startswith("kernels/") and name.endswith(".py"):
            text, count = strip_solutions((root / relative).read_text())
            if LEFTOVER_MARKER.search(text):
                raise HandoutError(f"{name}: unbalanced solution markers")
            target.write_text(text)
            if count:
                stubbed.append(f"{name} ({count} block{'s' if count > 1 else ''})")
        else:
            shutil.copy2(root / relative, target)
    return stubbed
