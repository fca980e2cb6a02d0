"""Writing a file (or a directory) whole or not at all, and checking first that it can be.

Every file the kit writes (checkpoints, CSVs, figures, reports, handouts) is written
under a temporary name beside its destination and renamed into place once complete:

    with replacing(path) as partial, open(partial, "w") as f:
        f.write(text)

A rename within one directory is atomic, so a reader sees the old file or the new
one, never half of one: Ctrl-C, a full disk or an exception while writing leaves
`path` as it was (the previous file intact, or no file) and removes the partial one.
A Ctrl-C that some library swallowed while the file was written (see
kernel_runtime.commands) still stops the rename.

A command checks its outputs before its long work, so that a mistake in a path costs
nothing: check_writable_file(path) for a file, check_writable_directory(path) for a
directory it fills (made with its missing parents when written).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from pathlib import Path
from typing import Iterator

from gpt2kit.kernel_runtime.commands import raise_lost_interrupt
from gpt2kit.kernel_runtime.errors import KitError


class OutputPathError(KitError):
    """A path a command cannot write its output to."""


@contextlib.contextmanager
def replacing(path: str | Path, directory: bool = False) -> Iterator[Path]:
    """Yield a new, empty temporary file (or directory, when `directory`: its missing parents
    made, as for a tree of files) beside `path`, to be written in full; on a clean exit it
    replaces `path` (a directory only an empty one), on any exception it is removed.

    The temporary name is hidden and keeps `path`'s suffix, for writers that choose the
    format by it (matplotlib's savefig) or add their own (np.save).
    """
    path = Path(path)
    partial = _partial_name(path)
    if directory:
        partial.mkdir(parents=True)
    else:
        _create_new(partial)
    try:
        yield partial
        if not directory:
            _flush_to_disk(partial)
        raise_lost_interrupt()  # a Ctrl-C swallowed while writing: the previous file stays
        os.replace(partial, path)
    except BaseException:  # KeyboardInterrupt too: the point is to clean up after Ctrl-C
        if directory:
            shutil.rmtree(partial, ignore_errors=True)
        else:
            partial.unlink(missing_ok=True)
        raise


def check_writable_file(path: str | Path, label: str | None = None, parents_made: bool = False) -> None:
    """OutputPathError, one line starting with `label` (default: the path), unless replacing(path) can write a
    file there: `path` is not a directory, and its directory exists and takes new files (with `parents_made`, a
    directory the writer makes with its missing parents: as check_writable_directory)."""
    path = Path(path)
    label = label or str(path)
    if path.is_dir():
        raise OutputPathError(f"{label}: is a directory; name a file to write")
    if parents_made:
        check_writable_directory(path.parent, label)
        return
    if not path.parent.exists():
        raise OutputPathError(f"{label}: no directory {path.parent} to write it in")
    _check_takes_files(path.parent, label)


def check_writable_directory(path: str | Path, label: str | None = None) -> None:
    """OutputPathError, one line starting with `label` (default: the path), unless files can be written in the
    directory `path`, which is made with its missing parents when it is written (nothing is made here)."""
    path = Path(path)
    existing = next(p for p in (path, *path.parents) if p.exists())  # a relative path's parents end at "."
    _check_takes_files(existing, label or str(path))


def _check_takes_files(directory: Path, label: str) -> None:
    """A new file made and removed in `directory`: what the write will do, whoever runs it (access() lets root
    through where the system then refuses, as on a read-only file system or in /proc)."""
    if not directory.is_dir():
        raise OutputPathError(f"{label}: {directory} is not a directory")
    probe = _partial_name(directory / "write-check")
    try:
        _create_new(probe)
        probe.unlink()
    except OSError as err:
        raise OutputPathError(f"{label}: cannot write in {directory} ({err.strerror or err})") from None


def _partial_name(path: Path) -> Path:
    return path.with_name(f".{path.stem}.partial-{secrets.token_hex(4)}{path.suffix}")


def _create_new(path: Path) -> None:
    """Created with O_EXCL: never someone else's file; mode as open() gives (umask applies)."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))


def _flush_to_disk(path: Path) -> None:
    """fsync, so that a write error the system deferred (a full disk, a network drive) shows
    here, before the rename, and a crash right after the rename cannot leave an empty file."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
