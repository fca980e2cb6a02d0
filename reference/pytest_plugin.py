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

import os

import pytest

from kernel_runtime import recording
from kernel_runtime.errors import KernelLoadError
from kernel_runtime.loader import use_kernels
from reference.precision import ProfileError
from reference.variants import resolve_profile


def pytest_addoption(parser):
    parser.addoption("--seed", type=int, default=int(os.environ.get("KIT_SEED", "0")),
                     help="base seed of the random test inputs (default: $KIT_SEED or 0)")
    parser.addoption("--kernels", default=None,
                     help="a kernels/ directory (or a kit holding one) to test instead of this kit's")
    parser.addoption("--profile", default=None,
                     help="precision profile the kernel checks judge by: fp32, tf32 or course "
                          "(default: $KIT_PROFILE, else a variant's own, else fp32)")


def pytest_configure(config):
    try:
        config.kernels_directory = use_kernels(config.getoption("kernels"))
    except KernelLoadError as err:
        raise pytest.UsageError(f"--kernels: {err}") from None
    try:
        config.precision_profile = resolve_profile(config.getoption("profile"))  # the host functions' checks
    except ProfileError as err:
        raise pytest.UsageError(str(err)) from None
    recording.install()


def pytest_report_header(config):
    return f"precision profile of the host functions' checks: {config.precision_profile.name}"
