"""Recording one call of a host function: its tape (kernel_runtime.tape), and nothing computed elsewhere.

The tests and the grader's worker run every call of a host function inside
`record(arguments=...)`, which names the call's arrays. While it runs:

* each launch of a kernel of the caller's own (a CudaKernel, or a function of a
  cupy.RawKernel or cupy.RawModule, made at import or later) is taped as data: its
  program (source, options, name expressions), grid, block, shared memory, and each
  argument as a Pointer into a buffer (one of the named arrays, memory the call
  allocated, or an array it brought from elsewhere) or a typed Scalar. An integer
  argument that points into device memory but into no buffer of the call (a raw
  pointer to memory it was not given and did not allocate) is refused;
* allocating, filling with a constant (cupy.zeros, cupy.full, x.fill(0), x[...] = 0,
  cudaMemset) and copying host data to the GPU (cupy.asarray of a NumPy array,
  x.set(...)) are allowed, and taped as Writes with their bytes;
* a CuPy operation that computes (ufuncs and operators, elementwise and reduction
  kernels, cupy.matmul and cuBLAS, sorting, random numbers, fused functions, copies
  of device data) or that copies device data to the host is refused: it raises
  RefusedOperation naming itself ("computed with cupy.matmul"), and the refusal stays
  on the recording even if the caller catches the error;
* except cuBLAS through `cupy.cublas` (gemm, gemv, ...: CuPy's array-level bindings)
  when the recording permits it, `record(permit=("cublas",))`, as milestone 2's
  cuBLAS variant needs: each such call is taped as a Library step, its arrays as
  regions of buffers. The pointer-level `cupy.cuda.cublas` stays refused.

The tape is all that leaves the recording: replayed on other inputs
(kernel_runtime.replay), by this process or by the grader's own, it gives their
answers only if the call's own kernels compute them. Whatever the call did that is not
on the tape (a library the refusals do not know, NumPy after a copy they missed,
PyTorch, a launch that bypassed CuPy) does not happen in a replay.

`install()` puts the watch into CuPy, once per process, before the code under test is
imported (so that its `cupy.RawKernel` is the taping one); `record()` installs it too.
Outside `record()` every watched operation behaves exactly as CuPy's own.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import types
from typing import Iterator, NoReturn

import numpy as np

from gpt2kit.kernel_runtime import tape as tapes
from gpt2kit.kernel_runtime.device import cupy
from gpt2kit.kernel_runtime.errors import KitError


class RefusedOperation(KitError):
    """A call under recording did work that only its own kernels may do."""


LIBRARIES = {"cublas": "cupy.cublas"}  # what a recording may permit -> the namespace it opens


class Recording:
    """The tape of the call in progress, with the device memory its buffers are, and the first refusal."""

    def __init__(self, permitted: frozenset, arguments: dict):
        self.tape = tapes.Tape(scalars={k: tapes.plain(v) for k, v in arguments.items() if not _is_device_array(v)})
        self.refused: str | None = None  # the first refused operation
        self.permitted = permitted       # names in LIBRARIES
        self._extents: list[tuple[int, int]] = []  # (device address, bytes) of each buffer
        self._programs: dict[tapes.Program, int] = {}
        for name, array in arguments.items():
            if _is_device_array(array) and (array.data.ptr, array.nbytes) not in self._extents:  # once if in place
                self.add_buffer(array.data.ptr, array.nbytes, name)

    # ----------------------------------------------------------------------- buffers

    def add_buffer(self, address: int, nbytes: int, name: str | None = None, kept: bool = False) -> int:
        self._extents.append((address, nbytes))
        self.tape.buffers.append(tapes.Buffer(nbytes, name, kept))
        return len(self._extents) - 1

    def allocated(self, address: int, nbytes: int) -> None:
        """Memory the call allocated: scratch, newest first when an address is found again."""
        self.add_buffer(address, nbytes)

    def find(self, address: int, may_be_empty: bool = True) -> tapes.Pointer | None:
        """The buffer holding `address` (the newest, where freed memory was allocated again), or None. Where the
        memory there `may_be_empty` (an empty view, a raw pointer), an address just past a buffer's end counts
        too, but only where no buffer holds it: the next buffer may well start there."""
        for past_the_end in (False, True) if may_be_empty else (False,):
            for index in range(len(self._extents) - 1, -1, -1):
                start, nbytes = self._extents[index]
                if start <= address < start + nbytes or (past_the_end and address == start + nbytes):
                    return tapes.Pointer(index, address - start)
        return None

    def pointer_to(self, array) -> tapes.Pointer:
        """Where a CuPy array's data lies; an array of memory the call neither got nor allocated (kept from an
        earlier call, made at import) becomes scratch: the tape does not carry what it held. An array that is not
        empty is never one past a buffer's end: a pool lays memory out end to end, and a kept array may well
        begin where another buffer ends."""
        found = self.find(array.data.ptr, may_be_empty=array.nbytes == 0)
        if found is None:
            memory = array.data.mem
            self.add_buffer(memory.ptr, memory.size, kept=True)
            found = self.find(array.data.ptr)
        return found

    def region_of(self, array) -> tapes.Region:
        pointer = self.pointer_to(array)
        return tapes.Region(pointer.buffer, pointer.offset, tuple(array.shape), tuple(array.strides),
                            array.dtype.name)

    # ----------------------------------------------------------------------- steps

    def program_index(self, program: tapes.Program) -> int:
        if program not in self._programs:
            self._programs[program] = len(self.tape.programs)
            self.tape.programs.append(program)
        return self._programs[program]

    def launch(self, program: tapes.Program, kernel: str, grid, block, args, shared_mem: int) -> None:
        arguments = tuple(self._argument(kernel, number, value) for number, value in enumerate(args, start=1))
        self.tape.steps.append(tapes.Launch(self.program_index(program), kernel, _dims(grid), _dims(block),
                                            int(shared_mem), arguments))

    def _argument(self, kernel: str, number: int, value) -> tapes.Pointer | tapes.Scalar:
        """A kernel argument as CuPy passes it: an array or a pointer as the device address, None as a null
        pointer, a Python int or float as int64 or float64, a NumPy scalar as itself."""
        if _is_device_array(value):
            return self.pointer_to(value)
        if isinstance(value, cupy.cuda.MemoryPointer):
            value = np.uint64(value.ptr)
        elif value is None:
            value = np.uint64(0)
        elif isinstance(value, int):
            value = np.int64(value)
        elif isinstance(value, float):
            value = np.float64(value)
        if not isinstance(value, np.generic) or value.dtype.name not in tapes.DTYPES:
            _WATCH.refuse(f"launched {kernel} with argument {number} of type {type(value).__name__}, which a tape "
                          f"cannot hold (pass CuPy arrays and NumPy scalars)")
        if value.dtype.itemsize == 8 and value.dtype.kind in "iu" and value != 0:
            found = self.find(int(value.view(np.uint64)))
            if found is not None:
                return found
            if _is_device_address(int(value.view(np.uint64))):
                _WATCH.refuse(f"launched {kernel} with argument {number} a raw pointer into no buffer of the call "
                              f"(memory it was not given and did not allocate)")
        return tapes.Scalar.of(value)

    def write(self, array, content=None) -> None:
        """Tape what `array` holds now (or `content`, a host array of its shape) as a constant Write."""
        region = self.region_of(array)
        with _WATCH.allowed():
            host = np.ascontiguousarray(array.get() if content is None else content, dtype=array.dtype)
        elements = host.reshape(-1).view(np.uint8).reshape(host.size, host.dtype.itemsize)
        if host.size and (elements == elements[0]).all():
            self.tape.steps.append(tapes.Write(region, elements[0].tobytes(), repeated=True))
        else:
            self.tape.steps.append(tapes.Write(region, host.tobytes()))

    def library(self, operation: str, args, kwargs, result) -> None:
        def value(item):
            if _is_device_array(item):
                return self.region_of(item)
            if item is None or isinstance(item, (str, bool, int, float)):
                return item
            if isinstance(item, np.generic) and item.dtype.kind in "biuf":
                return item.item()
            _WATCH.refuse(f"called {operation} with a {type(item).__name__}, which a tape cannot hold")

        returned = self.region_of(result) if _is_device_array(result) else None
        self.tape.steps.append(tapes.Library(operation, tuple(value(a) for a in args),
                                             tuple((k, value(v)) for k, v in kwargs.items()), returned))


def _is_device_array(value) -> bool:
    return cupy is not None and isinstance(value, cupy.ndarray)


def _dims(value) -> tuple[int, int, int]:
    dims = tuple(int(d) for d in (value if isinstance(value, tuple) else (value,)))
    return dims + (1,) * (3 - len(dims))


def _is_device_address(address: int) -> bool:
    """Whether `address` lies in memory the GPU can address (device or managed memory)."""
    try:
        attributes = cupy.cuda.runtime.pointerGetAttributes(address)
    except Exception:  # not a pointer CUDA knows
        return False
    return attributes.type in (cupy.cuda.runtime.memoryTypeDevice, cupy.cuda.runtime.memoryTypeManaged)


class _Watch:
    """What every watched operation consults first: the recording in progress, if any.

    The operations hold it in their closures rather than reaching it through this
    module's globals, so that they stay themselves (and inert) while the interpreter
    tears modules down at exit."""

    def __init__(self):
        self.recording: Recording | None = None
        self.allowed_depth = 0  # > 0 while an allowed operation runs: CuPy's own work inside it is not checked

    def checking(self) -> bool:
        return self.recording is not None and self.allowed_depth == 0

    def refuse(self, description: str) -> NoReturn:
        if self.recording.refused is None:
            self.recording.refused = description
        raise RefusedOperation(description)

    def tape_launch(self, program: tapes.Program, kernel: str, grid, block, args, shared_mem: int = 0) -> None:
        """Tape a kernel launch the caller just made (a no-op outside a recording)."""
        if self.checking():
            self.recording.launch(program, kernel, grid, block, args, shared_mem)

    @contextlib.contextmanager
    def allowed(self):
        self.allowed_depth += 1
        try:
            yield
        finally:
            self.allowed_depth -= 1


_WATCH = _Watch()
tape_launch = _WATCH.tape_launch
_installed = False


@contextlib.contextmanager
def record(permit: tuple[str, ...] = (), arguments: dict | None = None) -> Iterator[Recording]:
    """Tape the call made inside the block; refuse what only its own kernels may do, except the libraries
    named in `permit` (keys of LIBRARIES), whose calls are taped. `arguments` are the call's arguments by
    name: its arrays become the tape's named buffers, its scalars the tape's scalars."""
    if _WATCH.recording is not None:
        raise RuntimeError("record() does not nest")
    unknown = set(permit) - set(LIBRARIES)
    if unknown:
        raise ValueError(f"record() cannot permit {sorted(unknown)}; it can permit {sorted(LIBRARIES)}")
    install()
    _WATCH.recording = recording = Recording(frozenset(permit), arguments or {})
    allocator = cupy.cuda.get_allocator() if cupy is not None else None
    if cupy is not None:
        cupy.cuda.set_allocator(_taping_allocator(allocator, recording))
    try:
        yield recording
    finally:
        _WATCH.recording = None
        if cupy is not None:
            cupy.cuda.set_allocator(allocator)


def _taping_allocator(allocator, recording: Recording):
    """CuPy's allocator, telling `recording` of every allocation: scratch buffers of the call."""
    allocate = allocator or cupy.cuda.memory._malloc

    def taping(nbytes: int):
        memory = allocate(nbytes)
        recording.allocated(memory.ptr, nbytes)
        return memory

    return taping


def _device_arrays(*values) -> list:
    """The CuPy arrays among `values`, looking inside tuples, lists and dicts."""
    found = []
    for value in values:
        if isinstance(value, cupy.ndarray):
            found.append(value)
        elif isinstance(value, (tuple, list)):
            found += _device_arrays(*value)
        elif isinstance(value, dict):
            found += _device_arrays(*value.values())
    return found


def _views_of(result, sources: list) -> bool:
    """Whether `result` (an array, or a list or tuple of them) only views memory of `sources`."""
    results = result if isinstance(result, (tuple, list)) else [result]
    memories = {id(source.data.mem) for source in sources}
    return all(isinstance(r, cupy.ndarray) and id(r.data.mem) in memories for r in results)


# --------------------------------------------------------------------------- the watched operations


class _Refused:
    """A CuPy callable that computes: refused while recording, CuPy's own otherwise."""

    def __init__(self, name: str, original, refusal: str):
        self._name, self._original, self._refusal, self._watch = name, original, refusal, _WATCH
        self.__doc__ = getattr(original, "__doc__", None)

    def __call__(self, *args, **kwargs):
        if self._watch.checking():
            self._watch.refuse(self._refusal)
        return self._original(*args, **kwargs)

    def __getattr__(self, attribute):  # a ufunc's reduce, outer, at, ... compute too
        if attribute in ("_name", "_original", "_refusal", "_watch"):  # not set yet (a copy in the making)
            raise AttributeError(attribute)
        value = getattr(self._original, attribute)
        if callable(value) and not isinstance(value, type) and not attribute.startswith("__"):
            qualified = f"{self._name}.{attribute}"
            return _Refused(qualified, value, f"computed with {qualified}")
        return value

    def __repr__(self) -> str:
        return repr(self._original)


def _computing(name: str, original):
    return _Refused(name, original, f"computed with {name}")


class _LibraryCall(_Refused):
    """A function of a library a recording may permit: refused unless it does; then taped and counted."""

    def __init__(self, name: str, original, library: str):
        super().__init__(name, original, f"computed with {name} (cuBLAS is allowed in the cuBLAS variant only)")
        self._library = library

    def __call__(self, *args, **kwargs):
        watch = self._watch
        if not watch.checking() or self._library not in watch.recording.permitted:
            return super().__call__(*args, **kwargs)
        with watch.allowed():  # CuPy's own work inside the library call is part of it
            result = self._original(*args, **kwargs)
        watch.recording.library(self._name, args, kwargs, result)
        return result

    def __getattr__(self, attribute):
        if attribute == "_library":
            raise AttributeError(attribute)
        return super().__getattr__(attribute)


def _to_host(name: str, original):
    return _Refused(name, original, f"copied device data to the host ({name})")


def _creating(name: str, original, *, prototype: bool = False, tape: bool = True):
    """cupy.zeros, cupy.asarray(host_array), cupy.full_like, ...: allowed, taped with what they wrote.

    Handed device data (other than a *_like routine's prototype), such a routine may
    only return a view of it: cupy.asarray(x) is x, a copy is refused."""

    watch = _WATCH

    @functools.wraps(original)
    def watched(*args, **kwargs):
        if not watch.checking():
            return original(*args, **kwargs)
        sources = _device_arrays(args[1:] if prototype else args, kwargs)
        with watch.allowed():
            result = original(*args, **kwargs)
        if sources:
            if not _views_of(result, sources):
                watch.refuse(f"computed with {name} (it copied device data)")
        elif tape:
            watch.recording.write(result)
        return result

    return watched


def _viewing(name: str, original):
    """cupy.reshape, x.ravel(), x[1:], ...: allowed while they view; refused when they copy."""

    watch = _WATCH

    @functools.wraps(original)
    def watched(*args, **kwargs):
        if not watch.checking():
            return original(*args, **kwargs)
        with watch.allowed():
            result = original(*args, **kwargs)
        if not _views_of(result, _device_arrays(args, kwargs)):
            watch.refuse(f"computed with {name} (it copied device data)")
        return result

    return watched


def _constant_writing(name: str, original, *, method: bool):
    """x.fill(v), x[key] = v, x.set(host_array), cudaMemset: allowed with host values, taped as Writes of what
    they wrote: the array (x[key] for an assignment), or the bytes a memset covered."""

    watch = _WATCH

    @functools.wraps(original)
    def watched(*args, **kwargs):
        if not watch.checking():
            return original(*args, **kwargs)
        target, values = (args[:1], args[1:]) if method else ((), args)
        if _device_arrays(values, kwargs):
            watch.refuse(f"computed with {name} (from device data)")
        with watch.allowed():
            result = original(*args, **kwargs)
            written = target[0][values[0]] if name.endswith("__setitem__") else target[0] if method else None
        if written is None:  # cudaMemset(pointer, value, bytes)
            address, value, nbytes = (int(v) for v in args[:3])
            watch.recording.write(_bytes_at(address, nbytes), np.full(nbytes, value & 0xFF, np.uint8))
        elif not _views_of(written, target):
            watch.refuse(f"computed with {name} (assigned through an index array: write through a slice, or in "
                         f"a kernel)")
        else:
            watch.recording.write(written)
        return result

    return watched


def _bytes_at(address: int, nbytes: int):
    """The `nbytes` bytes of device memory at `address`, as a uint8 array (a view: nothing is copied)."""
    memory = cupy.cuda.UnownedMemory(address, nbytes, None)
    return cupy.ndarray((nbytes,), np.uint8, cupy.cuda.MemoryPointer(memory, 0))


def _refusing_class(name: str, cls: type) -> type:
    """A subclass of an elementwise, reduction or vectorized kernel class whose calls are refused."""

    watch = _WATCH

    def __call__(self, *args, **kwargs):
        if watch.checking():
            watch.refuse(f"computed with {name}")
        return cls.__call__(self, *args, **kwargs)

    return type(cls.__name__, (cls,), {"__call__": __call__, "__module__": cls.__module__})


def _watched_fuse(original):
    """cupy.fuse, as a decorator with or without arguments: the fused functions are refused."""

    @functools.wraps(original)
    def fuse(*args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return _computing("a cupy.fuse function", original(args[0]))
        decorate = original(*args, **kwargs)
        return lambda function: _computing("a cupy.fuse function", decorate(function))

    return fuse


def program_of(raw) -> tapes.Program:
    """The program of a cupy.RawKernel or cupy.RawModule: its source and how it is compiled."""
    if raw.code is None:
        _WATCH.refuse(f"launched a kernel loaded from a compiled file ({raw.file_path}): kernels must be CUDA "
                      f"source, compiled at run time")
    return tapes.Program.of(raw)


class _TapedFunction:
    """A function of a watched cupy.RawModule: its launches are taped."""

    def __init__(self, function, module, name: str):
        self._function, self._module, self._name, self._watch = function, module, name, _WATCH

    def __call__(self, grid, block, args, **options):
        self._function(grid, block, args, **options)
        if self._watch.checking():
            self._watch.tape_launch(program_of(self._module), self._name, grid, block, args,
                                    options.get("shared_mem", 0))

    def __getattr__(self, attribute):
        return getattr(self._function, attribute)

    def __setattr__(self, attribute, value):  # a setting such as max_dynamic_shared_size_bytes is the function's
        if attribute.startswith("_"):
            object.__setattr__(self, attribute, value)
        else:
            setattr(self._function, attribute, value)


def _taping_raw_classes():
    raw_kernel, raw_module, watch = cupy.RawKernel, cupy.RawModule, _WATCH

    class RawKernel(raw_kernel):
        __module__, __qualname__ = raw_kernel.__module__, "RawKernel"

        def __call__(self, grid, block, args, **options):
            raw_kernel.__call__(self, grid, block, args, **options)
            if watch.checking():
                watch.tape_launch(program_of(self), self.name, grid, block, args, options.get("shared_mem", 0))

    class RawModule(raw_module):
        __module__, __qualname__ = raw_module.__module__, "RawModule"

        def get_function(self, name):
            return _TapedFunction(raw_module.get_function(self, name), self, name)

    return RawKernel, RawModule


# Routines of the watched namespaces, by what they do (anything else callable computes).
_INFORMATION = {  # read no device data: shapes, dtypes, pools, settings
    "get_array_module", "get_array_wrap", "get_default_memory_pool", "get_default_pinned_memory_pool",
    "get_printoptions", "set_printoptions", "printoptions", "is_available", "isscalar", "ndim", "shape", "size",
    "result_type", "can_cast", "common_type", "min_scalar_type", "promote_types", "mintypecode", "issubdtype",
    "issctype", "issubclass_", "issubsctype", "obj2sctype", "sctype2char", "isdtype", "typename", "iscomplexobj",
    "isrealobj", "isfortran", "broadcast_shapes", "show_config", "iterable", "may_share_memory", "shares_memory",
    "byte_bounds", "find_common_type", "base_repr", "binary_repr", "format_float_positional",
    "format_float_scientific", "clear_memo", "memoize", "make_aligned_dtype", "get_runtime_info",
    "errstate", "geterr", "seterr", "allow_synchronize",
    "empty_pinned", "empty_like_pinned", "zeros_pinned", "zeros_like_pinned",  # host memory
}
_MAKING = {"zeros", "ones", "full", "arange", "linspace", "eye", "identity", "tri",
           "array", "asarray", "asanyarray", "ascontiguousarray", "asfortranarray", "require"}
_MAKING_LIKE = {"zeros_like", "ones_like", "full_like"}
_VIEWING = {"reshape", "ravel", "transpose", "swapaxes", "moveaxis", "rollaxis", "squeeze", "expand_dims",
            "broadcast_to", "broadcast_arrays", "atleast_1d", "atleast_2d", "atleast_3d", "permute_dims",
            "matrix_transpose", "split", "array_split", "hsplit", "vsplit", "dsplit", "diagonal", "flip",
            "fliplr", "flipud", "real", "imag"}
_TO_HOST = {"asnumpy"}

# Methods of cupy.ndarray, by what they do (any other callable one computes).
_ARRAY_UNTOUCHED = {
    "__init__", "__new__", "__getattribute__", "__setattr__", "__delattr__", "__dir__", "__sizeof__",
    "__class_getitem__", "__init_subclass__", "__subclasshook__", "__array_finalize__", "_init",
    "_set_shape_and_strides", "_check_kind_sort", "__dlpack_device__", "__len__", "__iter__", "mdspan",
    "__release_buffer__",
}
_ARRAY_VIEWING = {"reshape", "ravel", "view", "transpose", "swapaxes", "squeeze", "diagonal", "__getitem__",
                  "conj", "conjugate", "reduced_view"}
_ARRAY_TO_HOST = {"get", "tolist", "item", "tobytes", "tofile", "dump", "dumps", "__array__", "__float__",
                  "__int__", "__bool__", "__complex__", "__index__", "__repr__", "__str__", "__format__", "__bytes__",
                  "__reduce__", "__reduce_ex__", "__getstate__", "__hex__", "__oct__", "__buffer__"}
_ARRAY_EXPORTING = {"__dlpack__", "toDlpack"}


def _watch_namespace(module: types.ModuleType, prefix: str, library: str | None = None) -> None:
    """Watch every public routine of `module`; those of a permittable `library` are _LibraryCalls."""
    for name in dir(module):
        value = getattr(module, name)
        if name.startswith("_") or isinstance(value, (type, types.ModuleType)) or not callable(value):
            continue
        qualified = f"{prefix}.{name}"
        if name in _INFORMATION:
            continue
        if name in ("empty", "empty_like"):
            watched = _creating(qualified, value, prototype=name == "empty_like", tape=False)
        elif name in _MAKING or name in _MAKING_LIKE:
            watched = _creating(qualified, value, prototype=name in _MAKING_LIKE)
        elif name in _VIEWING:
            watched = _viewing(qualified, value)
        elif name in _TO_HOST:
            watched = _to_host(qualified, value)
        elif name == "fuse":
            watched = _watched_fuse(value)
        elif library is not None:
            watched = _LibraryCall(qualified, value, library)
        else:
            watched = _computing(qualified, value)
        setattr(module, name, watched)


def _watch_arrays() -> None:
    array = cupy.ndarray
    for name in dir(array):
        value = getattr(array, name)
        if name in _ARRAY_UNTOUCHED or not callable(value) or isinstance(value, type):
            continue
        qualified = f"cupy.ndarray.{name}"
        if name in _ARRAY_VIEWING:
            watched = _viewing(qualified, value)
        elif name in ("fill", "set", "__setitem__"):
            watched = _constant_writing(qualified, value, method=True)
        elif name in _ARRAY_TO_HOST:
            watched = _to_host(qualified, value)
        elif name in _ARRAY_EXPORTING:
            watched = _Refused(qualified, value, f"exported device data to another library ({qualified})")
        else:
            watched = _computing(qualified, value)
        if isinstance(watched, _Refused):  # a method needs a function to bind to its array
            watched = _method(watched)
        setattr(array, name, watched)


def _method(refused: _Refused):
    def method(self, *args, **kwargs):
        return refused(self, *args, **kwargs)
    method.__name__ = refused._name.rsplit(".", 1)[1]
    return method


def install() -> None:
    """Put the watch into CuPy (once per process; without CuPy there is nothing to watch)."""
    global _installed
    if _installed or cupy is None:
        return
    _installed = True
    cupyx = importlib.import_module("cupyx")
    for submodule in ("cuda.runtime", "fft", "linalg", "random"):
        importlib.import_module(f"cupy.{submodule}")
    namespaces = [(cupy, "cupy"), (cupy.linalg, "cupy.linalg"), (cupy.fft, "cupy.fft"), (cupy.random, "cupy.random"),
                  (cupyx, "cupyx")]
    try:  # without the cuBLAS library (an NVRTC-only install) nothing can call it, so nothing to watch
        importlib.import_module("cupy.cublas")
        namespaces += [(cupy.cublas, "cupy.cublas"), (cupy.cuda.cublas, "cupy.cuda.cublas")]
    except ImportError:
        pass
    library_of = {namespace: library for library, namespace in LIBRARIES.items()}

    cupy.RawKernel, cupy.RawModule = _taping_raw_classes()
    for name in ("ElementwiseKernel", "ReductionKernel", "vectorize"):
        setattr(cupy, name, _refusing_class(f"a cupy.{name}", getattr(cupy, name)))
    for module, prefix in namespaces:
        _watch_namespace(module, prefix, library_of.get(prefix))
    _watch_arrays()
    runtime = cupy.cuda.runtime
    for name in dir(runtime):
        qualified = f"cupy.cuda.runtime.{name}"
        if name in ("memset", "memsetAsync"):
            setattr(runtime, name, _constant_writing(qualified, getattr(runtime, name), method=False))
        elif name.startswith("memcpy") and callable(getattr(runtime, name)):
            setattr(runtime, name, _Refused(qualified, getattr(runtime, name),
                                            f"copied memory with {qualified} (copy host data to the GPU "
                                            f"with cupy.asarray or x.set)"))
