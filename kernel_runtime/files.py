"""Writing a file (or a directory) whole or not at all.

Every file the kit writes (checkpoints, CSVs, figures, reports, handouts) is written
under a temporary name beside its destination and renamed into place once complete:

    with replacing(path) as partial, open(partial, "w") as f:
        f.write(text)

A rename within one directory is atomic, so a reader sees the old file or the new
one, never half of one: Ctrl-C, a full disk or an exception while writing leaves
`path` as it was (the previous file intact, or no file) and removes the partial one.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from pathlib import Path
from typing import Iterator


@contextlib.contextmanager
def replacing(path: str | Path, directory: bool = False) -> Iterator[Path]:
    """Yield a new, empty temporary file (or directory, when `directory`: its missing parents
    made, as for a tree of files) beside `path`, to be written in full; on a clean exit it
    replaces `path` (a directory only an empty one), on any exception it is removed.

    The temporary name is hidden and keeps `path`'s suffix, for writers that choose the
    format by it (matplotlib's savefig) or add their own (np.save).
    """
    path = Path(path)
    partial = path.with_name(f".{path.stem}.partial-{secrets.token_hex(4)}{path.suffix}")
    if directory:
        partial.mkdir(parents=True)
    else:  # created with O_EXCL: never someone else's file; mode as open() gives (umask applies)
        os.close(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    try:
        yield partial
        if not directory:
            _flush_to_disk(partial)
        os.replace(partial, path)
    except BaseException:  # KeyboardInterrupt too: the point is to clean up after Ctrl-C
        if directory:
            shutil.rmtree(partial, ignore_errors=True)
        else:
            partial.unlink(missing_ok=True)
        raise


def _flush_to_disk(path: Path) -> None:
    """fsync, so that a write error the system deferred (a full disk, a network drive) shows
    here, before the rename, and a crash right after the rename cannot leave an empty file."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
