"""Where the model's host functions come from: a backend is an array module plus the
functions of model_runtime.ops.ForwardOps (and, for training, of TrainingOps; for
Wav2Vec2, of SpeechOps, each one where the backend's module has it, else None).

* kernels:   the kernels directory this process runs (this kit's kernels/, or another
             one: `kernels=` binds it, see kernel_runtime.loader), on the GPU; with
             `variants=("matmul_tf32",)` a milestone variant's module stands in for
             its host function (reference.variants), e.g. the TF32 tensor-core matmul.
             With the attention_flash variant the backend's flash_attention is set,
             and the model runs flash attention in attention_forward's place. With
             all three fused-matmul variants (reference.variants.FUSED_DECODE_VARIANTS)
             fused_decode is set, and the model's decode step calls them (some of
             them without the others is refused: they would run nowhere).
* gold:      reference/gold.py, CuPy library operations, on the GPU.
* reference: reference/cpu.py, NumPy in float64 on the CPU; works without a GPU.

Every backend offers the same host functions with the same signatures, so the model
is written once.
"""

from __future__ import annotations

import dataclasses
import functools
import types

import numpy as np

from gpt2kit.model_runtime.ops import (FUSED_DECODE_FUNCTIONS, KV_CACHE_FUNCTIONS, MODEL_FUNCTIONS, OPTIONAL_FUNCTIONS,
                                       SPEECH_FUNCTIONS, TRAINING_FUNCTIONS, ForwardOps)
from gpt2kit.kernel_runtime import KitError, require_gpu
from gpt2kit.kernel_runtime.loader import use_kernels
from gpt2kit.reference.registry import SPECS, host_function, host_functions, not_written_yet
from gpt2kit.reference.variants import FUSED_DECODE_VARIANTS, variant_named

BACKENDS = ("kernels", "gold", "reference")


class BackendError(KitError):
    """A backend that does not exist, or options it does not take."""


@dataclasses.dataclass
class Backend:
    name: str
    xp: types.ModuleType          # numpy or cupy
    activation_dtype: type
    ops: ForwardOps
    flash_attention: bool = False  # the model calls ops.flash_attention_forward, not ops.attention_forward
    fused_decode: bool = False     # a decode step calls the fused matmuls (model_runtime.ops.FUSED_DECODE_FUNCTIONS)

    def upload(self, array):
        """An array (host, or already on the device) on the backend's device; a float one in the activations'
        dtype (the reference backend's weights in float64 once, rather than at every call). An array already
        there in that dtype is used as it is, not copied."""
        dtype = array.dtype if hasattr(array, "dtype") else np.asarray(array).dtype
        floating = np.issubdtype(dtype, np.floating)
        return self.xp.asarray(array, dtype=self.activation_dtype if floating else None)

    def to_host(self, array) -> np.ndarray:
        return array.get() if hasattr(array, "get") else np.asarray(array)

    def empty(self, *shape):
        return self.xp.empty(shape, dtype=self.activation_dtype)

    def gather_rows(self, out, src, index) -> None:
        """Row r of out (rows along its last axis) = row index[r] of src (as wide), or zeros where index[r] is -1;
        index (int32, on the device) has one entry per row of out. How a batch's valid frames are packed into
        rows and back (wav2vec2.model)."""
        width = out.shape[-1]
        if self.xp is np:
            picked = src.reshape(-1, width)[np.maximum(index, 0)]
            out.reshape(-1, width)[...] = np.where((index >= 0)[:, None], picked, 0)
        else:
            _row_gather()(src, index, np.int32(width), out)


def make_backend(name: str, kernels: str | None = None, variants: tuple[str, ...] = ()) -> Backend:
    """A backend by name; `kernels` is a kernels/ directory for the kernels backend, `variants` the
    milestone variants whose modules stand in for their host functions."""
    if name not in BACKENDS:
        raise BackendError(f"unknown backend {name!r} (choose from {', '.join(BACKENDS)})")
    if (kernels is not None or variants) and name != "kernels":
        raise BackendError(f"a kernels directory or a variant only applies to the kernels backend, not {name!r}")
    check_fused_decode_set(variants)
    if name == "reference":
        from gpt2kit.reference import cpu
        return Backend(name, np, np.float64, _namespace(cpu))
    require_gpu()
    import cupy

    if name == "gold":
        from gpt2kit.reference import gold
        return Backend(name, cupy, np.float32, _namespace(gold))
    return Backend(name, cupy, np.float32, kernel_ops(kernels, variants), flash_attention=uses_flash(variants),
                   fused_decode=uses_fused_decode(variants))


def uses_flash(variants: tuple[str, ...]) -> bool:
    """Whether one of `variants` is a flash attention: the model then calls flash_attention_forward."""
    return any(variant_named(name).function == "flash_attention_forward" for name in variants)


def uses_fused_decode(variants: tuple[str, ...]) -> bool:
    """Whether `variants` hold every fused matmul: the model's decode step then calls them."""
    return set(FUSED_DECODE_FUNCTIONS) <= {variant_named(name).function for name in variants}


def check_fused_decode_set(variants: tuple[str, ...]) -> None:
    """BackendError when `variants` name some of the fused matmuls but not all: the decode step calls them as one
    set (uses_fused_decode), so a part of it would run nowhere."""
    given = [name for name in variants if variant_named(name).function in FUSED_DECODE_FUNCTIONS]
    if given and not uses_fused_decode(variants):
        named = {variant_named(name).function for name in given}
        missing = [name for name in FUSED_DECODE_VARIANTS if variant_named(name).function not in named]
        raise BackendError(f"variants {', '.join(given)}: the decode step calls the fused matmuls all together or "
                           f"not at all: name {' and '.join(missing)} too, or none of the three")


def kernel_ops(kernels: str | None = None, variants: tuple[str, ...] = ()) -> ForwardOps:
    """The model's host functions from a kernels directory (None: this kit's), bound for this process;
    each of `variants` (names in reference.variants) stands in for its host function. BackendError, naming
    them, while any of those is a starter kit's TODO stub (the KV cache's aside: generation.decoding then
    recomputes)."""
    directory = use_kernels(kernels)
    ops = host_functions(MODEL_FUNCTIONS)
    # a later milestone's, or Wav2Vec2's, when this kernels directory has it
    for name in OPTIONAL_FUNCTIONS + TRAINING_FUNCTIONS + SPEECH_FUNCTIONS:
        if name in SPECS and (directory / f"{SPECS[name].module}.py").exists():
            setattr(ops, name, host_function(name))
    chosen = [variant_named(name) for name in variants]
    functions = [v.function for v in chosen]
    if len(set(functions)) < len(functions):
        raise BackendError(f"variants {', '.join(variants)}: at most one per host function")
    stubs = [not_written_yet([name for name in MODEL_FUNCTIONS if name not in KV_CACHE_FUNCTIONS + tuple(functions)]),
             *(not_written_yet([v.function], v.module) for v in chosen)]
    if any(stubs):  # a starter kit's TODO stubs write nothing: the model would compute with garbage
        raise BackendError(f"{'; '.join(filter(None, stubs))}: the kernels backend runs them (write them first, "
                           "or choose the gold or reference backend)")
    for variant in chosen:
        setattr(ops, variant.function, host_function(variant.function, variant.module))
    return ops


@functools.cache
def _row_gather():
    """Backend.gather_rows on the GPU: one thread an element of out."""
    import cupy

    return cupy.ElementwiseKernel(
        "raw T src, raw int32 index, int32 width", "T out",
        "const int row = index[i / width]; out = row < 0 ? T(0) : src[(long long)row * width + i % width];",
        "gather_rows")


def _namespace(module) -> ForwardOps:
    names = MODEL_FUNCTIONS + OPTIONAL_FUNCTIONS + TRAINING_FUNCTIONS
    speech = {name: getattr(module, name, None) for name in SPEECH_FUNCTIONS}  # reference.cpu's all; gold's, those it has
    return types.SimpleNamespace(**{name: getattr(module, name) for name in names}, **speech)
