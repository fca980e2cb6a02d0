"""Where a grading worker runs, what code it sees, and what it cannot read.

A worker (grading.worker, grading.leaderboard_worker) runs a submission's code, so it is
kept from what the grader's own processes see. Each worker
* runs the worker kit of its milestone (`worker_sandbox`): the milestone's handout, every
  kernel body stubbed, and the grader modules a worker imports
  (grading.handout.make_worker_kit), built once per process and milestone, world-readable;
  never the TA's checkout, which holds every solution and often other submissions;
* runs in a fresh directory of its own (WorkerDirectory): a copy of the submission's
  kernels/ and of the files it is given (weights, table), its working directory, and
  the HOME, TMPDIR and CuPy cache it is given. Its environment holds what CUDA and
  Python need (KEPT_VARIABLES), those three, and PYTHONPATH = the worker kit alone;
* cannot read the directory holding the TA's checkout (and so any clone beside it; and the
  one holding the checkout an editable install maps the kit to), the directory holding its
  submission (so no other submission), the grader's home and temporary directory (the
  Python environment, the worker kit and its own directory bound back), where the OS allows (ISOLATION_LEVELS, in order of preference):
    bwrap    bubblewrap: / read-only, those directories under empty tmpfs, the Python
             environment, the worker kit and the worker's directory bound back, its own pid
             namespace and /proc, /dev as it is (the GPU); nobody's uid when the grader is root;
    unshare  (root) util-linux's mount and pid namespaces, a fresh /proc, the same directories
             hidden and bound back by grading.namespace, then nobody's uid;
    none     neither works: the worker runs the worker kit, and could read the grader's files.
  KIT_GRADING_ISOLATION (auto, bwrap, unshare or none) picks the level instead; a level
  that does not work here is then refused in one line.
"""

from __future__ import annotations

import ast
import atexit
import contextlib
import dataclasses
import functools
import json
import os
import shutil
import site
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator

import gpt2kit
from gpt2kit.grading import namespace
from gpt2kit.grading.handout import make_worker_kit
from gpt2kit.kernel_runtime import KitError
from gpt2kit.kernel_runtime.loader import kernels_directory

ISOLATION_VARIABLE = "KIT_GRADING_ISOLATION"
ISOLATION_LEVELS = ("bwrap", "unshare", "none")
KEPT_VARIABLES = ("PATH", "LD_LIBRARY_PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "CUDA_VISIBLE_DEVICES",
                  "CUDA_DEVICE_ORDER", "CUDA_PATH", "CUDA_HOME")


class SandboxError(KitError):
    """An isolation level that cannot be used here."""


@dataclasses.dataclass(frozen=True)
class WorkerDirectory:
    """A worker's own directory: its submission's kernels/ (read-only), the files it is given, and, its own to
    write, its working directory, HOME, TMPDIR and CuPy cache."""
    root: Path
    submissions: Path | None = None  # the directory holding its submission, and so every other

    @property
    def submission(self) -> Path:
        return self.root / "submission"

    @property
    def work(self) -> Path:
        return self.root / "work"

    @property
    def writable(self) -> tuple[Path, ...]:
        return self.work, self.root / "home", self.root / "tmp", self.root / "cupy"

    def environment(self) -> dict[str, str]:
        return {"HOME": str(self.root / "home"), "TMPDIR": str(self.root / "tmp"),
                "CUPY_CACHE_DIR": str(self.root / "cupy")}

    def copy_in(self, path: Path) -> Path:
        """A copy of the file `path` (a weights file, a table) that the worker can read."""
        copy = self.root / "given" / Path(path).name
        copy.parent.mkdir(exist_ok=True)
        shutil.copyfile(path, copy)
        _readable(copy.parent)
        return copy


@dataclasses.dataclass(frozen=True)
class Sandbox:
    """How workers run: `kit` the only kit on their path, `isolation` one of ISOLATION_LEVELS, `summary` the
    line reports print."""
    kit: Path
    isolation: str
    summary: str

    @contextlib.contextmanager
    def directory(self, submission: Path | None) -> Iterator[WorkerDirectory]:
        """A fresh WorkerDirectory holding a copy of `submission`'s kernels/ (symbolic links copied as links,
        never followed: they point at nothing the worker could not read itself); removed when done."""
        place = WorkerDirectory(Path(tempfile.mkdtemp(prefix="worker-")),
                                submission and Path(submission).resolve().parent)
        try:
            for directory in place.writable:
                directory.mkdir()
                if drops_to_nobody(self.isolation):
                    os.chown(directory, namespace.NOBODY, namespace.NOBODY)
            if submission is not None:
                place.submission.mkdir()
                with contextlib.suppress(KitError):  # none: the worker says "no kernels directory"
                    shutil.copytree(kernels_directory(submission), place.submission / "kernels", symlinks=True)
            _readable(place.root)
            yield place
        finally:
            shutil.rmtree(place.root, ignore_errors=True)

    def popen(self, command: list[str], place: WorkerDirectory, given: dict[str, Path] | None = None,
              **arguments) -> subprocess.Popen:
        """Start `command` (a worker) in `place`, isolated, in a process group of its own; each variable of `given`
        names the worker's copy of its file (GPT2_BPE_FILE: the tokenizer's, which its HOME does not hold)."""
        environment = {name: os.environ[name] for name in KEPT_VARIABLES if name in os.environ}
        environment |= place.environment() | {"PYTHONPATH": str(self.kit)}
        environment |= {name: str(place.copy_in(path)) for name, path in (given or {}).items()}
        return subprocess.Popen(self.wrapped(command, place), cwd=place.work, env=environment,
                                start_new_session=True, **arguments)

    def status(self, returncode: int) -> int:
        """The worker's exit status as subprocess gives a process's own: bwrap exits with 128 + N when its
        command was killed by signal N (a worker's own exit with such a status reads as that signal too)."""
        return -(returncode - 128) if self.isolation == "bwrap" and 128 < returncode < 128 + 65 else returncode

    def wrapped(self, command: list[str], place: WorkerDirectory) -> list[str]:
        """`command` behind this sandbox's isolation."""
        return isolating(self.isolation, command, self.mounts(place), place.work, drops_to_nobody(self.isolation))

    def mounts(self, place: WorkerDirectory) -> list[tuple[str, str]]:
        """What `place`'s worker has hidden from it and bound back (planned_mounts)."""
        hidden = [*checkouts(), Path.home(), Path(tempfile.gettempdir()), *filter(None, [place.submissions])]
        return planned_mounts(hidden, [*python_environment(), self.kit, place.submission, place.root / "given"],
                              place.root)


def drops_to_nobody(isolation: str) -> bool:
    """Whether a worker isolated by `isolation` becomes nobody: when the grader is root, who could read anything."""
    return isolation != "none" and os.geteuid() == 0


def python_environment() -> list[Path]:
    """Where this Python, its packages and CUDA's libraries are: what every worker reads."""
    return [Path(sys.prefix), Path(sys.base_prefix), *map(Path, site.getsitepackages()),
            *(Path(p) for name in ("LD_LIBRARY_PATH", "CUDA_PATH", "CUDA_HOME")
              for p in os.environ.get(name, "").split(os.pathsep) if p)]


def planned_mounts(hidden: list[Path], read: list[Path], written: Path) -> list[tuple[str, str]]:
    """(kind, path): "hide" (an empty tmpfs over it), "read" or "write" (bound back over what was hidden), each
    path once (what the worker needs wins over hiding it; / is never hidden), shallowest first, so that what
    is bound back inside a hidden directory shows, and what is hidden inside what is bound back stays hidden."""
    marked = [(path, "hide") for path in hidden] + [(written, "write")] + [(path, "read") for path in read]
    mounts = {Path(os.path.realpath(path)): kind for path, kind in marked if path.exists()}
    mounts.pop(Path("/"), None)

    def already_hidden(path: Path) -> bool:  # its nearest marked ancestor hides it (and it no longer exists there)
        return next((mounts[a] for a in path.parents if a in mounts), None) == "hide"

    return [(kind, str(path)) for path, kind in sorted(mounts.items(), key=lambda m: (len(m[0].parts), m[1] != "hide"))
            if not (kind == "hide" and already_hidden(path))]


def checkouts() -> list[Path]:
    """Where the kit's own files are: the directory holding this kit's checkout (and so any clone beside it), or
    all of a copy that is no checkout (an installed package, gpt2kit/ in site-packages); and the directory holding
    the checkout that an editable install of the kit in this Python maps the package to."""
    found = [gpt2kit.KIT_ROOT.parent] if (gpt2kit.KIT_ROOT / ".git").exists() else [gpt2kit.KIT_ROOT]
    for directory in site.getsitepackages():
        for finder in Path(directory).glob("__editable__*_finder.py"):
            mapping = editable_mapping(finder.read_text(errors="replace"))
            if "gpt2kit" in mapping:
                found.append(Path(mapping["gpt2kit"]).parents[1])
    return found


def editable_mapping(text: str) -> dict[str, str]:
    """The MAPPING (package -> directory) of setuptools' editable finder module `text`; {} without one."""
    for node in ast.parse(text).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and "MAPPING" in ast.unparse(
                node.targets[0] if isinstance(node, ast.Assign) else node.target):
            with contextlib.suppress(ValueError):
                return ast.literal_eval(node.value)
    return {}


def isolating(isolation: str, command: list[str], mounts: list[tuple[str, str]], cwd: Path,
              drop: bool) -> list[str]:
    """`command` run under `isolation` with `mounts` (Sandbox.mounts), in `cwd`, as nobody when `drop`."""
    if isolation == "none":
        return command
    if isolation == "unshare":
        plan = json.dumps({"mounts": mounts, "cwd": str(cwd), "drop": drop, "command": command})
        return ["unshare", "--mount", "--pid", "--fork", "--mount-proc", "--kill-child",
                sys.executable, "-I", "-S", namespace.__file__, plan]
    binds = {"read": "--ro-bind", "write": "--bind"}
    wrapper = ["bwrap", "--ro-bind", "/", "/", "--dev-bind", "/dev", "/dev", "--proc", "/proc", "--unshare-pid",
               "--die-with-parent"]
    hidden = [Path(path) for kind, path in mounts if kind == "hide"]
    for kind, path in mounts:
        if kind == "hide":
            wrapper += ["--perms", "0755", "--tmpfs", path]
            continue
        made = [a for a in reversed(Path(path).parents) if any(a.is_relative_to(h) and a != h for h in hidden)]
        for ancestor in made:  # bwrap would make them 0700: nobody could reach what is bound there
            wrapper += ["--perms", "0755", "--dir", str(ancestor)]
        wrapper += [binds[kind], path, path]
    wrapper += ["--chdir", str(cwd)]
    if drop:  # bwrap run by root keeps no capability but these two, which setpriv gives up with root
        wrapper += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--", "setpriv",
                    f"--reuid={namespace.NOBODY}", f"--regid={namespace.NOBODY}", "--clear-groups"]
    return [*wrapper, "--", *command]


def unavailable(isolation: str) -> str | None:
    """Why `isolation` cannot run a worker here, or None: a trial run of Python behind it."""
    needed = {"bwrap": ["bwrap"] + (["setpriv"] if os.geteuid() == 0 else []), "unshare": ["unshare"],
              "none": []}[isolation]
    if isolation == "unshare" and os.geteuid() != 0:
        return "unshare needs root"
    missing = [tool for tool in needed if shutil.which(tool) is None]
    if missing:
        return f"no {missing[0]} on PATH"
    with tempfile.TemporaryDirectory(prefix="worker-trial-") as trial_directory:
        os.chmod(trial_directory, 0o755)
        trial_place = Path(trial_directory)
        mounts = planned_mounts([Path.home(), Path(tempfile.gettempdir())], python_environment(), trial_place)
        trial = isolating(isolation, [sys.executable, "-c", "import numpy"], mounts, trial_place,
                          drops_to_nobody(isolation))
        try:
            done = subprocess.run(trial, capture_output=True, text=True, timeout=60,
                                  env={"PATH": os.environ.get("PATH", os.defpath)})
        except (OSError, subprocess.TimeoutExpired) as err:
            return f"{isolation} does not run ({err})"
    if done.returncode != 0:
        return f"{isolation} does not work here: " + (done.stderr.strip().splitlines() or ["no message"])[-1]
    return None


def choose_isolation(chosen: str | None = None) -> tuple[str, str]:
    """The isolation level (`chosen`, else KIT_GRADING_ISOLATION, else the first that works) and its summary
    line; a named level that does not work is refused in one line."""
    chosen = chosen or os.environ.get(ISOLATION_VARIABLE) or "auto"
    if chosen not in ("auto", *ISOLATION_LEVELS):
        raise SandboxError(f"{ISOLATION_VARIABLE}={chosen}: expected auto, {', '.join(ISOLATION_LEVELS)}")
    reasons = []
    for level in ISOLATION_LEVELS[:-1]:
        if chosen in ("auto", level):
            reason = unavailable(level)
            if reason is None:
                return level, (f"isolation: {level} (the worker cannot read the grader's checkout, other "
                               f"submissions or the grader's files)")
            if chosen == level:
                raise SandboxError(f"isolation {level} was asked for, but {reason}")
            reasons.append(reason)
    why = "; ".join(reasons) if reasons else "none was chosen"
    return "none", f"isolation: none — submissions could read the grader's files ({why})"


@functools.cache
def worker_sandbox(milestone: int, isolation: str | None = None) -> Sandbox:
    """The sandbox of this process's workers of `milestone`: its worker kit, built once and removed when the
    process exits, and the isolation level chosen (choose_isolation)."""
    level, summary = choose_isolation(isolation)
    parent = Path(tempfile.mkdtemp(prefix=f"worker-kit-m{milestone}-"))
    atexit.register(shutil.rmtree, parent, ignore_errors=True)
    make_worker_kit(parent / "kit", milestone=milestone)
    _readable(parent)
    return Sandbox(parent / "kit", level, summary)


def _readable(root: Path) -> None:
    """Make `root` and everything under it readable (and its directories enterable) by anyone; links untouched."""
    for directory, subdirectories, files in os.walk(root):
        os.chmod(directory, os.stat(directory).st_mode | 0o555)
        for name in files:
            path = os.path.join(directory, name)
            if not os.path.islink(path):
                os.chmod(path, os.stat(path).st_mode | 0o444)
