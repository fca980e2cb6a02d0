"""Cheat: loads the float64 oracle by its file path, reads the inputs through raw memory
pointers, computes the answer on the host, uploads it and copies it into the outputs
with a kernel of its own. Nothing it does is refused on the way: only replaying its
kernel launches on other inputs shows that they do not compute anything."""

import importlib.util
from pathlib import Path

import numpy as np

from gpt2kit import reference
from tests.kernels.wrong import copy_into

FUNCTION = "layernorm_forward"
ORACLE = Path(reference.__file__).resolve().parent / "cpu.py"  # beside the package, wherever the kit is


def on_host(array) -> np.ndarray:
    host = np.empty(array.shape, array.dtype)
    array.data.copy_to_host(host.ctypes.data, array.nbytes)
    return host


def layernorm_forward(out, mean, rstd, inp, weight, bias, B, T, C):
    import cupy

    spec = importlib.util.spec_from_file_location("oracle_by_path", ORACLE)
    oracle = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(oracle)
    answers = [np.empty(a.shape, np.float32) for a in (out, mean, rstd)]
    oracle.layernorm_forward(*answers, on_host(inp), on_host(weight), on_host(bias), B, T, C)
    for target, answer in zip((out, mean, rstd), answers):
        copy_into(target, cupy.asarray(answer))
