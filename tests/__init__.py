"""The kit's tests. KIT_PACKAGES: the kit's top-level packages, as pyproject.toml installs them (a test that copies
the kit copies these)."""

import tomllib
from pathlib import Path

_FIND = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
KIT_PACKAGES = tuple(pattern.removesuffix("*") for pattern in _FIND["find"]["include"])
