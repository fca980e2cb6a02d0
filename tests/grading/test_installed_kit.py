"""The kit installed from its wheel (`pip install .`, not -e) is one package, gpt2kit,
holding every package of the checkout, and reads everything it needs.

The wheel is built offline from the files git tracks (a copy, so no stale build/ of an
earlier build slips into it), with the test venv's setuptools, and installed with
--no-deps into a directory of its own that goes first on PYTHONPATH, the venv's
dependencies behind it. The commands run from a directory outside the checkout, with
the GPU hidden so they stop where a machine without one does: the grader after reading
its milestone's scheme, the leaderboard after reading its table, the handout at once,
since an installed copy is not a git checkout; the model completes text on the NumPy
reference backend.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpt2kit.grading.handout import LEFTOVER_MARKER
from gpt2kit.grading.items import WEIGHTS_FILES

ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The directory the wheel built from this checkout is installed into."""
    work = tmp_path_factory.mktemp("installed-kit")
    source, wheels, target = work / "source", work / "wheels", work / "site-packages"
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, listed.decode().split("\0")):
        if (ROOT / name).is_file():  # a tracked file deleted in the working tree stays out
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    pip("wheel", "--no-deps", "--no-build-isolation", "--check-build-dependencies", "-w", str(wheels), str(source))
    pip("install", "--no-deps", "--no-compile", "--target", str(target), *map(str, wheels.glob("*.whl")))
    return target.resolve()


def pip(*arguments: str) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet", *arguments],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"pip {arguments[0]}: {done.stderr[-3000:]}"


def installed_kit(target: Path, cwd: Path, *arguments: str) -> subprocess.CompletedProcess:
    """`python arguments` with the installed kit first on the path and no GPU visible."""
    env = os.environ | {"PYTHONPATH": str(target), "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run([sys.executable, *arguments], capture_output=True, text=True, cwd=cwd, env=env, timeout=300)


def checkout_packages() -> list[str]:
    """Every folder of Python in the checkout but the tests, by its import name: gpt2kit's own (gpt2kit/kernel_runtime/
    is gpt2kit.kernel_runtime) and the course folders' (reference/specs/ is gpt2kit.reference.specs)."""
    listed = subprocess.run(["git", "ls-files", "-z", "*.py"], cwd=ROOT, capture_output=True, check=True).stdout
    folders = {Path(name).parent.parts for name in filter(None, listed.decode().split("\0"))}
    return sorted(".".join(parts if parts[0] == "gpt2kit" else ("gpt2kit", *parts)) for parts in folders
                  if parts and parts[0] != "tests")


def test_the_wheel_installs_one_name_holding_every_package_of_the_checkout(installed, tmp_path):
    assert sorted(p.name for p in installed.iterdir() if not p.name.endswith(".dist-info")) == ["gpt2kit"]
    assert len([p for p in installed.iterdir() if p.name.endswith(".dist-info")]) == 1
    packages = checkout_packages()
    code = ("import importlib, sys; "
            "print(*(list(importlib.import_module(n).__path__)[0] for n in sys.argv[1:]), sep='\\n')")
    done = installed_kit(installed, tmp_path, "-c", code, *packages)
    assert done.returncode == 0, done.stderr
    assert len(packages) > 10 and all(Path(p).is_relative_to(installed / "gpt2kit") for p in done.stdout.split()), (
        done.stdout)


def test_the_installed_model_completes_text(installed, tmp_path):
    done = installed_kit(installed, tmp_path, "-m", "gpt2kit", "--backend", "reference", "--model", "random",
                         "--max-new-tokens", "2", "--seed", "0", "The meaning of life is")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("The meaning of life is") and len(done.stdout) > len("The meaning of life is\n")


@pytest.mark.parametrize("milestone", sorted(WEIGHTS_FILES))
def test_the_installed_grader_reads_its_milestone_s_scheme(installed, tmp_path, milestone):
    (tmp_path / "submission" / "kernels").mkdir(parents=True)
    done = installed_kit(installed, tmp_path, "-m", "gpt2kit.grading", "--milestone", str(milestone), "submission")
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith("gpt2kit.grading: cannot grade without a GPU: "), done.stderr


def test_the_installed_leaderboard_reads_its_table(installed, tmp_path):
    (tmp_path / "submission" / "kernels").mkdir(parents=True)
    done = installed_kit(installed, tmp_path, "-m", "gpt2kit.grading", "leaderboard", "submission")
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith("gpt2kit.grading leaderboard: cannot time kernels without a GPU: "), done.stderr


def test_the_installed_handout_refuses_in_one_line_naming_the_fix(installed, tmp_path):
    done = installed_kit(installed, tmp_path, "-m", "gpt2kit.grading", "handout", "kit")
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith(f"gpt2kit.grading: {installed / 'gpt2kit'} is not a git checkout of the kit"), (
        done.stderr)
    assert "git clone" in done.stderr and "pip install -e" in done.stderr
    assert not (tmp_path / "kit").exists()


def test_the_installed_grader_builds_its_worker_kit_from_the_installed_files(installed, tmp_path):
    code = ("import sys; from gpt2kit.grading.handout import make_worker_kit; "
            "print(*make_worker_kit(__import__('pathlib').Path(sys.argv[1]), milestone=4), sep='\\n')")
    done = installed_kit(installed, tmp_path, "-c", code, str(tmp_path / "kit"))
    assert done.returncode == 0, done.stderr
    assert "kernels/gelu.py (1 block)" in done.stdout.splitlines(), done.stdout
    kit = tmp_path / "kit"
    assert (kit / "grading" / "worker.py").is_file() and not (kit / "grading" / "grade.py").exists()
    assert (kit / "gpt2kit" / "kernel_runtime" / "loader.py").is_file()  # laid out as a checkout
    assert not any(LEFTOVER_MARKER.search(path.read_text()) for path in (kit / "kernels").glob("*.py"))
