"""Shared pytest setup: skipping what this machine cannot run, the compile report, and
spreading the whole suite over processes on a machine without a GPU. A run's processes
(its spread workers, the pytest runs its tests start) share their compile reports: each
program is compiled once per run and architecture (tests/compile_reports.py).

Markers: `gpu` (needs a CUDA GPU) and `nvrtc` (needs only NVRTC, which compiles
without a GPU); without one, the test skips with one line saying why and what to
install. Collection itself needs neither CuPy nor a GPU. `slow`: runs a suite or the
124M model again in child processes; these run first, so that a spread run's other
processes work beside them.

`calls(*functions, module=None)` marks a test that runs those host functions (each in
its spec's module, or all in `module`): while one of them is still a handout's TODO
stub in the kernels directory under test, the test skips with the line that names it
("gelu_forward: not written yet (kernels/gelu.py)"), the line that function's own
test_is_written fails with, instead of failing somewhere inside the stub; while one,
or `module`, is not in the kit at all (a later milestone's, or one the course staff
keep: Wav2Vec2's layers), it skips saying so.

The options (--seed, --kernels) and the choice of kernels directory live in
reference/pytest_plugin.py, which pyproject.toml loads before the command line is read.
KIT_NO_MEMORY_POOL=1 turns CuPy's memory pool off, for runs under compute-sanitizer.
"""

import dataclasses
import os

import pytest

from gpt2kit.kernel_runtime.device import gpu_unavailable_reason, nvrtc_unavailable_reason
from tests.compile_reports import end_of_run, share_in_this_run
from tests.spreading import ONE_THREAD, suite_workers


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """Before pytest-xdist reads -n: the default number of processes, where -n was not given; a spread run's
    processes, started after this, each compute with one thread."""
    if not config.pluginmanager.has_plugin("xdist"):
        return
    if config.option.numprocesses is None:
        workers = suite_workers(whole_suite=config.args_source is pytest.Config.ArgsSource.TESTPATHS,
                                gpu_reason=gpu_unavailable_reason(), nested="PYTEST_XDIST_WORKER" in os.environ,
                                cpus=len(os.sched_getaffinity(0)))
        if workers:
            config.option.numprocesses, config.option.dist = workers, "worksteal"
    if config.option.numprocesses:  # a number, or "auto"
        os.environ.update(ONE_THREAD)


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU; skipped with the reason when there is none")
    config.addinivalue_line("markers", "nvrtc: needs NVRTC (no GPU); skipped with what to install when it is missing")
    config.addinivalue_line("markers", "calls(*functions, module=None): runs these host functions; skipped with one "
                                       "line naming those not written yet")
    config.addinivalue_line("markers", "slow: runs a suite or the 124M model again in child processes, as what it "
                                       "proves needs (README, Tests); run first")
    config.compile_reports = []
    config.compile_reports_directory = share_in_this_run()
    if os.environ.get("KIT_NO_MEMORY_POOL") == "1" and gpu_unavailable_reason() is None:
        # Every array its own cudaMalloc: compute-sanitizer then sees an out-of-bounds
        # access as one, instead of a read of the pool's neighbouring block.
        import cupy
        cupy.cuda.set_allocator(None)


def pytest_unconfigure(config):
    end_of_run(config.compile_reports_directory)


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: "slow" not in item.keywords)  # stable: otherwise in collection order
    for marker, reason, what in (("gpu", gpu_unavailable_reason(), "GPU test"),
                                 ("nvrtc", nvrtc_unavailable_reason(), "compile check")):
        if reason is None:
            continue
        skip = pytest.mark.skip(reason=f"{what} skipped: {reason}")
        for item in items:
            if marker in item.keywords:
                item.add_marker(skip)
    # after those: a test this machine cannot run says why first (the first skip marker is the one reported)
    from gpt2kit.reference.registry import not_written_yet

    stubs = {}
    for item in items:
        for calls in item.iter_markers("calls"):
            key = (calls.args, calls.kwargs.get("module"))
            if key not in stubs:
                stubs[key] = not_in_this_kit(config, *key) or not_written_yet(*key)
            if stubs[key]:
                item.add_marker(pytest.mark.skip(reason=stubs[key]))


def not_in_this_kit(config, functions, module) -> str | None:
    """One line naming what a `calls` marker's host functions need that the kit under test lacks: `module`'s file,
    or (without one) the spec of a function; None when nothing is missing."""
    from gpt2kit.reference.registry import SPECS

    if module is not None:
        absent = [] if (config.kernels_directory / f"{module}.py").exists() else [f"kernels/{module}.py"]
    else:
        absent = [name for name in functions if name not in SPECS]
    return f"{', '.join(absent)}: not in this kit (a later milestone's, or the course staff's)" if absent else None


def pytest_sessionfinish(session):
    """A worker of a spread run hands its compile reports to the process that prints them."""
    if hasattr(session.config, "workeroutput"):
        session.config.workeroutput["compile_reports"] = [dataclasses.asdict(r) for r in session.config.compile_reports]


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    from gpt2kit.kernel_runtime.compiler import KernelResources

    reports = getattr(node, "workeroutput", {}).get("compile_reports", [])
    node.config.compile_reports.extend(KernelResources(**r) for r in reports)


def pytest_terminal_summary(terminalreporter, config):
    reports = config.compile_reports
    if not reports:
        return
    terminalreporter.section(f"kernel resources (NVRTC, no GPU needed) of {config.kernels_directory}")
    terminalreporter.write_line(f"{'kernel':32s} {'arch':6s} {'regs':>5s} {'spill st':>9s} {'spill ld':>9s} "
                                f"{'stack':>6s} {'smem':>7s}")
    for r in sorted(reports, key=lambda r: (r.name, r.arch)):
        terminalreporter.write_line(f"{r.name:32s} {r.arch:6s} {r.registers:5d} {r.spill_stores:9d} "
                                    f"{r.spill_loads:9d} {r.stack_frame:6d} {r.shared_bytes:7d}")
