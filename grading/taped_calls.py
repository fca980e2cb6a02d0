"""The leaderboard's model on tapes: each host-function call the model makes is taped once per
shape in the submission's worker, and replayed by the trusted side, which never runs the
submission's code.

A call's key (`call_key`) is what decides its tape: the host function and, per argument,
an array's shape and dtype (or None, or a number's value), an argument that is the same
array as an earlier one naming it instead. Both sides run the same model code on the same
shapes, so they meet the same keys:

* the worker (grading.leaderboard_worker) runs the model on `Taper(...).ops(...)`: the
  first call of each key runs inside kernel_runtime.recording.record (its own kernels
  only; a library only where its variant permits it, as the worker claims), and its tape
  is kept; later calls of that key run as they are. The tapes leave the worker as data.
* the replayer (grading.leaderboard_replayer) runs the model on `TapedOps(...)`: each call
  replays its key's tape on the call's arrays (kernel_runtime.replay.PreparedTape: built
  by the one trusted build, libraries only where the variant permits them, scratch poisoned
  at every call). A key no tape answers, a tape that reads memory its call kept from an
  earlier one, or a tape whose scratch is out of bounds is refused with one line naming
  the call.
"""

from __future__ import annotations

import functools
import json
import types

from gpt2kit.kernel_runtime import KitError, recording
from gpt2kit.kernel_runtime import tape as tapes
from gpt2kit.kernel_runtime.replay import PreparedTape, check_scratch
from gpt2kit.model_runtime.ops import MODEL_FUNCTIONS, OPTIONAL_FUNCTIONS, parameters
from gpt2kit.reference.variants import variant_named

FUNCTIONS = MODEL_FUNCTIONS + OPTIONAL_FUNCTIONS  # what a generating model may call


class TapedCallError(KitError):
    """A call that cannot be taped or replayed as the leaderboard needs it."""


def call_key(function: str, args) -> str:
    """The key of a call of `function` with `args` (see the module docstring), as JSON text."""
    entries, seen = [], {}  # seen: (address, bytes) of each array -> its parameter
    for name, value in zip(parameters(function), args):
        if not _is_device_array(value):  # None or a number
            entries.append([name, tapes.plain(value)])
            continue
        extent = (value.data.ptr, value.nbytes)
        if extent in seen:
            entries.append([name, {"same_as": seen[extent]}])
            continue
        if not value.flags.c_contiguous:
            raise TapedCallError(f"{function}: argument {name} is not contiguous")
        start, end = extent[0], extent[0] + extent[1]
        for (other, nbytes), other_name in seen.items():
            if start < other + nbytes and other < end:
                raise TapedCallError(f"{function}: arguments {other_name} and {name} overlap")
        seen[extent] = name
        entries.append([name, {"shape": list(value.shape), "dtype": _dtype_name(value.dtype)}])
    return json.dumps([function, entries])


@functools.cache  # NumPy works a dtype's name out in Python, and the replayer keys every call it makes
def _dtype_name(dtype) -> str:
    return dtype.name


def permits(variants: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """Host function -> the libraries its variant among `variants` (names in reference.variants) permits."""
    return {variant.function: variant.permit for variant in map(variant_named, variants)}


def describe(key: str) -> str:
    """A key as a reader wants it: matmul_forward(B=4, T=7, C=768, OC=2304)."""
    function, entries = json.loads(key)
    numbers = ", ".join(f"{name}={value}" for name, value in entries if isinstance(value, (int, float)))
    return f"{function}({numbers})"


def _is_device_array(value) -> bool:
    return hasattr(getattr(value, "data", None), "ptr")


def _arrays(function: str, args) -> dict:
    return {name: value for name, value in zip(parameters(function), args) if _is_device_array(value)}


class Taper:
    """The worker's side: host functions that tape the first call of each key (`tapes`: key -> tape JSON)."""

    def __init__(self, permits: dict[str, tuple[str, ...]]):
        self.permits = permits  # host function -> the libraries its variant permits
        self.tapes: dict[str, str] = {}

    def ops(self, ops) -> types.SimpleNamespace:
        """`ops` (a backend's host functions), each taping its first call of every key."""
        return types.SimpleNamespace(**{name: self._taping(name, getattr(ops, name, None)) for name in FUNCTIONS})

    def _taping(self, name: str, function):
        if function is None:
            return None

        def call(*args):
            key = call_key(name, args)
            if key in self.tapes:
                return function(*args)
            with recording.record(self.permits.get(name, ()), dict(zip(parameters(name), args))) as taped:
                function(*args)
            if taped.refused is not None:  # refused, and the refusal caught by the submission
                raise TapedCallError(f"{describe(key)}: {taped.refused}")
            self.tapes[key] = taped.tape.to_json()

        return call


class TapedOps:
    """The trusted side: host functions that replay the tape of each call's key. `tapes`: key -> Tape (read with
    Tape.from_json, which checks it); `permits`: host function -> the libraries its variant permits."""

    def __init__(self, tapes_by_key: dict[str, tapes.Tape], permits: dict[str, tuple[str, ...]]):
        self.tapes, self.permits, self.prepared = tapes_by_key, permits, {}

    def ops(self) -> types.SimpleNamespace:
        return types.SimpleNamespace(**{name: self._replaying(name) for name in FUNCTIONS})

    def _replaying(self, name: str):
        def call(*args):
            key, arrays = call_key(name, args), _arrays(name, args)
            prepared = self.prepared.get(key) or self._prepare(key, name, arrays)
            prepared.run(arrays)

        return call

    def _prepare(self, key: str, name: str, arrays: dict):
        tape = self.tapes.get(key)
        if tape is None:
            raise TapedCallError(f"{describe(key)}: the worker taped no such call")
        if any(buffer.kept for buffer in tape.buffers):
            raise TapedCallError(f"{describe(key)}: its kernels read memory the call was not given (an array kept "
                                 f"from an earlier call or from import), which a replay cannot carry")
        try:
            check_scratch(tape, arrays)
            self.prepared[key] = PreparedTape(tape, permit=self.permits.get(name, ()))
        except tapes.TapeError as err:
            raise TapedCallError(f"{describe(key)}: {err}") from None
        return self.prepared[key]


def read_tapes(text: str) -> dict[str, tapes.Tape]:
    """The worker's tapes (its JSON object of key -> tape JSON), every tape checked; one TapedCallError line
    naming the key of a bad one."""
    try:
        raw = json.loads(text)
    except ValueError as err:
        raise TapedCallError(f"unreadable tapes: {err}") from None
    if not isinstance(raw, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
        raise TapedCallError("unreadable tapes: not an object of key -> tape")
    read = {}
    for key, text in raw.items():
        try:
            read[key] = tapes.Tape.from_json(text)
        except tapes.TapeError as err:
            raise TapedCallError(f"{key[:200]}: {err}") from None
    return read
