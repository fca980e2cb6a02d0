"""Every kernel compiles for the course's GPUs through NVRTC, with no GPU needed.

sm_86 is the A40 on Delta, sm_90 the H100/H200. A compile error fails with the .py
file and line; a register spill (local-memory traffic in the inner loop) fails too.
Registers, spills and shared memory per kernel are printed at the end of the run.
"""

import importlib
import pkgutil

import pytest

import kernels
from gpt2.cuda import compile_report, kernels_in

ARCHES = ("sm_86", "sm_90")
MODULES = sorted(m.name for m in pkgutil.iter_modules(kernels.__path__))


def distinct_sources(module_name):
    """One CudaKernel per distinct source string of a kernels/ module."""
    module = importlib.import_module(f"kernels.{module_name}")
    by_source = {k.source: k for k in kernels_in(module)}
    assert by_source, f"kernels/{module_name}.py defines no CudaKernel"
    return list(by_source.values())


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
