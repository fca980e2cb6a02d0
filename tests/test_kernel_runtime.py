"""kernel_runtime on the CPU: compile errors point at the .py line, ptxas reports parse,
launch constants reach the source as defines, argument checks speak one line, the
loader binds one kernels directory per process, the watch refuses by name."""

import importlib.util
import json
import re
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from gpt2kit.kernel_runtime import (CudaKernel, KernelArgumentError, KernelCompileError, check_array,
                                    power_of_two_at_least, recording)
from gpt2kit.kernel_runtime.compiler import (SourceOrigin, compile_ptx, compile_report, describe_compile_log,
                                             programs_in, parse_ptxas_log)
from gpt2kit.kernel_runtime.tape import Program, Tape
from gpt2kit.kernel_runtime.device import INSTALL_CUPY, cupy

ROOT = Path(__file__).parents[1]
def cublas_loads() -> bool:
    try:
        importlib.import_module("cupy.cublas")
    except ImportError:
        return False
    return True


needs_cupy = pytest.mark.skipif(cupy is None, reason=f"CuPy is not installed ({INSTALL_CUPY})")

BROKEN_MODULE = '''\
from gpt2kit.kernel_runtime import CudaKernel

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


@pytest.mark.nvrtc
def test_compile_error_names_the_python_file_and_line(tmp_path):
    path = tmp_path / "broken_kernel.py"
    path.write_text(BROKEN_MODULE)
    module = import_file(path, "broken_kernel")
    with pytest.raises(KernelCompileError) as raised:
        compile_report(module.broken, "sm_86")
    message = str(raised.value)
    assert "broken_kernel.py:5: error" in message  # line 5 of the .py file holds `undefined_name`
    assert "undefined_name" in message


@pytest.mark.nvrtc
def test_defines_reach_the_source():
    source = r"""extern "C" __global__ void sized(float* out) {
        __shared__ float tile[TILE];
        tile[threadIdx.x % TILE] = out[threadIdx.x];
        __syncthreads();
        out[threadIdx.x] = tile[(threadIdx.x + 1) % TILE];
    }"""
    with pytest.raises(KernelCompileError, match='identifier "TILE" is undefined'):
        compile_report(CudaKernel(source, "sized"), "sm_86")
    small, large = (compile_report(CudaKernel(source, "sized", defines={"TILE": n}), "sm_86")[0] for n in (8, 1024))
    assert (small.shared_bytes, large.shared_bytes) == (4 * 8, 4 * 1024)


@pytest.mark.nvrtc
def test_with_defines_changes_only_the_defines_named():
    source = r"""extern "C" __global__ void sized(float* out) {
        __shared__ float tile[TILE * WIDTH];
        tile[threadIdx.x % (TILE * WIDTH)] = out[threadIdx.x];
        __syncthreads();
        out[threadIdx.x] = tile[(threadIdx.x + 1) % (TILE * WIDTH)];
    }"""
    kernel = CudaKernel(source, "sized", defines={"TILE": 8, "WIDTH": 2}, options=("-DUNUSED=1",))
    wider = kernel.with_defines(TILE=32)
    assert wider.defines == {"TILE": 32, "WIDTH": 2} and kernel.defines == {"TILE": 8, "WIDTH": 2}
    assert "-DUNUSED=1" in wider.options and wider.origin == kernel.origin
    assert [compile_report(k, "sm_86")[0].shared_bytes for k in (kernel, wider)] == [4 * 16, 4 * 64]


# A warpgroup fence: an instruction of sm_90a, Hopper's architecture-specific target, which sm_90 does not have
FENCED_SOURCE = r"""extern "C" __global__ void fenced(float* out) {
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    out[threadIdx.x] = 1.0f;
}"""


@pytest.mark.nvrtc
def test_an_arch_specific_kernel_is_built_for_sm_90a_and_for_nothing_older():
    with pytest.raises(KernelCompileError, match="wgmma"):  # as a plain kernel, sm_90 lacks the instruction
        compile_report(CudaKernel(FENCED_SOURCE, "fenced"), "sm_90")
    kernel = CudaKernel(FENCED_SOURCE, "fenced", arch_specific=True)
    (report,) = compile_report(kernel, "sm_90")
    assert report.arch == "sm_90a" and report.name == "fenced"
    assert kernel.with_defines(UNUSED=1).program.arch_specific
    with pytest.raises(KernelCompileError, match="has no build for sm_86"):
        compile_report(kernel, "sm_86")
    ptx, _ = compile_ptx(kernel.program, "sm_90")  # what a replay of its tape builds
    assert re.search(r"^\.target sm_90a$", ptx, re.MULTILINE)


def test_a_tape_keeps_whether_a_program_is_arch_specific():
    program = Program(FENCED_SOURCE, ("-DX=1",), arch_specific=True)
    tape = Tape(programs=[program])
    assert Tape.from_json(tape.to_json()).programs == [program]
    raw = json.loads(tape.to_json())
    del raw["programs"][0]["arch_specific"]  # a tape written before programs said so
    assert not Tape.from_json(json.dumps(raw)).programs[0].arch_specific


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


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 8, 9, 1000, 1024, 1025])
def test_power_of_two_at_least(n):
    power = power_of_two_at_least(n)
    assert power >= n and power & (power - 1) == 0 and (power == 1 or power // 2 < n)


def test_host_array_is_rejected_in_one_line():
    with pytest.raises(KernelArgumentError, match=r"^gelu_forward: out must be a CuPy array on the GPU, got ndarray$"):
        check_array("gelu_forward", "out", np.zeros(3, np.float32), 3)


def run_python(code: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd)


def test_a_process_runs_one_kernels_directory(tmp_path):
    (tmp_path / "kernels").mkdir()
    done = run_python(f"""
from gpt2kit.kernel_runtime.loader import use_kernels, KIT_KERNELS
from gpt2kit.kernel_runtime import KernelLoadError
assert use_kernels({str(tmp_path)!r}) == use_kernels({str(tmp_path / 'kernels')!r})
import gpt2kit.kernels
assert gpt2kit.kernels.__path__ == [{str(tmp_path / 'kernels')!r}]
try:
    use_kernels(None)
except KernelLoadError as err:
    print(err)
""")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (f"this process already runs the kernels in {tmp_path / 'kernels'}; "
                                   f"run {ROOT / 'kernels'} in a process of its own")


def test_a_bound_directory_is_the_only_one_its_modules_come_from(tmp_path):
    """gpt2kit's __path__ holds the checkout's top, where the kit's kernels/ is, and an editable install maps
    gpt2kit.kernels there too: with another directory bound, a module that directory lacks is missing, never the
    kit's."""
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "residual.py").write_text("MARK = 'bound'\n")
    done = run_python(f"""
from gpt2kit.kernel_runtime.loader import use_kernels
use_kernels({str(tmp_path)!r})
import gpt2kit.kernels.residual
print(gpt2kit.kernels.residual.MARK)
import gpt2kit.kernels.gelu
""")
    assert done.stdout.split() == ["bound"], done.stderr
    assert done.stderr.strip().splitlines()[-1] == "ModuleNotFoundError: No module named 'gpt2kit.kernels.gelu'"


def test_an_import_before_any_binding_binds_the_kit_s_own_through_the_loader(tmp_path):
    (tmp_path / "kernels").mkdir()
    done = run_python(f"""
import gpt2kit.kernels.gelu
from gpt2kit.kernel_runtime.loader import KIT_KERNELS, bound_directory, use_kernels
assert bound_directory() == KIT_KERNELS and gpt2kit.kernels.__file__ is None, "bound by a search"  # __init__ not run
use_kernels({str(tmp_path)!r})
""")
    assert done.stderr.strip().splitlines()[-1] == (
        f"gpt2kit.kernel_runtime.errors.KernelLoadError: this process already runs the kernels in {ROOT / 'kernels'}; "
        f"run {tmp_path / 'kernels'} in a process of its own")


def test_a_missing_kernels_directory_is_one_line(tmp_path):
    done = run_python("from gpt2kit.kernel_runtime.loader import use_kernels; "
                      f"use_kernels({str(tmp_path / 'nowhere')!r})")
    assert done.stderr.strip().splitlines()[-1] == (
        f"gpt2kit.kernel_runtime.errors.KernelLoadError: no kernels directory at {tmp_path / 'nowhere'}")


@needs_cupy
@pytest.mark.parametrize("operation, refusal", [
    (lambda xp: xp.matmul(1, 2), "computed with cupy.matmul"),
    (lambda xp: xp.exp(1.0), "computed with cupy.exp"),
    (lambda xp: xp.add.reduce(1), "computed with cupy.add.reduce"),
    (lambda xp: xp.sort(1), "computed with cupy.sort"),
    (lambda xp: xp.random.standard_normal(3), "computed with cupy.random.standard_normal"),
    (lambda xp: xp.linalg.norm(1), "computed with cupy.linalg.norm"),
    (lambda xp: xp.cuda.cublas.sgemm(0), "computed with cupy.cuda.cublas.sgemm"),
    (lambda xp: xp.cublas.gemm("N", "T", 1, 2), "computed with cupy.cublas.gemm (cuBLAS is allowed in the cuBLAS "
                                                "variant only)"),
    (lambda xp: xp.ElementwiseKernel("float32 x", "float32 y", "y = x", "k")(1), "computed with a cupy.ElementwiseKernel"),
    (lambda xp: xp.fuse(lambda x: x)(1), "computed with a cupy.fuse function"),
    (lambda xp: xp.ndarray.__matmul__(1, 2), "computed with cupy.ndarray.__matmul__"),
    (lambda xp: xp.asnumpy(1), "copied device data to the host (cupy.asnumpy)"),
    (lambda xp: xp.ndarray.get(1), "copied device data to the host (cupy.ndarray.get)"),
    (lambda xp: xp.cuda.runtime.memcpy(0, 0, 0, 2), "copied memory with cupy.cuda.runtime.memcpy"),
])
def test_the_watch_refuses_computing_by_name(operation, refusal):
    if "cublas" in refusal and not cublas_loads():
        pytest.skip("no cuBLAS in this install (an NVRTC-only one), so nothing of it to watch")
    with recording.record() as taped:
        with pytest.raises(recording.RefusedOperation, match=f"^{re.escape(refusal)}"):
            operation(cupy)
    assert taped.refused.startswith(refusal) and not taped.tape.launches


@needs_cupy
def test_a_recording_permits_only_the_libraries_it_knows():
    if not cublas_loads():
        pytest.skip("no cuBLAS in this install (an NVRTC-only one), so nothing of it to permit")
    with pytest.raises(ValueError, match=r"record\(\) cannot permit \['mkl'\]; it can permit \['cublas'\]"):
        with recording.record(permit=("mkl",)):
            pass
    with recording.record(permit=("cublas",)) as taped:  # permitted cuBLAS runs as CuPy's own (here: no GPU)
        with pytest.raises(Exception) as raised:
            cupy.cublas.gemm("N", "T", 1, 2)
    assert not isinstance(raised.value, recording.RefusedOperation) and taped.refused is None
    with recording.record(permit=("cublas",)) as taped:  # the pointer-level bindings stay refused
        with pytest.raises(recording.RefusedOperation, match="^computed with cupy.cuda.cublas.sgemm"):
            cupy.cuda.cublas.sgemm(0)


@needs_cupy
def test_a_refusal_caught_by_the_caller_stays_on_the_recording():
    with recording.record() as taped:
        try:
            cupy.matmul(1, 2)
        except recording.RefusedOperation:
            pass
    assert taped.refused == "computed with cupy.matmul"


@needs_cupy
def test_outside_a_recording_cupy_is_itself():
    recording.install()
    assert cupy.get_array_module(np.zeros(1)) is np
    with pytest.raises(TypeError):  # CuPy's own complaint, not a refusal
        cupy.matmul(np.zeros((2, 2)), np.zeros((2, 2)))


def test_programs_in_finds_every_kind_of_kernel_a_module_keeps():
    source = 'extern "C" __global__ void k(float* x) { x[0] = TILE; }'
    alone = CudaKernel(source, "k", defines={"TILE": 1})
    several = tuple(alone.with_defines(TILE=n) for n in (2, 4))
    module = types.SimpleNamespace(alone=alone, several=several, listed=[alone.with_defines(TILE=8)],
                                   by_name={"k": alone.with_defines(TILE=16)}, again=alone, other=(1, "k"),
                                   held=types.SimpleNamespace(kernel=alone.with_defines(TILE=32)),
                                   nested=[[alone.with_defines(TILE=64)]])  # too deep to be seen
    found = [p.program.options for p in programs_in(module)]
    assert found == [("-DTILE=1",), ("-DTILE=2",), ("-DTILE=4",), ("-DTILE=8",), ("-DTILE=16",), ("-DTILE=32",)]
    lazy = types.SimpleNamespace(SOURCE=source.replace("TILE", "1"), name="k")  # its kernels made when first called
    assert [(p.program.source, p.as_written) for p in programs_in(lazy)] == [(lazy.SOURCE, True)]


@pytest.mark.nvrtc
def test_programs_in_finds_cupy_s_own_kernels():
    source = 'extern "C" __global__ void k(float* x) { x[0] = TILE; }'
    raw = types.SimpleNamespace(kernel=cupy.RawKernel(source, "k", options=("-DTILE=3",)),
                                module=cupy.RawModule(code=source, options=("-DTILE=5",)))
    assert [p.program.options for p in programs_in(raw)] == [("-DTILE=3",), ("-DTILE=5",)]


@pytest.mark.nvrtc
def test_a_kernel_that_waits_for_the_previous_compiles_on_both_architectures_and_reports_its_lines(tmp_path):
    from gpt2kit.kernel_runtime.compiler import compile_ptx

    source = r"""extern "C" __global__ void copy(float* y, const float* x) {
        let_next_kernel_start();
        wait_for_previous_kernel();
        y[threadIdx.x] = x[threadIdx.x];
    }"""
    kernel = CudaKernel(source, "copy")
    assert kernel.waits_for_previous and not CudaKernel(source.replace("wait_for", "no_wait_for"), "copy").waits_for_previous
    assert "griddepcontrol.wait" in compile_ptx(kernel.program, "sm_90")[0]
    assert "griddepcontrol" not in compile_ptx(kernel.program, "sm_86")[0]  # nothing to wait for before sm_90
    path = tmp_path / "waiting_kernel.py"
    path.write_text(BROKEN_MODULE.replace("void broken(float* out) {", "void broken(float* out) {  // wait_for_previous_kernel()"))
    with pytest.raises(KernelCompileError, match=r"waiting_kernel\.py:5: error"):
        compile_report(import_file(path, "waiting_kernel").broken, "sm_86")


@pytest.mark.parametrize("waits, cooperative, overlapped", [(True, False, True), (False, False, False),
                                                          (True, True, False)])
def test_a_replayed_kernel_overlaps_the_previous_one_exactly_where_the_kit_s_own_launch_would(
        monkeypatch, waits, cooperative, overlapped):
    """A tape's kernel whose source waits for the previous kernel is launched overlapped by its replay, as CudaKernel
    launches it (inside a captured graph on sm_90: stood in for here); one that does not wait, or a cooperative one,
    is launched as it was taped."""
    from gpt2kit.kernel_runtime import overlap, replay
    from gpt2kit.kernel_runtime import tape as tapes

    body = "wait_for_previous_kernel(); y[0] = 1.0f;" if waits else "y[0] = 1.0f;"
    source = overlap.PRELUDE * waits + f'extern "C" __global__ void one(float* y, int n) {{ {body} }}'
    tape = tapes.Tape(buffers=[tapes.Buffer(64, "y")], programs=[tapes.Program(source, cooperative=cooperative)],
                      steps=[tapes.Launch(0, "one", (2, 1, 1), (32, 1, 1), 0,
                                          (tapes.Pointer(0, 16), tapes.Scalar.of(np.int32(7))))])
    launched = []
    ordinary = lambda grid, block, args, **options: launched.append(("ordinary", None, grid, args))  # noqa: E731
    monkeypatch.setattr(overlap, "launches_overlapped", lambda: True)
    monkeypatch.setattr(overlap, "launch", lambda kernel, grid, block, args, shared_mem=0: launched.append(
        ("overlapped", kernel, grid, args)))
    prepared = replay.PreparedTape(tape, lambda program: lambda name: _Callable(1234, ordinary))
    y = types.SimpleNamespace(data=types.SimpleNamespace(ptr=4096), nbytes=64)
    prepared.run({"y": y})
    (kind, kernel, grid, arguments), = launched
    assert kind == ("overlapped" if overlapped else "ordinary") and grid == (2, 1, 1)
    assert [int(a) for a in arguments] == [4096 + 16, 7]  # the call's array at the taped offset, the taped scalar
    assert kernel == (1234 if overlapped else None)  # the loaded function's handle


class _Callable:
    """A loaded kernel function as replay holds one: its handle, and a call that launches it."""

    def __init__(self, ptr: int, call):
        self.ptr, self._call = ptr, call

    def __call__(self, *args, **options):
        self._call(*args, **options)


def test_an_address_where_one_buffer_ends_and_the_next_begins_is_the_next_one_s():
    from gpt2kit.kernel_runtime.tape import Pointer

    taping = recording.Recording(frozenset(), {})
    taping.add_buffer(1000, 512, "out")
    taping.add_buffer(488, 512, "inp")  # inp ends where out begins, as a memory pool lays them out
    assert taping.find(1000) == Pointer(0, 0)
    assert taping.find(999) == Pointer(1, 511)
    assert taping.find(1512) == Pointer(0, 512)  # just past out's end: an empty view there
    assert taping.find(2000) is None


def test_kept_arrays_that_touch_are_each_a_buffer_of_their_own_memory():
    """Arrays a call kept from before (a cache of scratch), laid end to end by the pool: the second is not the
    first one's past-the-end, or a replay would put it outside the first's buffer."""
    from gpt2kit.kernel_runtime.tape import Buffer, Pointer

    def kept(ptr, nbytes, memory_size):  # what a recording reads of a CuPy array: its address, size and memory
        return types.SimpleNamespace(data=types.SimpleNamespace(ptr=ptr, mem=types.SimpleNamespace(
            ptr=ptr, size=memory_size)), nbytes=nbytes)

    taping = recording.Recording(frozenset(), {})
    assert taping.pointer_to(kept(1000, 4, 512)) == Pointer(0, 0)
    assert taping.pointer_to(kept(1512, 8, 512)) == Pointer(1, 0)
    assert taping.pointer_to(kept(2024, 0, 512)) == Pointer(1, 512)  # an empty view there: nothing to read
    assert taping.tape.buffers == [Buffer(512, kept=True), Buffer(512, kept=True)]


def test_arrays_that_touch_are_each_a_buffer_and_an_in_place_one_is_one():
    class Array:  # what a recording reads of a CuPy array: its address and size
        def __init__(self, ptr, nbytes):
            self.data, self.nbytes = types.SimpleNamespace(ptr=ptr), nbytes

    out = Array(1000, 512)
    arguments = {"out": out, "inp": Array(1512, 512), "also_out": out, "N": 128}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(recording, "_is_device_array", lambda value: isinstance(value, Array))
        taping = recording.Recording(frozenset(), arguments)
    assert [b.name for b in taping.tape.buffers] == ["out", "inp"] and taping.tape.scalars == {"N": 128}


def test_a_ctrl_c_that_raised_nothing_ends_the_command_at_its_next_step(capsys):
    """What Python's C handler does on a Ctrl-C that NumPy then swallows: it writes the signal's number to the
    wakeup descriptor and no KeyboardInterrupt follows. The command's next raise_lost_interrupt() raises it."""
    import os
    import signal

    from gpt2kit.kernel_runtime.commands import raise_lost_interrupt, run_command

    steps = []

    def body():
        wakeup = signal.set_wakeup_fd(-1)
        signal.set_wakeup_fd(wakeup)
        raise_lost_interrupt()  # nothing received yet
        steps.append("first")
        os.write(wakeup, bytes([signal.SIGUSR1]))  # another signal is not a Ctrl-C
        raise_lost_interrupt()
        steps.append("second")
        os.write(wakeup, bytes([signal.SIGINT]))
        raise_lost_interrupt()
        steps.append("third")

    assert run_command("test", body) == 130 and steps == ["first", "second"]
    assert capsys.readouterr().err == "\n" and signal.set_wakeup_fd(-1) == -1  # the command put back what it found
    raise_lost_interrupt()  # outside a command: nothing to read, nothing raised


def test_a_watched_raw_module_function_takes_its_settings_itself():
    # a RawModule's function reaches its author through a taping wrapper: a setting made on it, such as the
    # dynamic shared memory cap, must be the function's own, or the launch that needs it fails
    class Function:
        max_dynamic_shared_size_bytes = 48 * 1024

    function = Function()
    taped = recording._TapedFunction(function, module=None, name="through_shared")
    taped.max_dynamic_shared_size_bytes = 100 * 1024
    assert function.max_dynamic_shared_size_bytes == taped.max_dynamic_shared_size_bytes == 100 * 1024


@pytest.mark.parametrize("capability, supported, arch", [("86", [80, 86, 90], "sm_86"), ("90", [86, 90, 100], "sm_90"),
                                                         ("100", [90, 100, 120], "sm_100"), ("120", [86, 90], "sm_90")])
def test_the_device_architecture_reads_capabilities_of_three_digits_and_is_capped_by_nvrtc(
        monkeypatch, capability, supported, arch):
    from gpt2kit.kernel_runtime import compiler

    class Device:
        def __init__(self, device=0):
            self.id, self.compute_capability = device, capability  # as CuPy gives it: a string, "90" for 9.0

    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(Device=Device, nvrtc=types.SimpleNamespace(
        getSupportedArchs=lambda: supported)))
    monkeypatch.setattr(compiler, "cupy", fake)
    compiler._arch_of.cache_clear()
    try:
        assert compiler.device_arch() == arch
    finally:
        compiler._arch_of.cache_clear()
