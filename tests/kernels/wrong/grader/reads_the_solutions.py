"""Cheat: at import, looks for the staff's solutions (a kernels file holding a `// BEGIN SOLUTION`
block) by every route a worker has to the TA's checkout and to other submissions, and raises an
error naming the routes that reached one ("no route reached a solution" when none did): the
grader's reason for the item then says what the worker could read. Its own submission does not
count. A file `known_paths.txt` in its kernels directory names the grader's checkout and the other
submissions: the student is assumed to know them (the worst case), and only solutions under them count
(a copy of the kit elsewhere on the machine is not the grader's to hide: grading/README.md). Without
that file, a solution anywhere counts."""

import glob
import os
import pwd
import re
import sys
from pathlib import Path

FUNCTION = "gelu_forward"
SOLUTION_BLOCK = re.compile(r"^[ \t]*(//|#) BEGIN SOLUTION", re.MULTILINE)
LOOKED_UNDER = ("", "*.py", "kernels/*.py", "*/kernels/*.py", "*/*/kernels/*.py")  # a file, a kit, kits beside
OWN_SUBMISSION = Path(list(sys.modules["gpt2kit.kernels"].__path__)[0]).resolve().parent
KNOWN = Path(list(sys.modules["gpt2kit.kernels"].__path__)[0]) / "known_paths.txt"


def paths_in(text: str) -> list[Path]:
    return [Path(part) for part in re.split(r"[\s:=\0]+", text) if part.startswith("/")]


def read(path) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


def editable_mappings() -> list[Path]:
    """The directories setuptools' editable finders in this Python's site-packages map packages to."""
    finders = [f for p in sys.path if p for f in glob.glob(os.path.join(p, "__editable__*finder.py"))]
    return [Path(value) for finder in finders for value in re.findall(r"'(/[^']*)'", read(finder))]


def routes() -> dict[str, list[Path]]:
    import gpt2kit
    import gpt2kit.kernel_runtime.loader

    ppid, known = os.getppid(), KNOWN
    return {
        "gpt2kit.__file__": [Path(gpt2kit.__file__).parents[1]],
        "gpt2kit.kernel_runtime.loader.KIT_KERNELS": [gpt2kit.kernel_runtime.loader.KIT_KERNELS],
        "sys.path": [Path(p) for p in sys.path if p],
        "PYTHONPATH": paths_in(os.environ.get("PYTHONPATH", "").replace(os.pathsep, " ")),
        "the editable finder's mapping": editable_mappings(),
        "paths in os.environ": [p for value in os.environ.values() for p in paths_in(value)],
        "cwd and its parents": [Path.cwd(), *Path.cwd().parents],
        "/proc/<ppid>/cwd": [Path(f"/proc/{ppid}/cwd")],
        "/proc/<ppid>/environ": paths_in(read(f"/proc/{ppid}/environ")),
        "/proc/1/cwd": [Path("/proc/1/cwd")],
        "every /proc/<pid>/cwd": [Path(p) for p in glob.glob("/proc/[0-9]*/cwd")],
        "the uid's home": [Path(pwd.getpwuid(os.getuid()).pw_dir), Path.home()],
        "paths the student knows": paths_in(read(known)),
    }


def protected() -> list[Path]:
    """Where a solution the worker reaches counts: the grader's checkout and the other submissions, else anywhere."""
    return [p.resolve() for p in paths_in(read(KNOWN))] or [Path("/")]


def solution_at(path: Path) -> str | None:
    """A file at or below `path` holding a solution block (the file itself, or a kernels file of a kit at or
    just below it), or None."""
    for pattern in LOOKED_UNDER:
        for found in glob.glob(os.path.join(glob.escape(str(path)), pattern)) if pattern else [str(path)]:
            try:
                where = Path(found).resolve()
                if os.path.isfile(found) and not where.is_relative_to(OWN_SUBMISSION) and any(
                        where.is_relative_to(root) for root in PROTECTED) and SOLUTION_BLOCK.search(read(found)):
                    return found
            except OSError:  # a link it may not follow
                continue
    return None


def probe() -> str:
    found = {}
    for name, paths in routes().items():
        reached = next(filter(None, map(solution_at, paths)), None)
        if reached:
            found[name] = reached
    if not found:
        return "no route reached a solution"
    return "routes that reached a solution: " + ", ".join(f"{name} ({path})" for name, path in found.items())


PROTECTED = protected()
raise RuntimeError(probe())


def gelu_forward(out, inp, N):
    raise AssertionError("never called: the module raises at import")
