"""The kit's own kernels, written the way CuPy teaches: submissions that must score as the kit's do.

`cupy_style_submission(directory, style)` copies the kit's kernels/ and gives every
module, in CudaKernel's place, a small class of the submission's own
(kernels/cupy_kernel.py) that compiles and launches through plain CuPy:

    at_import     a cupy.RawKernel made when the module is imported
    lazily        a cupy.RawKernel made at the first launch, kept in a module-level dict
    raw_module    a cupy.RawModule made at the first launch, its function fetched by name
    streamed      a cupy.RawModule with name_expressions, compiled with --use_fast_math, each launch
                  made from a thread of its own on a stream of the submission's (FAST_MATH_ITEMS:
                  the items whose bounds fast math's arithmetic stays within)

No kernel_runtime.CudaKernel is left in the submission, so the grader, the kernel
tests and the technique checks see only what CuPy's own classes launched.
"""

import re
import shutil
from pathlib import Path

ROOT = Path(__file__).parents[2]
STYLES = ("at_import", "lazily", "raw_module")
FAST_MATH_ITEMS = ("encoder", "matmul", "residual")

COMMON = '''"""CudaKernel's interface on plain CuPy ({style})."""

import threading

import cupy

from gpt2kit.kernel_runtime import overlap


def code_of(source):
    """The source with the two overlap functions it may call (gpt2kit/kernel_runtime/overlap.py) defined first."""
    return overlap.PRELUDE + source if overlap.waits_for_previous(source) else source


def options_of(defines, options):
    return tuple(f"-D{{key}}={{value}}" for key, value in defines.items()) + tuple(options)


def opted_in(kernel, shared_mem):
    """kernel (a cupy.RawKernel), opted in to shared_mem bytes of dynamic shared memory where that is past its cap."""
    if shared_mem > kernel.max_dynamic_shared_size_bytes:
        kernel.max_dynamic_shared_size_bytes = shared_mem
    return kernel


class CudaKernel:
    def __init__(self, source, name, *, defines=None, options=(), arch_specific=False):
        self.source, self.name, self.defines, self.extra = source, name, dict(defines or {{}}), tuple(options)
        if arch_specific:  # Hopper's architecture-specific target, as CuPy is told it
            self.extra += ("-arch=sm_90a",)
        self.setup()

    def with_defines(self, **changes):
        return CudaKernel(self.source, self.name, defines={{**self.defines, **changes}}, options=self.extra)
'''

STYLE_CODE = {
    "at_import": '''
    def setup(self):
        self.kernel = cupy.RawKernel(code_of(self.source), self.name, options=options_of(self.defines, self.extra))

    def __call__(self, grid, block, args, shared_mem=0):
        opted_in(self.kernel, shared_mem)(grid, block, args, shared_mem=shared_mem)
''',
    "lazily": '''
    def setup(self):
        pass

    def __call__(self, grid, block, args, shared_mem=0):
        key = (self.source, self.name, options_of(self.defines, self.extra))
        if key not in COMPILED:
            COMPILED[key] = cupy.RawKernel(code_of(self.source), self.name, options=key[2])
        opted_in(COMPILED[key], shared_mem)(grid, block, args, shared_mem=shared_mem)


COMPILED = {}
''',
    "raw_module": '''
    def setup(self):
        self.function = None

    def __call__(self, grid, block, args, shared_mem=0):
        if self.function is None:
            module = cupy.RawModule(code=code_of(self.source), options=options_of(self.defines, self.extra))
            self.function = module.get_function(self.name)
        opted_in(self.function, shared_mem)(grid, block, args, shared_mem=shared_mem)
''',
    "streamed": '''
    def setup(self):
        self.function = None

    def __call__(self, grid, block, args, shared_mem=0):
        if self.function is None:
            module = cupy.RawModule(code=code_of(self.source), name_expressions=[self.name],
                                    options=options_of(self.defines, self.extra) + ("--use_fast_math",))
            self.function = module.get_function(self.name)

        def launch():
            with STREAM:
                opted_in(self.function, shared_mem)(grid, block, args, shared_mem=shared_mem)

        thread = threading.Thread(target=launch)
        thread.start()
        thread.join()
        STREAM.synchronize()


STREAM = cupy.cuda.Stream()  # ordered after the default stream's fills, as CuPy's streams are by default
''',
}

IMPORT = re.compile(r"^from gpt2kit.kernel_runtime import (\(?)CudaKernel, ", re.MULTILINE)


def cupy_style_submission(directory: Path, style: str) -> Path:
    """A copy of the kit's kernels in `directory`/kernels, every kernel made through plain CuPy in `style`."""
    kernels = directory / "kernels"
    shutil.copytree(ROOT / "kernels", kernels)
    (kernels / "cupy_kernel.py").write_text(COMMON.format(style=style) + STYLE_CODE[style])
    for path in kernels.glob("*.py"):
        text = path.read_text()
        changed = IMPORT.sub(r"from gpt2kit.kernels.cupy_kernel import CudaKernel\n"
                             r"from gpt2kit.kernel_runtime import \1", text)
        if changed != text:
            path.write_text(changed)
    return directory
