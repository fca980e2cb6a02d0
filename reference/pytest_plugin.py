"""The kit's pytest options, loaded before pytest reads its command line.

pyproject.toml's addopts loads this plugin (-p reference.pytest_plugin), so pytest
knows --kernels takes a value and never mistakes `--kernels ~/mine` for a test path
to collect (a whole kit clone there would bring its own tests/conftest.py).

    pytest tests/kernels                      # this kit's kernels, default seed
    pytest tests/kernels --seed 7             # other random inputs (or KIT_SEED=7)
    pytest tests/kernels --kernels ~/mine     # another kernels/ directory, or a kit holding one
    pytest tests/kernels --profile tf32       # judged under a precision profile (reference.precision)

Without --profile, $KIT_PROFILE names the profile, else a variant's check is judged
under the variant's own and every other under fp32 (reference.variants.resolve_profile).

The process runs the chosen kernels directory everywhere (kernel_runtime.loader),
the compile checks included; the watch on CuPy (kernel_runtime.recording) goes in
before any kernel module is imported.
"""

import argparse
import os

import pytest

from gpt2kit.kernel_runtime import recording
from gpt2kit.kernel_runtime.commands import SEED
from gpt2kit.kernel_runtime.errors import KernelLoadError
from gpt2kit.kernel_runtime.loader import use_kernels
from gpt2kit.reference.precision import ProfileError
from gpt2kit.reference.variants import add_profile_option, resolve_profile


def pytest_addoption(parser):
    parser.addoption("--seed", default=None,  # checked in pytest_configure, where a mistake is one line
                     help="base seed of the random test inputs, from 0 to 2**31 - 1 (default: $KIT_SEED or 0)")
    parser.addoption("--kernels", default=None,
                     help="a kernels/ directory (or a kit holding one) to test instead of this kit's")
    add_profile_option(parser.addoption, "the kernel checks judge by", "a variant's own, else fp32")


def pytest_configure(config):
    config.option.seed = base_seed(config.getoption("seed"), os.environ)
    try:
        config.kernels_directory = use_kernels(config.getoption("kernels"))
    except KernelLoadError as err:
        raise pytest.UsageError(f"--kernels: {err}") from None
    try:
        config.precision_profile = resolve_profile(config.getoption("profile"))  # the host functions' checks
    except ProfileError as err:
        raise pytest.UsageError(str(err)) from None
    recording.install()


def base_seed(option: str | None, environ) -> int:
    """--seed if given, else $KIT_SEED if set, else 0; a value that is no seed is a UsageError naming its source."""
    for given, source in ((option, "--seed"), (environ.get("KIT_SEED") or None, "$KIT_SEED")):
        if given is not None:
            try:
                return SEED(given)
            except argparse.ArgumentTypeError as err:
                raise pytest.UsageError(f"{source}: {err}") from None
    return 0


def pytest_report_header(config):
    return f"precision profile of the host functions' checks: {config.precision_profile.name}"
