"""The pipe between a grading process and the process it started: the leaderboard's ranking
process and a submission's worker, the grader and its replayer.

A message is one line of JSON, {"kind": ..., "fields": {...}, "arrays": [[name, dtype,
shape], ...]}, then each array's bytes: numbers only, never pickled, and of a bounded
size, because the ranking process reads what an untrusted process wrote. Each side
checks the kind it expects; anything else, or the pipe closing, is a ChannelError
naming what came instead.

The started process's channel is the stdin and stdout it was started with, moved to
file descriptors of their own (`worker_channel`), so that whatever it prints goes to
stderr and cannot break a message.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
from typing import BinaryIO

import numpy as np

from gpt2kit.kernel_runtime import KitError

MAX_LINE = 1 << 20         # bytes of a message's JSON line: its fields are a few numbers and names
MAX_ARRAY_BYTES = 1 << 30  # the gate's logits are a few MB, a run's tokens less


class ChannelError(KitError):
    """The other side sent something else than the message expected, or closed the pipe."""


@dataclasses.dataclass(frozen=True)
class Message:
    kind: str
    fields: dict
    arrays: dict[str, np.ndarray]


class Channel:
    def __init__(self, reader: BinaryIO, writer: BinaryIO):
        self.reader, self.writer = reader, writer

    def send(self, kind: str, arrays: dict[str, np.ndarray] | None = None, **fields) -> None:
        arrays = arrays or {}
        arrays = {name: np.ascontiguousarray(array) for name, array in arrays.items()}
        described = [[name, array.dtype.str, list(array.shape)] for name, array in arrays.items()]
        self.writer.write(json.dumps({"kind": kind, "fields": fields, "arrays": described}).encode() + b"\n")
        for array in arrays.values():
            self.writer.write(array.tobytes())
        self.writer.flush()

    def receive(self, *kinds: str) -> Message:
        """The next message, which must be of one of `kinds`."""
        expected = " or ".join(map(repr, kinds))
        line = self.reader.readline(MAX_LINE)
        if not line:
            raise ChannelError(f"the pipe closed while waiting for {expected}")
        try:
            header = json.loads(line)
            got, fields, described = header["kind"], header["fields"], header["arrays"]
            if not (isinstance(got, str) and isinstance(fields, dict) and isinstance(described, list)):
                raise TypeError("kind, fields or arrays of the wrong type")
            arrays = {str(name): self._read_array(dtype, shape) for name, dtype, shape in described}
        except (ValueError, KeyError, TypeError) as err:
            raise ChannelError(f"an unreadable message while waiting for {expected} ({err})") from None
        if got not in kinds:
            raise ChannelError(f"a {got!r} message came while waiting for {expected}")
        return Message(got, fields, arrays)

    def _read_array(self, dtype: str, shape: list) -> np.ndarray:
        dtype = np.dtype(dtype)
        if dtype.kind not in "biuf" or not all(isinstance(n, int) and n >= 0 for n in shape):
            raise ValueError(f"an array of {dtype} and shape {shape}: numbers of a shape are expected")
        size = dtype.itemsize * math.prod(shape)
        if size > MAX_ARRAY_BYTES:
            raise ValueError(f"an array of {size} bytes")
        data = self.reader.read(size)
        if len(data) < size:
            raise ValueError("the pipe closed inside an array")
        return np.frombuffer(data, dtype).reshape(shape).copy()


def worker_channel() -> Channel:
    """This process's channel to the ranking process: its stdin and stdout, moved aside; from here on,
    file descriptor 0 reads nothing and 1 writes to stderr, so prints cannot reach the channel."""
    reader, writer = os.fdopen(os.dup(0), "rb"), os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    sys.stdout.flush()
    os.dup2(2, 1)
    return Channel(reader, writer)
