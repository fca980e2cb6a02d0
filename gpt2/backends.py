"""Where the model's kernels come from: a backend is an array module plus host functions.

* kernels:   this repo's kernels/ (or a kernels/ directory a student or grader points
             to) on the GPU. The KV-cache decoding kernels always come from this
             repo's kernels/decode.py, which students do not write.
* gold:      reference/gold.py, CuPy library operations, on the GPU.
* reference: reference/cpu.py, NumPy in float64 on the CPU; works without a GPU.

Every backend offers the same host functions with the same signatures, so the model
is written once.
"""

from __future__ import annotations

import dataclasses
import types

import numpy as np

from gpt2.cuda import load_kernel_package, require_gpu

BACKENDS = ("kernels", "gold", "reference")


@dataclasses.dataclass
class Backend:
    name: str
    xp: types.ModuleType          # numpy or cupy
    activation_dtype: type
    ops: types.SimpleNamespace    # the host functions

    def upload(self, host_array: np.ndarray):
        return self.xp.asarray(host_array)

    def to_host(self, array) -> np.ndarray:
        return array.get() if hasattr(array, "get") else np.asarray(array)

    def empty(self, *shape):
        return self.xp.empty(shape, dtype=self.activation_dtype)


def make_backend(name: str, kernels: str | None = None) -> Backend:
    """A backend by name; `kernels` is a kernels/ directory for the kernels backend."""
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r} (choose from {', '.join(BACKENDS)})")
    if kernels is not None and name != "kernels":
        raise ValueError(f"a kernels directory only applies to the kernels backend, not {name!r}")
    if name == "reference":
        from reference import cpu
        return Backend(name, np, np.float64, _namespace(cpu))
    require_gpu()
    import cupy

    if name == "gold":
        from reference import gold
        return Backend(name, cupy, np.float32, _namespace(gold))
    from kernels import decode

    ops = vars(load_kernel_package(kernels)) | vars(_namespace(decode))
    return Backend(name, cupy, np.float32, types.SimpleNamespace(**ops))


def _namespace(module) -> types.SimpleNamespace:
    return types.SimpleNamespace(**{k: v for k, v in vars(module).items() if k.endswith("_forward")})
