"""The kit's ground floor: compiling and launching CUDA kernels, checking a host
function's arguments, knowing whether a GPU is here, and recording a call.

A kernel module imports what it needs from here, and nothing else of the kit:

    from gpt2kit.kernel_runtime import CudaKernel, ceil_div, check_array, check_dims

* compiler:  CudaKernel (NVRTC through CuPy, cached; errors point at the .py line), device_arch,
             compile_report (registers and spills for sm_86/sm_90, no GPU needed)
* overlap:   a kernel that calls wait_for_previous_kernel() overlaps the one before it
             in a captured graph (sm_90 and later)
* arguments: check_array, check_rows, check_dims, ceil_div
* device:    gpu_unavailable_reason, nvrtc_unavailable_reason, require_gpu, exit_without_gpu,
             multiprocessor_count, threads_per_multiprocessor, l2_cache_bytes,
             shared_bytes_per_block, shared_bytes_per_multiprocessor,
             captured (launches captured as a CUDA graph)
* loader:    use_kernels, the one kernels directory a process runs
* commands:  OneLineArgumentParser: a command-line mistake is one line, status 2
* recording: record, the tape of a call's own launches, and the refusal of the rest
* stubs:     holds_stub, function_holds_stub: whether a kernels file, or a host function
             of it, is still a starter kit's TODO stub
* files:     replacing, how every file the kit writes appears whole or not at all
* errors:    KitError and its kinds: what a user can act on, printed as one line

Nothing here imports kernels/, reference/, gpt2/ or grading/: they stand on it.
"""

from gpt2kit.kernel_runtime.arguments import ceil_div, check_array, check_dims, check_rows, power_of_two_at_least
from gpt2kit.kernel_runtime.compiler import CudaKernel, device_arch
from gpt2kit.kernel_runtime.device import (gpu_unavailable_reason, l2_cache_bytes, multiprocessor_count, require_gpu,
                                           shared_bytes_per_block, shared_bytes_per_multiprocessor,
                                           threads_per_multiprocessor)
from gpt2kit.kernel_runtime.errors import (GPUUnavailableError, KernelArgumentError, KernelCompileError,
                                           KernelLoadError, KitError)

__all__ = [
    "CudaKernel", "GPUUnavailableError", "KernelArgumentError", "KernelCompileError", "KernelLoadError", "KitError",
    "ceil_div", "check_array", "check_dims", "check_rows", "device_arch", "gpu_unavailable_reason", "l2_cache_bytes",
    "multiprocessor_count", "power_of_two_at_least", "require_gpu", "shared_bytes_per_block",
    "shared_bytes_per_multiprocessor", "threads_per_multiprocessor",
]
