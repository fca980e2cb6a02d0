"""Checkpoint files of any model family: safetensors (one file or shards with an index, as
transformers writes them), PyTorch .bin files, JSON configs, the Hugging Face hub, and
progress in tenths for long reads and writes.

Every problem with a file is one `CheckpointError` line naming the file and what is wrong.
Every file is written under a temporary name and renamed into place when complete
(kernel_runtime.files), so an interrupted write leaves the previous file as it was.
"""

from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path
from typing import Callable, Collection

import numpy as np

from gpt2kit.kernel_runtime import KitError
from gpt2kit.kernel_runtime.commands import raise_lost_interrupt
from gpt2kit.kernel_runtime.files import replacing

Parameters = dict  # name -> float32 np.ndarray, in the family's config.parameter_shapes() order
Progress = Callable[[str], None]  # takes one line saying how far a long read or write has come
SAFETENSORS_DTYPES = {"F32": "<f4", "F16": "<f2", "BF16": "<u2"}
HF_PREFIX = "transformer."  # the prefix of a causal LM's body in transformers' tensor names


class CheckpointError(KitError):
    """A weights file or directory that cannot be read as the model it should hold."""


class Tenths:
    """Counts a job's bytes and gives `progress` (if any) one line each time the job passes another tenth. Every
    long read, write and draw counts its pieces here, so this is also where a Ctrl-C that NumPy swallowed in a
    piece takes effect (kernel_runtime.commands.raise_lost_interrupt)."""

    def __init__(self, progress: Progress | None, what: str, total_bytes: int):
        self.progress, self.what, self.total = progress, what, total_bytes
        self.done = self.said = 0

    def add(self, nbytes: int) -> None:
        raise_lost_interrupt()
        self.done += nbytes
        tenths = self.done * 10 // max(self.total, 1)
        if self.progress is not None and tenths > self.said:
            self.said = tenths
            self.progress(f"{self.what}: {100 * self.done // max(self.total, 1)}% "
                          f"({self.done / 1e6:.0f} of {self.total / 1e6:.0f} MB)")


def bfloat16_to_float32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def float32_to_bfloat16(values: np.ndarray) -> np.ndarray:
    bits = values.view(np.uint32)
    rounding = ((bits >> 16) & 1) + 0x7FFF  # round to nearest, ties to even
    return ((bits + rounding) >> 16).astype("<u2")


def read_json_object(path: Path) -> dict:
    with os_errors(path, "read"):
        data = path.read_bytes()
    try:
        raw = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(raw, dict):
        raise CheckpointError(f"{path}: holds a JSON {json_kind(raw)}, expected an object")
    return raw


def transformers_sizes(raw: dict, where, fields: tuple[str, ...]) -> dict[str, int]:
    """`fields` of a transformers config (its config.json as a dict), each a positive integer, after checking
    what the kit's kernels fix: the tanh GELU, layernorm epsilon 1e-5, an MLP 4 times the width.
    CheckpointError naming `where` otherwise."""
    if raw.get("activation_function", "gelu_new") not in ("gelu_new", "gelu_pytorch_tanh"):
        raise CheckpointError(f"{where}: activation_function {raw['activation_function']!r} is not the tanh GELU")
    epsilon = raw.get("layer_norm_epsilon", 1e-5)
    if not isinstance(epsilon, (int, float)) or abs(epsilon - 1e-5) > 1e-12:
        raise CheckpointError(f"{where}: layer_norm_epsilon {epsilon!r} is not 1e-5")
    sizes = {}
    for field in fields:
        if field not in raw:
            raise CheckpointError(f"{where}: missing field {field}")
        if not is_int(raw[field]) or raw[field] < 1:
            raise CheckpointError(f"{where}: {field} must be a positive integer, got {raw[field]!r}")
        sizes[field] = raw[field]
    if raw.get("n_inner") not in (None, 4 * sizes["n_embd"]):
        raise CheckpointError(f"{where}: n_inner={raw['n_inner']!r} is not 4 * n_embd")
    return sizes


def json_kind(value) -> str:
    kinds = {list: "list", str: "string", bool: "boolean", int: "number", float: "number", type(None): "null"}
    return kinds.get(type(value), type(value).__name__)


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # Python counts JSON's true as the int 1


class SafetensorsFiles:
    """Lazy access to the tensors of one or several .safetensors files, by HF name."""

    def __init__(self, files: list[Path]):
        self.where: dict[str, tuple[Path, dict, int]] = {}
        for path in files:
            header, data_start = _read_safetensors_header(path)
            for name, info in header.items():
                if name != "__metadata__":
                    self.where[name.removeprefix(HF_PREFIX)] = (path, info, data_start)

    def load(self, name: str) -> np.ndarray:
        if name not in self.where:
            files = sorted({str(p) for p, _, _ in self.where.values()}) or ["(no tensors)"]
            raise CheckpointError(f"{', '.join(files)}: missing tensor {name}")
        path, info, data_start = self.where[name]
        dtype, shape = info.get("dtype"), tuple(info["shape"])
        if dtype not in SAFETENSORS_DTYPES:
            raise CheckpointError(f"{path}: tensor {name} has dtype {dtype}; F32, F16 and BF16 are supported")
        begin, end = info["data_offsets"]
        element = np.dtype(SAFETENSORS_DTYPES[dtype])
        expected = math.prod(shape) * element.itemsize
        if end - begin != expected:
            raise CheckpointError(f"{path}: tensor {name} of shape {shape} in {dtype} needs {expected} bytes, "
                                  f"its data_offsets hold {end - begin}")
        with os_errors(path, "read"):
            raw = np.fromfile(path, dtype=element, count=math.prod(shape), offset=data_start + begin)
        values = bfloat16_to_float32(raw) if dtype == "BF16" else raw.astype(np.float32)
        return values.reshape(shape)

    def describe(self, name: str) -> str:
        return str(self.where[name][0]) if name in self.where else "?"


def open_weights(directory: Path, torch_files: bool = False):
    """The weight files of a transformers directory, by tensor name: safetensors (model.safetensors, or
    shards listed in model.safetensors.index.json); with torch_files, where there are none, PyTorch's
    pytorch_model.bin (or its shards, pytorch_model.bin.index.json), read through torch."""
    layouts = [("model.safetensors.index.json", "model.safetensors", SafetensorsFiles)]
    if torch_files:
        layouts.append(("pytorch_model.bin.index.json", "pytorch_model.bin", TorchFiles))
    for index_name, single_name, opener in layouts:
        files = _listed_files(directory, index_name, single_name)
        if files:
            return opener(files)
    found = "model.safetensors or model.safetensors.index.json"
    raise CheckpointError(f"{directory}: no {found}{' (nor pytorch_model.bin)' if torch_files else ''}")


def _listed_files(directory: Path, index_name: str, single_name: str) -> list[Path]:
    """The files of an index's weight_map, or the single file, or none; CheckpointError for a missing shard."""
    index, single = directory / index_name, directory / single_name
    if index.exists():
        weight_map = read_json_object(index).get("weight_map")
        if not isinstance(weight_map, dict) or not all(isinstance(f, str) for f in weight_map.values()):
            raise CheckpointError(f"{index}: weight_map must map tensor names to file names")
        files = sorted({directory / f for f in weight_map.values()})
    else:
        files = [single] if single.exists() else []
    for path in files:
        if not path.exists():
            raise CheckpointError(f"{path}: missing shard")
    return files


class TorchFiles:
    """The tensors of PyTorch state-dict files (pytorch_model.bin and its shards), by HF name, read through
    torch (memory-mapped, weights only: no code in the file runs)."""

    def __init__(self, files: list[Path]):
        try:
            import torch
        except ImportError:
            raise CheckpointError(f"{files[0]}: reading PyTorch .bin weights needs PyTorch (pip install torch), "
                                  "or give the weights as safetensors") from None
        self.where: dict[str, tuple[Path, object]] = {}
        for path in files:
            try:
                state = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
            except Exception as err:  # a truncated or foreign file: one line either way
                raise CheckpointError(f"{path}: not a PyTorch state dict ({type(err).__name__}: "
                                      f"{str(err).strip().splitlines()[0] if str(err).strip() else ''})") from None
            self.where.update({name.removeprefix(HF_PREFIX): (path, tensor) for name, tensor in state.items()})

    def load(self, name: str) -> np.ndarray:
        if name not in self.where:
            files = sorted({str(p) for p, _ in self.where.values()}) or ["(no tensors)"]
            raise CheckpointError(f"{', '.join(files)}: missing tensor {name}")
        path, tensor = self.where[name]
        if not tensor.is_floating_point():
            raise CheckpointError(f"{path}: tensor {name} has dtype {tensor.dtype}, not a floating-point one")
        return tensor.float().numpy().astype(np.float32, copy=True)

    def describe(self, name: str) -> str:
        return str(self.where[name][0]) if name in self.where else "?"


def _read_safetensors_header(path: Path) -> tuple[dict, int]:
    with os_errors(path, "read"), open(path, "rb") as f:
        size = path.stat().st_size
        prefix = f.read(8)
        if len(prefix) < 8:
            raise CheckpointError(f"{path}: too short for a safetensors file")
        length = int.from_bytes(prefix, "little")
        if length > size - 8:
            raise CheckpointError(f"{path}: truncated safetensors header")
        encoded = f.read(length)
    try:
        header = json.loads(encoded)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise CheckpointError(f"{path}: unreadable safetensors header") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: safetensors header holds a JSON {json_kind(header)}, expected an object")
    data_size = size - 8 - length
    for name, info in header.items():
        if name != "__metadata__":
            _check_safetensors_entry(path, name, info, data_size)
    return header, 8 + length


def _check_safetensors_entry(path: Path, name: str, info, data_size: int) -> None:
    """An entry's layout (dtypes are checked when a tensor is loaded: unused ones may be anything)."""
    if not isinstance(info, dict):
        raise CheckpointError(f"{path}: tensor {name}: header entry is a JSON {json_kind(info)}, expected an object")
    offsets, shape, dtype = info.get("data_offsets"), info.get("shape"), info.get("dtype")
    if not isinstance(dtype, str):
        raise CheckpointError(f"{path}: tensor {name}: dtype must be a name such as F32, got {dtype!r}")
    if not (_is_int_list(offsets) and len(offsets) == 2 and 0 <= offsets[0] <= offsets[1]):
        raise CheckpointError(f"{path}: tensor {name}: data_offsets must be [begin, end], got {offsets!r}")
    if not (_is_int_list(shape) and all(size >= 0 for size in shape)):
        raise CheckpointError(f"{path}: tensor {name}: shape must be a list of sizes, got {shape!r}")
    if offsets[1] > data_size:
        raise CheckpointError(f"{path}: truncated: tensor {name} ends past the end of the file")


def _is_int_list(value) -> bool:
    return isinstance(value, list) and all(is_int(item) for item in value)


def write_safetensors(path: Path, tensors: dict) -> None:
    header, offset = {}, 0
    for name, tensor in tensors.items():
        nbytes = tensor.size * 4
        header[name] = {"dtype": "F32", "shape": list(tensor.shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    header["__metadata__"] = {"format": "pt"}
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    with os_errors(path, "write"), replacing(path) as partial, open(partial, "wb") as f:
        f.write(len(encoded).to_bytes(8, "little"))
        f.write(encoded)
        for tensor in tensors.values():
            f.write(np.ascontiguousarray(tensor, dtype="<f4").data)  # file.write: a Ctrl-C stays a Ctrl-C


def split_shards(tensors: dict, max_shard_bytes: int | None) -> list[dict]:
    shards, current, current_bytes = [], {}, 0
    for name, tensor in tensors.items():
        nbytes = tensor.size * 4
        if current and max_shard_bytes is not None and current_bytes + nbytes > max_shard_bytes:
            shards.append(current)
            current, current_bytes = {}, 0
        current[name] = tensor
        current_bytes += nbytes
    return shards + [current]


def expect_shape(tensors: SafetensorsFiles, name: str, tensor: np.ndarray, shape: tuple) -> None:
    if tuple(tensor.shape) != tuple(shape):
        raise CheckpointError(f"{tensors.describe(name)}: tensor {name} has shape {tuple(tensor.shape)}, "
                              f"expected {tuple(shape)}")


def download_from_hub(repo_id: str, torch_files: bool = False) -> Path:
    """The hub's snapshot of `repo_id` in huggingface_hub's cache: config.json and the
    safetensors weights; with torch_files, where the repository has no safetensors, its
    PyTorch .bin weights instead. Needs the network unless the cache has them already."""
    path = _snapshot(repo_id, ["config.json", "*.safetensors", "*.safetensors.index.json"])
    if torch_files and not any(path.glob("*.safetensors")):
        path = _snapshot(repo_id, ["config.json", "pytorch_model*.bin", "pytorch_model.bin.index.json"])
    return path


def _snapshot(repo_id: str, patterns: list[str]) -> Path:
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise CheckpointError(f"{repo_id}: downloading needs huggingface_hub (pip install huggingface_hub)") from None
    try:
        return Path(snapshot_download(repo_id=repo_id, allow_patterns=patterns))
    except Exception as err:  # offline, unknown repository, ...: one line either way
        message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CheckpointError(f"{repo_id}: could not download from the Hugging Face hub ({message})") from None


@contextlib.contextmanager
def os_errors(path: Path, action: str):
    """An OSError inside (no such file, a directory, no permission, ...) as one CheckpointError line."""
    try:
        yield
    except OSError as err:
        raise CheckpointError(f"{path}: cannot {action} ({err.strerror or err})") from None


def write_text(path: Path, text: str) -> None:
    with os_errors(path, "write"), replacing(path) as partial:
        partial.write_text(text)


def write_safetensors_directory(directory: Path, tensors: dict, max_shard_bytes: int | None = None) -> None:
    """`tensors` (HF name -> float32 array) as model.safetensors in `directory`, or, when max_shard_bytes is
    given and they exceed it, as shards model-0000k-of-0000n.safetensors with model.safetensors.index.json."""
    shards = split_shards(tensors, max_shard_bytes)
    if len(shards) == 1:
        write_safetensors(directory / "model.safetensors", shards[0])
        return
    weight_map = {}
    for k, shard in enumerate(shards, start=1):
        filename = f"model-{k:05d}-of-{len(shards):05d}.safetensors"
        write_safetensors(directory / filename, shard)
        weight_map.update({name: filename for name in shard})
    total = sum(t.size * 4 for t in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    write_text(directory / "model.safetensors.index.json", json.dumps(index, indent=2) + "\n")


def random_parameters(shapes: dict, stacked: Collection[str], seed: int, progress: Progress | None = None,
                      stds: dict | None = None) -> Parameters:
    """Random weights for every tensor of `shapes` (name -> shape), as transformers initialises a causal LM:
    layernorm weights (ln...w) 1, biases (...b) 0, every other tensor N(0, stds[name]) (0.02 where stds
    says nothing). The `stacked` tensors (layers first) are drawn in place a layer at a time, so that progress
    moves within the big ones: the same numbers as one draw per tensor, without a second copy."""
    rng = np.random.default_rng(seed)
    tenths = Tenths(progress, "initialising random weights", 4 * sum(math.prod(s) for s in shapes.values()))
    params = {}
    for name, shape in shapes.items():
        if name.startswith("ln") and name.endswith("w"):
            params[name] = np.ones(shape, np.float32)
        elif name.endswith("b"):
            params[name] = np.zeros(shape, np.float32)
        else:
            std = np.float32((stds or {}).get(name, 0.02))
            params[name] = np.empty(shape, np.float32)
            for piece in params[name] if name in stacked else [params[name]]:
                rng.standard_normal(dtype=np.float32, out=piece)
                piece *= std
                tenths.add(piece.nbytes)
            continue
        tenths.add(params[name].nbytes)
    return params


def perturbed(params: Parameters, names: Collection[str], seed: int) -> Parameters:
    """`params` with noise N(0, 0.1) added to `names` (biases and layernorm weights, which an init leaves at 0
    and 1: a model or kernel that swapped or dropped them then shows)."""
    rng = np.random.default_rng(seed)
    return params | {name: params[name] + rng.normal(0, 0.1, params[name].shape).astype(np.float32) for name in names}
