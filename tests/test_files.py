"""gpt2kit.kernel_runtime.files: a file or directory appears whole under its name, or not at all, and a path that
cannot be written is named before the work that would write it. Where the kit writes by default, git ignores."""

import os
import signal

import pytest

from gpt2kit.kernel_runtime.commands import run_command
from gpt2kit.gpt2 import train
from gpt2kit.kernel_runtime.files import OutputPathError, check_writable_directory, check_writable_file, replacing
from tests.repository import ignored_by_the_kit


def test_a_finished_write_replaces_the_file_with_the_usual_permissions(tmp_path):
    path = tmp_path / "table.csv"
    path.write_text("old\n")
    with replacing(path) as partial:
        assert partial.parent == tmp_path and partial.suffix == ".csv" and partial.name.startswith(".")
        partial.write_text("new\n")
        assert path.read_text() == "old\n"  # readers see the old file until the new one is whole
    assert path.read_text() == "new\n"
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask
    assert [p.name for p in tmp_path.iterdir()] == ["table.csv"]


@pytest.mark.parametrize("failure", [KeyboardInterrupt, OSError])
def test_a_failed_write_keeps_the_previous_file_and_leaves_nothing_beside_it(tmp_path, failure):
    path = tmp_path / "results.json"
    path.write_text("old\n")
    with pytest.raises(failure), replacing(path) as partial:
        partial.write_text("half")
        raise failure
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_a_directory_appears_whole_or_not_at_all(tmp_path):
    with pytest.raises(KeyboardInterrupt), replacing(tmp_path / "kit", directory=True) as partial:
        (partial / "README.md").write_text("# kit\n")
        raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []
    with replacing(tmp_path / "kit", directory=True) as partial:
        (partial / "README.md").write_text("# kit\n")
    assert [p.relative_to(tmp_path).as_posix() for p in sorted(tmp_path.rglob("*"))] == ["kit", "kit/README.md"]


def test_a_ctrl_c_swallowed_while_writing_still_keeps_the_previous_file(tmp_path, capsys):
    """What NumPy's C code sometimes does with a Ctrl-C: Python's handler ran (the signal is recorded), the
    KeyboardInterrupt never came. The command stops before the rename, with Ctrl-C's status."""
    path = tmp_path / "model.bin"
    path.write_text("old\n")

    def write_swallowing_a_ctrl_c():
        with replacing(path) as partial:
            partial.write_text("new\n")
            wakeup = signal.set_wakeup_fd(-1)  # where run_command records signals, as Python's handler writes it
            signal.set_wakeup_fd(wakeup)
            os.write(wakeup, bytes([signal.SIGINT]))

    assert run_command("test", write_swallowing_a_ctrl_c) == 130
    assert path.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["model.bin"]


@pytest.mark.parametrize("check", [check_writable_file, check_writable_directory])
def test_a_path_that_can_be_written_passes_and_is_left_as_it_was(tmp_path, check):
    check(tmp_path / "new")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("check, path, message", [
    (check_writable_file, "{tmp}", "{tmp}: is a directory; name a file to write"),
    (check_writable_file, "{tmp}/no/out.bin", "{tmp}/no/out.bin: no directory {tmp}/no to write it in"),
    (check_writable_file, "{tmp}/file/out.bin", "{tmp}/file/out.bin: {tmp}/file is not a directory"),
    (check_writable_directory, "{tmp}/file", "{tmp}/file: {tmp}/file is not a directory"),
    (check_writable_directory, "{tmp}/file/a/b", "{tmp}/file/a/b: {tmp}/file is not a directory"),
    (check_writable_directory, "/proc/kit/results", "/proc/kit/results: cannot write in /proc ("),
    (check_writable_file, "/proc/kit.bin", "/proc/kit.bin: cannot write in /proc ("),
], ids=["file-is-a-directory", "file-in-no-directory", "file-under-a-file", "directory-is-a-file",
        "directory-under-a-file", "directory-in-proc", "file-in-proc"])
def test_a_path_that_cannot_be_written_is_one_line_naming_why(tmp_path, check, path, message):
    (tmp_path / "file").write_text("")
    with pytest.raises(OutputPathError) as raised:
        check(path.format(tmp=tmp_path))
    assert str(raised.value).startswith(message.format(tmp=tmp_path)) and "\n" not in str(raised.value)
    assert [p.name for p in tmp_path.iterdir()] == ["file"]


def test_what_the_kit_writes_by_default_git_ignores(tmp_path):
    """A checkout stays clean however the kit runs in it: each command's default output (its --help says where),
    and the course's checkpoint as the README converts it."""
    written = [train.DEFAULT_OUT.as_posix(), train.state_path(train.DEFAULT_OUT).as_posix(),
               "gpt2_124M.bin",                         # python -m gpt2kit.gpt2.checkpoint convert gpt2 gpt2_124M.bin
               "results/grape/speedometer.csv",         # python -m gpt2kit.benchmarks.grape_study
               "results/training/training_loss.png",    # python -m gpt2kit.benchmarks.training
               "grading-results/gradebook.csv",         # python -m gpt2kit.grading
               "leaderboard-results/alice/leaderboard.json"]    # python -m gpt2kit.grading leaderboard
    assert ignored_by_the_kit(tmp_path, written) == written
