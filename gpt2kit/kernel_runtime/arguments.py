"""Checks of a host function's arguments: a wrong one raises one KernelArgumentError line
naming the function, the argument and what was expected, never a CUDA crash later."""

from __future__ import annotations

import numpy as np

from gpt2kit.kernel_runtime.device import cupy
from gpt2kit.kernel_runtime.errors import KernelArgumentError


def check_array(function: str, name: str, array, size: int, dtype=np.float32) -> None:
    """`array` must be a C-contiguous CuPy array of `dtype` holding exactly `size` elements."""
    _check_kind(function, name, array, dtype)
    if array.size != size:
        raise KernelArgumentError(
            f"{function}: {name} has {array.size} elements (shape {array.shape}), expected {size}")


def check_rows(function: str, name: str, array, columns: int, dtype=np.float32) -> int:
    """`array` must be a C-contiguous CuPy matrix with `columns` columns; returns its rows."""
    _check_kind(function, name, array, dtype)
    if array.size == 0 or array.size % columns:
        raise KernelArgumentError(
            f"{function}: {name} (shape {array.shape}) is not a matrix of {columns} columns")
    return array.size // columns


def _check_kind(function: str, name: str, array, dtype) -> None:
    if cupy is None or not isinstance(array, cupy.ndarray):
        raise KernelArgumentError(
            f"{function}: {name} must be a CuPy array on the GPU, got {type(array).__name__}")
    if array.dtype != np.dtype(dtype):
        raise KernelArgumentError(
            f"{function}: {name} must have dtype {np.dtype(dtype).name}, got {array.dtype.name}")
    if not array.flags.c_contiguous:
        raise KernelArgumentError(f"{function}: {name} must be C-contiguous (use cupy.ascontiguousarray)")


def check_dims(function: str, **dims: int) -> None:
    """Every size argument must be a positive Python or NumPy integer."""
    for name, value in dims.items():
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise KernelArgumentError(f"{function}: {name} must be a positive integer, got {value!r}")


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def power_of_two_at_least(n: int) -> int:
    """The least power of two >= n (n >= 1): the sizes a kernel compiled per launch is compiled for."""
    return 1 << (n - 1).bit_length()
