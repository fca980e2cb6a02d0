"""The grader's workers run the worker kit, never the TA's checkout, in a directory of their own, and,
behind bwrap or unshare, cannot reach the staff's solutions by any route (grading.sandbox); on the CPU."""

import ast
import os
import shutil
from pathlib import Path

import pytest

from gpt2kit.grading.grade import grade_item
from gpt2kit.grading.handout import MILESTONES, SOLUTION, WORKER_FILES, strip_solutions
from gpt2kit.grading.items import load_scheme
from gpt2kit.grading.sandbox import SandboxError, choose_isolation, planned_mounts, unavailable, worker_sandbox

ROOT = Path(__file__).parents[2]
PROBE = ROOT / "tests" / "kernels" / "wrong" / "grader" / "reads_the_solutions.py"
SEED = 5


@pytest.mark.parametrize("milestone", MILESTONES)
def test_the_worker_kit_holds_no_solution_body_and_the_worker_s_own_modules(milestone):
    kit = worker_sandbox(milestone, "none").kit
    shipped = sorted(kit.glob("kernels/*.py"))
    assert shipped and all((kit / name).is_file() for name in WORKER_FILES)
    for path in shipped:
        text, original = path.read_text(), (ROOT / "kernels" / path.name).read_text()
        assert not SOLUTION.search(text) and text == strip_solutions(original)[0], path.name
    assert any(SOLUTION.search((ROOT / "kernels" / p.name).read_text()) for p in shipped)  # the check can fail


def submissions_with_a_probe(directory: Path, probe: str) -> Path:
    """A directory of submissions: alice's, the kit's solutions, and the probing one, `probe` its gelu.py, told
    where the grader's checkout and alice's submission are."""
    shutil.copytree(ROOT / "kernels", directory / "alice" / "kernels")
    kernels = directory / "probe" / "kernels"
    kernels.mkdir(parents=True)
    (kernels / "gelu.py").write_text(probe)
    (kernels / "known_paths.txt").write_text(f"{ROOT}\n{directory / 'alice'}\n")
    return kernels.parent


def probe_reason(submission: Path, isolation: str) -> tuple[str, str]:
    """What the worker's probe said (its RuntimeError's message), and the sandbox's summary line."""
    if isolation != "none" and unavailable(isolation):
        pytest.skip(f"isolation {isolation} is not available here: {unavailable(isolation)}")
    sandbox, scheme = worker_sandbox(1, isolation), load_scheme()
    grade = grade_item(submission, scheme.item("gelu"), scheme, SEED, sandbox)
    assert grade.score == 0 and "RuntimeError: " in grade.reason, grade.reason
    return grade.reason.split("RuntimeError: ", 1)[1], sandbox.summary


@pytest.mark.parametrize("isolation", ["bwrap", "unshare"])
def test_an_isolated_worker_reaches_no_solution_by_any_route(tmp_path, isolation):
    said, summary = probe_reason(submissions_with_a_probe(tmp_path, PROBE.read_text()), isolation)
    assert said == "no route reached a solution"
    assert summary.startswith(f"isolation: {isolation} (the worker cannot read the grader's checkout")


def test_without_isolation_the_worker_runs_stubs_and_the_report_says_the_checkout_is_readable(tmp_path):
    said, summary = probe_reason(submissions_with_a_probe(tmp_path, PROBE.read_text()), "none")
    assert "paths the student knows" in said, said  # the grader's checkout and alice's are readable here
    assert "gpt2kit.__file__" not in said and "KIT_KERNELS" not in said  # the worker kit's are stubs
    assert summary.startswith("isolation: none — submissions could read the grader's files ("), summary


WRITES_HOME = '''
import os
from pathlib import Path

for name in ("HOME", "TMPDIR", "CUPY_CACHE_DIR"):
    Path(os.environ[name], "written-by-the-worker").write_text("x")
Path("~/.written-by-the-worker").expanduser().write_text("x")
raise RuntimeError(repr({name: os.environ.get(name) for name in ("HOME", "TMPDIR", "CUPY_CACHE_DIR", "PYTHONPATH")}))
'''


@pytest.mark.parametrize("isolation", ["none", "auto"])
def test_the_worker_s_home_temporary_directory_and_cupy_cache_are_its_own(tmp_path, monkeypatch, isolation):
    ta_home = tmp_path / "ta-home"
    ta_home.mkdir()
    monkeypatch.setenv("HOME", str(ta_home))
    sandbox = worker_sandbox(1, choose_isolation(isolation)[0])
    said, _ = probe_reason(submissions_with_a_probe(tmp_path / "submissions", WRITES_HOME), sandbox.isolation)
    seen = ast.literal_eval(said)
    assert seen["PYTHONPATH"] == str(sandbox.kit)
    directories = {Path(seen[name]).parent for name in ("HOME", "TMPDIR", "CUPY_CACHE_DIR")}
    assert len(directories) == 1 and directories.pop().name.startswith("worker-"), seen
    assert not list(ta_home.rglob("*written-by-the-worker"))  # (the grader's own replayer may make ~/.cupy)


def test_an_isolation_asked_for_that_does_not_work_is_one_line(monkeypatch):
    monkeypatch.setenv("PATH", "")
    with pytest.raises(SandboxError, match=r"^isolation bwrap was asked for, but no bwrap on PATH$"):
        choose_isolation("bwrap")
    monkeypatch.setenv("KIT_GRADING_ISOLATION", "chroot")
    with pytest.raises(SandboxError, match=r"^KIT_GRADING_ISOLATION=chroot: expected auto, bwrap, unshare, none$"):
        choose_isolation()


def test_what_is_bound_back_shows_inside_what_is_hidden_and_what_is_hidden_below_stays_hidden(tmp_path):
    for path in ("checkouts/kit/.venv/lib/kit", "checkouts/kit/kernels", "home/python", "home/secret"):
        (tmp_path / path).mkdir(parents=True)
    mounts = planned_mounts([tmp_path / "checkouts", tmp_path / "checkouts/kit/kernels", tmp_path / "home",
                             tmp_path / "checkouts/kit/.venv/lib/kit", tmp_path / "home/secret"],
                            [tmp_path / "checkouts/kit/.venv", tmp_path / "home/python", Path("/")], tmp_path / "home")
    assert [(kind, os.path.relpath(path, tmp_path)) for kind, path in mounts] == [
        ("hide", "checkouts"), ("write", "home"), ("hide", "home/secret"), ("read", "home/python"),
        ("read", "checkouts/kit/.venv"), ("hide", "checkouts/kit/.venv/lib/kit")]


CRASHES = '''
import ctypes

ctypes.string_at(0)  # a segmentation fault at import
'''


@pytest.mark.parametrize("isolation", ["none", "bwrap", "unshare"])
def test_a_worker_that_crashes_is_named_killed_by_its_signal_at_every_isolation(tmp_path, isolation):
    if isolation != "none" and unavailable(isolation):
        pytest.skip(f"isolation {isolation} is not available here: {unavailable(isolation)}")
    scheme = load_scheme()
    submission = submissions_with_a_probe(tmp_path, CRASHES)
    grade = grade_item(submission, scheme.item("gelu"), scheme, SEED, worker_sandbox(1, isolation))
    assert "the worker process was killed by SIGSEGV" in grade.reason, grade.reason
