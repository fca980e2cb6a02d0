"""Every kernel of the kernels directory under test compiles for the course's GPUs
through NVRTC, with no GPU needed.

sm_86 is the A40 on Delta, sm_90 the H100/H200. A compile error fails with the .py
file and line; a register spill (local-memory traffic in the inner loop) fails too.
Registers, spills and shared memory per kernel are printed at the end of the run.
`--kernels DIR` compiles DIR's kernels: a student without a GPU still learns
whether their code compiles.
"""

import importlib
import pkgutil

import pytest

from kernel_runtime.compiler import compile_report, distinct_compilations
from kernel_runtime.loader import PACKAGE, bound_directory

ARCHES = ("sm_86", "sm_90")
MODULES = sorted(info.name for info in pkgutil.iter_modules([str(bound_directory())]))

pytestmark = pytest.mark.nvrtc


def distinct_sources(module_name):
    """One CudaKernel per distinct compilation (source and options) of a kernel module."""
    module = importlib.import_module(f"{PACKAGE}.{module_name}")
    kernels = distinct_compilations(module)
    assert kernels, f"{module.__file__} defines no CudaKernel"
    return kernels


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("module_name", MODULES)
def test_compiles_without_spills(module_name, arch, pytestconfig):
    for kernel in distinct_sources(module_name):
        resources = compile_report(kernel, arch)
        assert resources, f"{kernel}: ptxas reported no kernels"
        pytestconfig.compile_reports.extend(resources)
        for r in resources:
            assert r.spill_stores == 0 and r.spill_loads == 0, (
                f"{r.name} on {arch} spills registers: {r.spill_stores} bytes stored, {r.spill_loads} loaded")
