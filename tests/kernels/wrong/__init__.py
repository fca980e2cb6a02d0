"""Known-wrong implementations and cheats: each must be rejected by the kernel tests and the grader.

One file per mistake students make, and per shortcut they might take. Each sets
FUNCTION (the host function whose cases judge it) and defines that host function
with the bug. Several are mutants: the kit's own solution source with one line
changed (`mutate` fails loudly if that line is ever rewritten, so a mutant cannot
silently turn back into the solution). The cheat_* files launch a kernel that does
nothing, to look busy, and then compute the answer some other way.
test_known_wrong.py runs every case of FUNCTION on each and expects at least one to fail.
"""

import importlib
import pkgutil

import numpy as np

from gpt2kit.kernel_runtime import CudaKernel, ceil_div


def mutate(source: str, old: str, new: str) -> str:
    if source.count(old) != 1:
        raise ValueError(f"mutation target {old!r} must occur exactly once in the source")
    return source.replace(old, new)


def names() -> list[str]:
    """The module name of every known-wrong implementation here, without importing any (the leaderboard's
    cheats, in the package `leaderboard`, are not: no kernel test case can reject them)."""
    return sorted(info.name for info in pkgutil.iter_modules(__path__) if not info.ispkg)


def load(name: str):
    return importlib.import_module(f"{__name__}.{name}")


COPY_SOURCE = r"""
extern "C" __global__ void nothing() {}

extern "C" __global__ void copy_floats(float* out, const float* inp, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = inp[i];
}
"""
nothing = CudaKernel(COPY_SOURCE, "nothing")
copy_floats = CudaKernel(COPY_SOURCE, "copy_floats")


def launch_nothing() -> None:
    """A kernel launch that does no work: what a cheat shows to look like a kernel of its own."""
    nothing((1,), (1,), ())


def copy_into(out, inp) -> None:
    """out[...] = inp, as a kernel launch (both float32 device arrays of one size)."""
    copy_floats((ceil_div(out.size, 256),), (256,), (out, inp, np.int64(out.size)))
