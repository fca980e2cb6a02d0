"""Every kernel of the kernels directory under test compiles for the course's GPUs
through NVRTC, with no GPU needed.

sm_86 is the A40 on Delta, sm_90 the H100/H200. A module's kernels are what it can be
seen to compile without running: its CudaKernels, cupy.RawKernels and cupy.RawModules
(at the top level, or in a top-level tuple, list or dict), or, where it makes them only
when first called, its CUDA source strings. A compile error fails with the .py file and
line; a register spill (local-memory traffic in the inner loop) fails too.
Registers, spills and shared memory per kernel are printed at the end of the run.
`--kernels DIR` compiles DIR's kernels: a student without a GPU still learns
whether their code compiles.
"""

import importlib
import os
import pkgutil
from pathlib import Path

import pytest

from gpt2kit.kernel_runtime.compiler import ARCH_SPECIFIC_TARGETS, programs_in
from gpt2kit.kernel_runtime.errors import KernelCompileError
from gpt2kit.kernel_runtime.loader import PACKAGE, bound_directory
from gpt2kit.kernel_runtime.stubs import holds_stub
from tests.compile_reports import Compiling

ARCHES = ("sm_86", "sm_90")
MODULES = sorted(info.name for info in pkgutil.iter_modules([str(bound_directory())]))

pytestmark = pytest.mark.nvrtc


def distinct_programs(module_name):
    """Each distinct program (source and options) of a kernel module."""
    module = importlib.import_module(f"{PACKAGE}.{module_name}")
    programs = programs_in(module)
    if not programs and holds_stub(Path(module.__file__).read_text()):  # its kernels are a TODO: test_is_written says so
        pytest.skip(f"kernels/{module_name}.py is not written yet: no kernel to compile")
    assert programs, (f"{module.__file__} defines no kernel: no CudaKernel, cupy.RawKernel or cupy.RawModule, and no "
                      f"string holding a __global__ function")
    return programs


@pytest.fixture(scope="session")
def compiling(request):
    """The compile checks' reports, on every core: as the first check begins, every program the run's checks
    compile is started. A spread run's processes (and the pytest runs their tests start) compile on one thread,
    only what their own checks ask for: the run's other processes have the other cores."""
    spread = "PYTEST_XDIST_WORKER" in os.environ
    reports = Compiling(threads=1 if spread else len(os.sched_getaffinity(0)))
    checks = [] if spread else [item.callspec.params for item in request.session.items
                                if getattr(item, "originalname", None) == "test_compiles_without_spills"]
    for check in checks:
        for program in programs_if_importable(check["module_name"]):
            reports.start(program, check["arch"])
    yield reports
    reports.close()


def programs_if_importable(module_name):
    try:
        return programs_in(importlib.import_module(f"{PACKAGE}.{module_name}"))
    except Exception:  # the module's own check imports it again, and fails saying why
        return []


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("module_name", MODULES)
def test_compiles_without_spills(module_name, arch, pytestconfig, compiling):
    for program in distinct_programs(module_name):
        if program.program.arch_specific and arch not in ARCH_SPECIFIC_TARGETS:
            continue  # built for an architecture-specific target (sm_90a) alone: its module chooses it there
        try:
            resources = compiling.report(program, arch)
        except KernelCompileError as err:
            if program.as_written:  # made when first called, with options this check cannot know
                pytest.skip(f"{program.origin.path} makes its kernels when first called, and a source of it does not "
                            f"compile without the options it is then given (the GPU tests compile it): "
                            f"{(str(err).splitlines()[1:] or [''])[0]}")
            raise
        assert resources, f"{program.origin.path}: ptxas reported no kernels"
        pytestconfig.compile_reports.extend(resources)
        for r in resources:
            assert r.spill_stores == 0 and r.spill_loads == 0, (
                f"{r.name} on {arch} spills registers: {r.spill_stores} bytes stored, {r.spill_loads} loaded")
