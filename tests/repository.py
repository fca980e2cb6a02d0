"""What git makes of the kit's own outputs: which paths its .gitignore ignores."""

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).parents[1]


def ignored_by_the_kit(directory: Path, paths: list[str]) -> list[str]:
    """Those of `paths` (relative to the kit's top) that the kit's .gitignore ignores, asked of git in a new
    repository at `directory` that holds that .gitignore alone: the answer of any checkout of the kit, a handout
    (which is no repository) too."""
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", str(directory)], check=True)
    shutil.copy(ROOT / ".gitignore", directory / ".gitignore")
    done = subprocess.run(["git", "check-ignore", *paths], cwd=directory, capture_output=True, text=True)
    assert done.returncode in (0, 1), done.stderr  # 1: none of them
    return done.stdout.splitlines()
