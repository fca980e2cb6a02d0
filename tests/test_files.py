"""kernel_runtime.files.replacing: a file or directory appears whole under its name, or not at all."""

import os

import pytest

from kernel_runtime.files import replacing


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
