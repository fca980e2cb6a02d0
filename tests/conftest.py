"""Shared pytest setup: the seed option, the kernels under test, GPU skipping, reports.

    pytest tests/kernels                      # the repo's kernels, default seed
    pytest tests/kernels --seed 7             # other random inputs (or KIT_SEED=7)
    pytest tests/kernels --kernels ../mine    # another kernels/ directory

KIT_NO_MEMORY_POOL=1 turns CuPy's memory pool off, for runs under compute-sanitizer.
"""

import os

import pytest

from gpt2.cuda import gpu_unavailable_reason, load_kernel_package
from reference.checks import FUNCTIONS, cases


def pytest_addoption(parser):
    parser.addoption("--seed", type=int, default=int(os.environ.get("KIT_SEED", "0")),
                     help="base seed of the random test inputs (default: $KIT_SEED or 0)")
    parser.addoption("--kernels", default=None,
                     help="a kernels/ directory (or a repo holding one) to test instead of this repo's")


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU; skipped with the reason when there is none")
    config.compile_reports = []
    if os.environ.get("KIT_NO_MEMORY_POOL") == "1" and gpu_unavailable_reason() is None:
        # Every array its own cudaMalloc: compute-sanitizer then sees an out-of-bounds
        # access as one, instead of a read of the pool's neighbouring block.
        import cupy
        cupy.cuda.set_allocator(None)


def pytest_collection_modifyitems(config, items):
    reason = gpu_unavailable_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"GPU test skipped: {reason}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_generate_tests(metafunc):
    """Tests that take `case` run once per case of their module's KERNEL."""
    if "case" in metafunc.fixturenames and hasattr(metafunc.module, "KERNEL"):
        kernel = metafunc.module.KERNEL
        metafunc.parametrize("case", cases(kernel, metafunc.config.getoption("seed")), ids=lambda c: c.id)


@pytest.fixture(scope="session")
def kernel_package(pytestconfig):
    """The host functions under test."""
    return load_kernel_package(pytestconfig.getoption("kernels"))


@pytest.fixture
def implementation(request, kernel_package):
    """The host function of the requesting module's KERNEL."""
    return getattr(kernel_package, FUNCTIONS[request.module.KERNEL])


def pytest_terminal_summary(terminalreporter, config):
    reports = config.compile_reports
    if not reports:
        return
    terminalreporter.section("kernel resources (NVRTC, no GPU needed)")
    terminalreporter.write_line(f"{'kernel':32s} {'arch':6s} {'regs':>5s} {'spill st':>9s} {'spill ld':>9s} "
                                f"{'stack':>6s} {'smem':>7s}")
    for r in sorted(reports, key=lambda r: (r.name, r.arch)):
        terminalreporter.write_line(f"{r.name:32s} {r.arch:6s} {r.registers:5d} {r.spill_stores:9d} "
                                    f"{r.spill_loads:9d} {r.stack_frame:6d} {r.shared_bytes:7d}")
