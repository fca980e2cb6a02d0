"""gpt2.cuda on the CPU: compile errors point at the .py line, ptxas reports parse,
argument checks speak one line, kernel directories load."""

import importlib.util
import textwrap

import numpy as np
import pytest

from gpt2.cuda import (CudaKernel, KernelArgumentError, KernelCompileError, check_array, compile_report,
                       describe_compile_log, load_kernel_package, parse_ptxas_log, SourceOrigin)

BROKEN_MODULE = '''\
from gpt2.cuda import CudaKernel

SOURCE = r"""
extern "C" __global__ void broken(float* out) {
    out[threadIdx.x] = undefined_name;
}
"""
broken = CudaKernel(SOURCE, "broken")
'''


def import_file(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_compile_error_names_the_python_file_and_line(tmp_path):
    path = tmp_path / "broken_kernel.py"
    path.write_text(BROKEN_MODULE)
    module = import_file(path, "broken_kernel")
    with pytest.raises(KernelCompileError) as raised:
        compile_report(module.broken, "sm_86")
    message = str(raised.value)
    assert "broken_kernel.py:5: error" in message  # line 5 of the .py file holds `undefined_name`
    assert "undefined_name" in message


def test_describe_compile_log_maps_every_diagnostic():
    log = 'k.cu(2): error: x\nk.cu(10): warning: y\n1 error detected in the compilation of "k.cu".\x00'
    text = describe_compile_log(log, SourceOrigin("kernels/k.py", 40))
    assert "kernels/k.py:41: error: x" in text and "kernels/k.py:49: warning: y" in text
    assert "\x00" not in text


def test_parse_ptxas_log():
    log = ("ptxas info    : 0 bytes gmem\n"
           "ptxas info    : Compiling entry function 'a' for 'sm_86'\n"
           "ptxas info    : Function properties for a\n"
           "ptxas         .     256 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
           "ptxas info    : Used 36 registers, used 1 barriers, 8320 bytes smem, 364 bytes cmem[0]\n"
           "ptxas info    : Compiling entry function 'b' for 'sm_86'\n"
           "ptxas info    : Function properties for b\n"
           "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
           "ptxas info    : Used 12 registers, used 0 barriers, 360 bytes cmem[0]\n")
    a, b = parse_ptxas_log(log)
    assert (a.name, a.registers, a.spill_stores, a.spill_loads, a.stack_frame, a.shared_bytes) == ("a", 36, 8, 12, 256, 8320)
    assert (b.name, b.registers, b.spill_stores, b.shared_bytes) == ("b", 12, 0, 0)


def test_kernel_name_must_be_in_its_source():
    with pytest.raises(KernelCompileError, match="'missing' is not defined"):
        CudaKernel('extern "C" __global__ void present() {}', "missing")


def test_host_array_is_rejected_in_one_line():
    with pytest.raises(KernelArgumentError, match=r"^gelu_forward: out must be a CuPy array on the GPU, got ndarray$"):
        check_array("gelu_forward", "out", np.zeros(3, np.float32), 3)


def test_kernel_directory_must_hold_every_kernel(tmp_path):
    (tmp_path / "kernels").mkdir()
    with pytest.raises(FileNotFoundError, match="missing kernel file .*encoder.py"):
        load_kernel_package(tmp_path)


def test_repo_kernels_load_without_a_gpu():
    package = load_kernel_package()
    assert callable(package.attention_forward) and callable(package.softmax_forward)


def test_other_directory_loads_side_by_side(tmp_path):
    import shutil
    from pathlib import Path

    shutil.copytree(Path(__file__).parents[1] / "kernels", tmp_path / "kernels")
    mine, theirs = load_kernel_package(), load_kernel_package(tmp_path)
    assert mine.gelu_forward is not theirs.gelu_forward
    assert textwrap.dedent(theirs.gelu_forward.__module__).startswith("kit_loaded_")


@pytest.mark.gpu
def test_compile_error_on_the_gpu_path_names_the_line_too(tmp_path):
    path = tmp_path / "broken_on_gpu.py"
    path.write_text(BROKEN_MODULE)
    module = import_file(path, "broken_on_gpu")
    with pytest.raises(KernelCompileError, match=r"broken_on_gpu\.py:5: error.*undefined_name"):
        module.broken((1,), (1,), ())
