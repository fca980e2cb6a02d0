"""The kit's tests. KIT_PACKAGES: the kit's top-level packages, as pyproject.toml installs them (every directory at
the kit's root that holds an __init__.py, but tests/), so that a test that copies the kit copies these."""

from pathlib import Path

_ROOT = Path(__file__).parents[1]
KIT_PACKAGES = tuple(sorted(path.parent.name for path in _ROOT.glob("*/__init__.py") if path.parent.name != "tests"))
