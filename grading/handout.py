"""The students' starter kit of a milestone, generated from this repository.

A kit is made of the files git tracks in the kit's checkout, nothing else: never a
file the TA's checkout holds untracked (submissions, class lists, grading results),
never an installed copy's neighbours. So the handout runs from a git clone of the kit
(installed with pip install -e); from anywhere else it refuses in one line.

Every solution block in kernels/ (a kernel body between `// BEGIN SOLUTION` and
`// END SOLUTION`, or Python between `# BEGIN SOLUTION` and `# END SOLUTION`) becomes
a TODO stub (kernel_runtime.stubs): it compiles, writes nothing, and so fails its
tests cleanly (the outputs stay NaN). Everything else is kept, except what only the
staff use: the grader and its tests, the known-wrong implementations and the tests
that run them, the Slurm job tests, the CI setup and the tests of the kit's own build
(which a student's work cannot change, and which would double their suite's time);
the host functions the kit provides to its staff alone (Spec.handed_out: Wav2Vec2's
layers, whose kernels hold a tiled product and reductions that milestone 2 grades and
backward passes that milestone 4 grades; the kits run Wav2Vec2 on the gold and
reference backends); and what belongs to later
milestones (a later milestone's variant modules, such as milestone 2's TF32 matmul or
milestone 3's split-K one, and milestone 2's test of variants; a later milestone's
host functions, their spec and kernel module).

Every kit stubs every kernel of kernels/, milestone 1's included: the course's
students carry their own kernels forward (copying their kernels/*.py over the stubs),
and a kit's solutions would hand them later items (milestone 2's tiling and reduction
items are milestone 1's kernels; milestone 3's KV-cache item is decode.py, whose
kernels and block reduction also answer milestone 1's encoder and milestone 2's
reduction). Milestone 3's kit adds flash and local attention, the fused matmuls and
the split-K matmul, stubbed. Until a student writes decode.py, generation recomputes
every step instead of using the KV cache, and says so (generation.decoding).

The grader's workers run a kit of their own (`make_worker_kit`, grading.sandbox): a
milestone's handout plus the few grader modules a worker imports (WORKER_FILES), built
the same way, from the files git tracks or, in an installed copy (pip install .), from
the files the package installed, laid out as a checkout lays them out (gpt2kit/kernels/
of the wheel is kernels/).

A kit's pyproject.toml loses its lines that name a package of a folder the kit leaves
out (gpt2kit.grading), so that the kit installs.

The README loses what it says of what the kit leaves out: each section between
`<!-- staff only -->` and `<!-- end staff only -->`, each line that ends with
`<!-- staff -->`, and each section between `<!-- milestone N -->` and
`<!-- end milestone N -->` for a later milestone N.
"""

from __future__ import annotations

import importlib.metadata
import re
import shutil
import subprocess
from pathlib import Path

import gpt2kit
from gpt2kit.grading.items import WEIGHTS_FILES
from gpt2kit.kernel_runtime import KitError
from gpt2kit.kernel_runtime.commands import raise_lost_interrupt
from gpt2kit.kernel_runtime.files import replacing
from gpt2kit.kernel_runtime.stubs import STUB_LINES
from gpt2kit.reference.registry import SPEC_FILES, SPECS
from gpt2kit.reference.variants import new_modules

REPO_ROOT = gpt2kit.KIT_ROOT
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


def _staff_host_function_files() -> tuple[str, ...]:
    """The kernel modules and specs of the host functions no kit holds (Spec.handed_out): provided ones whose kernels
    hold what the milestones grade. TypeError where such a module also defines a host function a kit holds."""
    handed_out = {spec.module for spec in SPECS.values() if spec.handed_out}
    kept = [spec for spec in SPECS.values() if not spec.handed_out]
    mixed = sorted({spec.module for spec in kept} & handed_out)
    if mixed:
        raise TypeError(f"kernels/{mixed[0]}.py defines host functions both handed out and not")
    return tuple(dict.fromkeys(path for spec in kept
                               for path in (f"kernels/{spec.module}.py", SPEC_FILES[spec.function])))


MILESTONE_FILES = _milestone_files()
STAFF_FILES = ("grading/", "tests/grading/", "tests/kernels/wrong/", "tests/kernels/wrong_technique/",
               "tests/kernels/test_known_wrong.py", "tests/kernels/test_wrong_techniques.py", "tests/slurm/",
               # the staff's solution's own host arithmetic, which a kit's stubbed module does not have
               "tests/kernels/test_dweight_splits.py",
               "slurm/grade_class.slurm", ".ci/",
               # the kit's own build: its layering, how the suite spreads, its install lines, its setups without CuPy
               "tests/test_layering.py", "tests/test_spreading.py", "tests/test_install_lines.py",
               "tests/test_degraded_setups.py", "tests/test_hugging_face_kernels.py",
               # the study's own checks (transformers' compiled generate, its tables, its commands), which no
               # kernel changes
               "tests/benchmarks/test_generation_hf.py", "tests/benchmarks/test_grape_tables.py",
               "tests/benchmarks/test_grape_study_gpu.py",
               # Wav2Vec2's kernels, which hold what milestones 2 and 4 grade (the docstring above)
               *_staff_host_function_files())
# what a grading worker (grading.worker, grading.leaderboard_worker) imports or reads beyond a handout
WORKER_FILES = ("grading/__init__.py", "grading/worker.py", "grading/items.py", "grading/channel.py",
                "grading/leaderboard_worker.py", "grading/leaderboard.py", "grading/leaderboard.toml",
                "grading/taped_calls.py",
                *(f"grading/{path.name}" for path in WEIGHTS_FILES.values()))
SOLUTION = re.compile(r"^([ \t]*)(//|#) BEGIN SOLUTION\n.*?^[ \t]*\2 END SOLUTION\n", re.MULTILINE | re.DOTALL)
LEFTOVER_MARKER = re.compile(r"^[ \t]*(//|#) (BEGIN|END) SOLUTION", re.MULTILINE)
STAFF_SECTION = re.compile(r"^<!-- staff only.*?^<!-- end staff only -->\n\n?", re.MULTILINE | re.DOTALL)
STAFF_LINE = re.compile(r"^.*<!-- staff -->\n", re.MULTILINE)
PACKAGE_LINE = re.compile(r'^.*"gpt2kit\.(\w+)[."].*\n', re.MULTILINE)  # a line of pyproject.toml naming a package


class HandoutError(KitError):
    """The handout cannot be written."""


def left_out(milestone: int) -> tuple[str, ...]:
    """The paths (files, or directories ending in /) milestone `milestone`'s kit leaves out."""
    return STAFF_FILES + tuple(path for later, paths in MILESTONE_FILES.items() if later > milestone for path in paths)


def strip_solutions(text: str) -> tuple[str, int]:
    """`text` with every solution block replaced by a stub, and how many there were."""
    return SOLUTION.subn(lambda m: f"{m.group(1)}{STUB_LINES[m.group(2)]}\n", text)


def students_readme(text: str, milestone: int = 1) -> str:
    """The README without its staff-only sections and lines, and without the sections of later milestones."""
    text = re.sub(r"^<!-- milestone (\d+) -->.*?^<!-- end milestone \1 -->\n\n?",
                  lambda section: "" if int(section.group(1)) > milestone else section.group(0), text,
                  flags=re.MULTILINE | re.DOTALL)
    return re.sub(r"^<!-- (end )?milestone \d+ -->\n", "", STAFF_LINE.sub("", STAFF_SECTION.sub("", text)),
                  flags=re.MULTILINE)


def students_pyproject(text: str, folders: set[str]) -> str:
    """pyproject.toml without the lines naming a package of a course folder not among `folders` (those the kit
    holds)."""
    return PACKAGE_LINE.sub(lambda line: line.group(0) if line.group(1) in folders
                            or line.group(1) not in gpt2kit.COURSE_FOLDERS else "", text)


def kit_files(root: Path) -> list[Path]:
    """The files git tracks in the kit checkout at `root`; HandoutError unless `root` is the top of a git
    work tree."""
    fix = "run it from a git clone of the kit, installed with pip install -e"
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=root, capture_output=True, text=True)
        if top.returncode != 0 or Path(top.stdout.strip()).resolve() != root.resolve():
            why = ((top.stderr.strip().splitlines() or ["git rev-parse failed"])[0] if top.returncode
                   else f"its work tree is {top.stdout.strip()}")
            raise HandoutError(f"{root} is not a git checkout of the kit ({why}): {fix}")
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout
        tracked = sorted(Path(p) for p in listed.decode().split("\0") if p)
        packages = sorted({path.parts[0] for path in tracked if len(path.parts) > 1 and path.suffix == ".py"})
        others = subprocess.run(["git", "ls-files", "-z", "--others", "--exclude-standard", "--", *packages],
                                cwd=root, capture_output=True, check=True).stdout if packages else b""
    except OSError as err:
        raise HandoutError(f"cannot run git to list the kit's files ({err.strerror or err}): {fix}") from None
    except subprocess.CalledProcessError as err:
        reason = (err.stderr.decode(errors="replace").strip().splitlines() or ["git ls-files failed"])[0]
        raise HandoutError(f"cannot list the kit's files in {root}: {reason}") from None
    untracked = [p for p in others.decode().split("\0") if p.endswith(".py")]
    if untracked:  # the kit's own code, not yet committed: a kit without it would not import
        raise HandoutError(f"{untracked[0]} is in the kit's {untracked[0].split('/')[0]}/ but git does not track it "
                           f"(nor {len(untracked) - 1} more): commit it, or remove it, before writing a handout")
    return tracked


def checkout_sources(root: Path) -> dict[Path, Path]:
    """The files git tracks in the kit checkout at `root` (kit_files), each by its path there."""
    return {path: root / path for path in kit_files(root)}


def installed_sources(root: Path) -> dict[Path, Path]:
    """The files the kit's installed package (pip install .) put in `root`, its gpt2kit/, byte code left out: each
    by the path a checkout gives it (a course folder at the top, the rest in gpt2kit/), and where it is;
    HandoutError when `root` is no installed copy of the kit."""
    for name in importlib.metadata.packages_distributions().get("gpt2kit", []):
        distribution = importlib.metadata.distribution(name)
        if Path(distribution.locate_file("gpt2kit")).resolve() == root.resolve():
            inside = [Path(*file.parts[1:]) for file in distribution.files or ()
                      if file.parts[0] == "gpt2kit" and file.suffix != ".pyc"]
            return {(path if path.parts[0] in gpt2kit.COURSE_FOLDERS else "gpt2kit" / path): root / path
                    for path in sorted(inside)}
    raise HandoutError(f"{root} is neither a git checkout of the kit nor an installed copy of it")


def make_handout(destination: Path, root: Path = REPO_ROOT, milestone: int = 1) -> list[str]:
    """Write milestone `milestone`'s starter kit to `destination` (which must not exist); returns the
    stubbed kernel files. The kit is written to a temporary directory beside `destination` and renamed
    into place when complete, so a handout stopped midway leaves no half kit to hand out."""
    return _write_kit(destination, root, checkout_sources, milestone, ())


def make_worker_kit(destination: Path, root: Path = REPO_ROOT, milestone: int = 1) -> list[str]:
    """Write the kit a grading worker of milestone `milestone` runs to `destination`: the milestone's handout
    and WORKER_FILES, from the files git tracks in `root` or, when `root` is an installed copy, from its
    installed files. Returns the stubbed kernel files."""
    sources = checkout_sources if (root / ".git").exists() else installed_sources
    return _write_kit(destination, root, sources, milestone, WORKER_FILES)


def _write_kit(destination: Path, root: Path, sources, milestone: int, kept: tuple[str, ...]) -> list[str]:
    """The handout of `milestone` written as make_handout says, from the files sources(root), with `kept` kept."""
    if milestone not in MILESTONES:
        raise HandoutError(f"no milestone {milestone}; the handouts are for milestones {', '.join(map(str, MILESTONES))}")
    if destination.exists():
        raise HandoutError(f"{destination} already exists; choose a new directory")
    try:
        with replacing(destination, directory=True) as partial:
            return _write_handout(partial, sources(root), milestone, kept)
    except OSError as err:
        raise HandoutError(f"{destination}: cannot write the handout ({err.strerror or err})") from None


def _write_handout(destination: Path, sources: dict[Path, Path], milestone: int, kept: tuple[str, ...]) -> list[str]:
    leave_out = left_out(milestone)
    written = {relative: source for relative, source in sources.items() if source.exists() and (
        relative.as_posix() in kept or not any(relative.as_posix().startswith(left) for left in leave_out))}
    folders = {relative.parts[0] for relative in written if len(relative.parts) > 1}
    stubbed = []
    for relative, source in written.items():
        raise_lost_interrupt()  # a file at a time: a Ctrl-C swallowed anywhere stops the kit here
        name = relative.as_posix()
        target = destination / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if name == "README.md":
            target.write_text(students_readme(source.read_text(), milestone))
        elif name == "pyproject.toml":
            target.write_text(students_pyproject(source.read_text(), folders))
        elif name.startswith("kernels/") and name.endswith(".py"):
            text, count = strip_solutions(source.read_text())
            if LEFTOVER_MARKER.search(text):
                raise HandoutError(f"{name}: unbalanced solution markers")
            target.write_text(text)
            if count:
                stubbed.append(f"{name} ({count} block{'s' if count > 1 else ''})")
        else:
            shutil.copy2(source, target)
    return stubbed
