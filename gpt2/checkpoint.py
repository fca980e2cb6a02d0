"""Reading and writing GPT-2 weights: llm.c .bin files, Hugging Face directories, random init.

Weights live in host memory as a dict of float32 NumPy arrays in llm.c's layout
(GPT2Config.parameter_shapes): linear weights (out, in), stacked over layers.

* llm.c (`gpt2_124M.bin`, what the course hands out): a header of 256 int32
  (magic 20240326, version 3 = float32 or 5 = bfloat16, max_T, V, L, NH, C, Vp), then
  every tensor in parameter_shapes order.
* Hugging Face: a directory with config.json and model.safetensors, or shards
  model-0000k-of-0000n.safetensors with model.safetensors.index.json. HF's Conv1D
  stores linear weights as (in, out): they are transposed on the way in and out.
  The LM head is tied to wte and is not stored.
* Hub names (gpt2, gpt2-medium, gpt2-large, gpt2-xl, or openai-community/gpt2 and
  so on) download config.json and the safetensors files through huggingface_hub
  into its cache (~/.cache/huggingface/hub unless $HF_HOME or $HF_HUB_CACHE say
  otherwise); later runs read the cache, without the network under HF_HUB_OFFLINE=1.

A source is a local checkpoint when it is a file (llm.c) or a directory holding
config.json (Hugging Face); otherwise a hub name is looked up on the hub, so that
"gpt2" means the model even where a folder named gpt2/ is in the way.

The file formats themselves (safetensors, shards, JSON, the hub) are every family's:
model_runtime.checkpoint_files; this module maps GPT-2's tensors onto them. Every
problem with a file is one `CheckpointError` line naming the file and what is wrong;
every file is written whole or not at all. Given `progress` (a function taking a
line), reading, writing and random init report each tenth of their bytes: the command
line prints those lines on stderr. transformers_model puts weights into transformers'
GPT2LMHeadModel, which the benchmarks run beside the kit's model.

    python -m gpt2kit.gpt2.checkpoint convert gpt2 gpt2_124M.bin   # any source -> llm.c float32 (version 3)
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
from pathlib import Path

import numpy as np

from gpt2kit.gpt2.config import PRESET_ALIASES, PRESETS, ConfigError, GPT2Config, preset
from gpt2kit.kernel_runtime.commands import OneLineArgumentParser, run_command
from gpt2kit.kernel_runtime.files import check_writable_file, replacing
from gpt2kit.model_runtime import checkpoint_files
from gpt2kit.model_runtime.checkpoint_files import (HF_PREFIX, CheckpointError, Parameters, Progress, Tenths,
                                                    bfloat16_to_float32, download_from_hub, expect_shape,
                                                    float32_to_bfloat16, open_weights, os_errors, read_json_object,
                                                    transformers_sizes, write_text, write_safetensors_directory)

LLMC_MAGIC = 20240326
LLMC_VERSIONS = {3: "float32", 5: "bfloat16"}
LLMC_HEADER_INTS = 256
WRITE_CHUNK = 2**22  # values a write: 16 MB in float32, so that Ctrl-C stops a writing within milliseconds



# --------------------------------------------------------------------------- random


def random_parameters(config: GPT2Config, seed: int = 0, progress: Progress | None = None) -> Parameters:
    """GPT-2's initialisation: weights N(0, 0.02), the two residual projections scaled
    by 1/sqrt(2L), biases 0, layernorm weights 1; wte's padding rows 0."""
    residual_std = 0.02 / math.sqrt(2 * config.num_layers)
    params = checkpoint_files.random_parameters(config.parameter_shapes(), _HF_LAYER_TENSORS, seed, progress,
                                                stds={"attprojw": residual_std, "fcprojw": residual_std})
    params["wte"][config.vocab_size:] = 0
    return params


def perturbed_parameters(config: GPT2Config, seed: int) -> Parameters:
    """GPT-2's init, plus noise on the biases and layernorm weights (checkpoint_files.perturbed)."""
    return checkpoint_files.perturbed(random_parameters(config, seed), ("ln1w", "ln1b", "qkvb", "attprojb", "ln2w",
                                                                        "ln2b", "fcb", "fcprojb", "lnfw", "lnfb"),
                                      seed + 1)


# --------------------------------------------------------------------------- llm.c


def read_llmc(path: str | Path, progress: Progress | None = None) -> tuple[GPT2Config, Parameters]:
    path = Path(path)
    with os_errors(path, "read"):
        return _read_llmc(path, progress)


def _read_llmc(path: Path, progress: Progress | None) -> tuple[GPT2Config, Parameters]:
    size = path.stat().st_size
    if size < 4 * LLMC_HEADER_INTS:
        raise CheckpointError(f"{path}: too short for an llm.c checkpoint header ({size} bytes)")
    header = np.fromfile(path, dtype="<i4", count=LLMC_HEADER_INTS)
    if header[0] != LLMC_MAGIC:
        raise CheckpointError(f"{path}: not an llm.c GPT-2 checkpoint (magic {header[0]}, expected {LLMC_MAGIC})")
    version = int(header[1])
    if version not in LLMC_VERSIONS:
        raise CheckpointError(f"{path}: unsupported llm.c checkpoint version {version} "
                              f"(3 = float32 and 5 = bfloat16 are supported)")
    max_T, V, L, NH, C, Vp = (int(x) for x in header[2:8])
    try:
        config = GPT2Config(max_T, V, Vp, L, NH, C)
    except ConfigError as err:
        raise CheckpointError(f"{path}: header describes no valid GPT-2 ({err})") from None
    item = 4 if version == 3 else 2
    expected = 4 * LLMC_HEADER_INTS + config.num_parameters() * item
    if size != expected:
        what = "truncated" if size < expected else "has trailing bytes"
        raise CheckpointError(f"{path}: {what}: {size} bytes, expected {expected} for "
                              f"L={L} NH={NH} C={C} V={V} Vp={Vp} max_T={max_T} in {LLMC_VERSIONS[version]}")
    params, offset = {}, 4 * LLMC_HEADER_INTS
    tenths = Tenths(progress, f"reading {path}", size)
    tenths.add(offset)
    for name, shape in config.parameter_shapes().items():
        count = math.prod(shape)
        if version == 3:
            tensor = np.fromfile(path, dtype="<f4", count=count, offset=offset)
        else:
            tensor = bfloat16_to_float32(np.fromfile(path, dtype="<u2", count=count, offset=offset))
        params[name] = tensor.reshape(shape)
        offset += count * item
        tenths.add(count * item)
    return config, params


def write_llmc(path: str | Path, config: GPT2Config, params: Parameters, dtype: str = "float32",
               progress: Progress | None = None) -> None:
    """Write `params` as an llm.c checkpoint in `dtype` (float32 or bfloat16), replacing `path` once complete."""
    versions = {v: k for k, v in LLMC_VERSIONS.items()}
    if dtype not in versions:
        raise ValueError(f"write_llmc: dtype must be float32 or bfloat16, got {dtype!r}")
    check_parameters(config, params, str(path))
    header = np.zeros(LLMC_HEADER_INTS, dtype="<i4")
    header[:8] = [LLMC_MAGIC, versions[dtype], config.max_T, config.vocab_size, config.num_layers,
                  config.num_heads, config.channels, config.padded_vocab_size]
    item = 4 if dtype == "float32" else 2
    tenths = Tenths(progress, f"writing {path}", header.nbytes + config.num_parameters() * item)
    with os_errors(path, "write"), replacing(path) as partial, open(partial, "wb") as f:
        f.write(header.data)  # file.write, not ndarray.tofile, which can turn a Ctrl-C into a TypeError
        tenths.add(header.nbytes)
        for name in config.parameter_shapes():
            for layer in params[name] if name in _HF_LAYER_TENSORS else [params[name]]:  # a layer at a time
                values = np.ascontiguousarray(layer, dtype="<f4").reshape(-1)
                for start in range(0, values.size, WRITE_CHUNK):
                    piece = values[start:start + WRITE_CHUNK]
                    f.write((piece if dtype == "float32" else float32_to_bfloat16(piece)).data)
                    tenths.add(piece.size * item)


# --------------------------------------------------------------------------- Hugging Face

# llm.c name -> (HF name pattern, transposed?). HF's Conv1D stores (in, out).
_HF_LAYER_TENSORS = {
    "ln1w": ("h.{l}.ln_1.weight", False), "ln1b": ("h.{l}.ln_1.bias", False),
    "qkvw": ("h.{l}.attn.c_attn.weight", True), "qkvb": ("h.{l}.attn.c_attn.bias", False),
    "attprojw": ("h.{l}.attn.c_proj.weight", True), "attprojb": ("h.{l}.attn.c_proj.bias", False),
    "ln2w": ("h.{l}.ln_2.weight", False), "ln2b": ("h.{l}.ln_2.bias", False),
    "fcw": ("h.{l}.mlp.c_fc.weight", True), "fcb": ("h.{l}.mlp.c_fc.bias", False),
    "fcprojw": ("h.{l}.mlp.c_proj.weight", True), "fcprojb": ("h.{l}.mlp.c_proj.bias", False),
}
_HF_GLOBAL_TENSORS = {"wte": "wte.weight", "wpe": "wpe.weight", "lnfw": "ln_f.weight", "lnfb": "ln_f.bias"}


def read_hf(directory: str | Path, progress: Progress | None = None) -> tuple[GPT2Config, Parameters]:
    directory = Path(directory)
    config = _read_hf_config(directory / "config.json")
    tensors = open_weights(directory)
    params = {}
    shapes = config.parameter_shapes()
    V = config.vocab_size
    stored_shapes = shapes | {"wte": (V, config.channels)}  # HF stores only the real vocabulary's rows
    padding_rows = (config.padded_vocab_size - V) * config.channels
    tenths = Tenths(progress, f"reading {directory}", 4 * (config.num_parameters() - padding_rows))
    for name, hf_name in _HF_GLOBAL_TENSORS.items():
        params[name] = tensors.load(hf_name)
        expect_shape(tensors, hf_name, params[name], stored_shapes[name])
        tenths.add(params[name].nbytes)
    padded = np.zeros(shapes["wte"], np.float32)
    padded[:V] = params["wte"]
    params["wte"] = padded
    for name, (pattern, transposed) in _HF_LAYER_TENSORS.items():
        stacked = np.empty(shapes[name], np.float32)
        for layer in range(config.num_layers):
            hf_name = pattern.format(l=layer)
            tensor = tensors.load(hf_name)
            want = shapes[name][1:][::-1] if transposed else shapes[name][1:]
            expect_shape(tensors, hf_name, tensor, want)
            stacked[layer] = tensor.T if transposed else tensor
            tenths.add(tensor.nbytes)
        params[name] = stacked
    return config, {name: params[name] for name in shapes}


def from_hf_tensors(config: GPT2Config, tensors: dict) -> Parameters:
    """The kit's layout of transformers' GPT-2 tensors given by name (without "transformer."), in their own
    dtype: how a transformers model's gradients line up with the kit's."""
    params = {name: np.asarray(tensors[hf_name]) for name, hf_name in _HF_GLOBAL_TENSORS.items()}
    padded = np.zeros((config.padded_vocab_size, config.channels), params["wte"].dtype)
    padded[:config.vocab_size] = params["wte"]
    params["wte"] = padded
    for name, (pattern, transposed) in _HF_LAYER_TENSORS.items():
        layers = (np.asarray(tensors[pattern.format(l=layer)]) for layer in range(config.num_layers))
        params[name] = np.stack([tensor.T if transposed else tensor for tensor in layers])
    return {name: params[name] for name in config.parameter_shapes()}  # in checkpoint order


def write_hf(directory: str | Path, config: GPT2Config, params: Parameters,
             max_shard_bytes: int | None = None) -> None:
    """A directory transformers' GPT2LMHeadModel.from_pretrained reads (sharded when
    max_shard_bytes is given and the weights exceed it)."""
    check_parameters(config, params, str(directory))
    directory = Path(directory)
    with os_errors(directory, "write"):
        directory.mkdir(parents=True, exist_ok=True)
    tensors = {HF_PREFIX + "wte.weight": params["wte"][:config.vocab_size]}
    tensors[HF_PREFIX + "wpe.weight"] = params["wpe"]
    for layer in range(config.num_layers):
        for name, (pattern, transposed) in _HF_LAYER_TENSORS.items():
            tensor = params[name][layer]
            tensors[HF_PREFIX + pattern.format(l=layer)] = tensor.T if transposed else tensor
    tensors[HF_PREFIX + "ln_f.weight"], tensors[HF_PREFIX + "ln_f.bias"] = params["lnfw"], params["lnfb"]
    write_text(directory / "config.json", json.dumps(_hf_config(config), indent=2) + "\n")
    write_safetensors_directory(directory, tensors, max_shard_bytes)


def transformers_model(config: GPT2Config, params: Parameters, device: str = "cuda"):
    """transformers' GPT2LMHeadModel holding `params`, float32, in eval mode on `device`: the model the benchmarks
    run beside the kit's (it reads the directory write_hf writes)."""
    import transformers

    with tempfile.TemporaryDirectory() as directory:
        write_hf(directory, config, params)
        return transformers.GPT2LMHeadModel.from_pretrained(directory).to(device).eval()


def _hf_config(config: GPT2Config) -> dict:
    return {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
        "n_embd": config.channels, "n_head": config.num_heads, "n_layer": config.num_layers,
        "n_positions": config.max_T, "n_ctx": config.max_T, "vocab_size": config.vocab_size,
        "n_inner": None, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
        "bos_token_id": 50256, "eos_token_id": 50256, "tie_word_embeddings": True,
        "torch_dtype": "float32",
    }


def _read_hf_config(path: Path) -> GPT2Config:
    raw = read_json_object(path)
    if raw.get("model_type", "gpt2") != "gpt2":
        raise CheckpointError(f"{path}: model_type is {raw['model_type']!r}, not 'gpt2'")
    sizes = transformers_sizes(raw, path, ("n_layer", "n_head", "n_embd", "vocab_size", "n_positions"))
    try:
        return GPT2Config.sized(sizes["n_layer"], sizes["n_head"], sizes["n_embd"], vocab_size=sizes["vocab_size"],
                                max_T=sizes["n_positions"])
    except ConfigError as err:
        raise CheckpointError(f"{path}: {err}") from None


# --------------------------------------------------------------------------- any source


HUB_OWNER = "openai-community"


def load(source: str | Path, progress: Progress | None = None) -> tuple[GPT2Config, Parameters]:
    """Weights from an llm.c .bin file, a Hugging Face directory, a hub name, or
    `random` / `random:<size>` (seeded GPT-2 init; sizes as in config.PRESETS)."""
    text = str(source)
    if text == "random" or text.startswith("random:"):
        config = PRESETS["gpt2"] if text == "random" else _preset_or_error(text.split(":", 1)[1])
        return config, random_parameters(config, seed=0, progress=progress)
    path = Path(source).expanduser()
    with os_errors(path, "read"):  # a name too long for a path, say
        is_file, is_hf_directory, is_directory = path.is_file(), (path / "config.json").exists(), path.is_dir()
    if is_file:
        return read_llmc(path, progress)
    if is_hf_directory:
        return read_hf(path, progress)
    repo_id = hub_repo_id(text)
    if repo_id is not None:
        return read_hf(download_from_hub(repo_id), progress)
    if is_directory:
        raise CheckpointError(f"{path}: a directory without config.json, so not a Hugging Face GPT-2 directory")
    raise CheckpointError(f"{source}: no such file or directory, and not a model name "
                          f"({', '.join(PRESETS)} or random)")


def hub_repo_id(name: str) -> str | None:
    """The hub repository of a GPT-2 name (gpt2, 124M, openai-community/gpt2-xl, ...), else None."""
    name = PRESET_ALIASES.get(name, name).removeprefix(f"{HUB_OWNER}/")
    return f"{HUB_OWNER}/{name}" if name in PRESETS else None


def _preset_or_error(name: str) -> GPT2Config:
    try:
        return preset(name)
    except ConfigError as err:
        raise CheckpointError(str(err)) from None


def check_parameters(config: GPT2Config, params: Parameters, where: str) -> None:
    """CheckpointError naming `where` unless `params` holds every tensor of `config`, each of its shape."""
    for name, shape in config.parameter_shapes().items():
        if name not in params:
            raise CheckpointError(f"{where}: parameters lack {name}")
        if tuple(params[name].shape) != shape:
            raise CheckpointError(f"{where}: {name} has shape {tuple(params[name].shape)}, expected {shape}")


# --------------------------------------------------------------------------- command line


def main(argv=None) -> int:
    parser = OneLineArgumentParser(prog="python -m gpt2kit.gpt2.checkpoint", description="Convert GPT-2 weights.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    convert = commands.add_parser("convert", help="write SOURCE as an llm.c float32 checkpoint (version 3), "
                                                  "the format of the course's gpt2_124M.bin",
                                  description="Write SOURCE as an llm.c float32 checkpoint (version 3).")
    convert.add_argument("source", metavar="SOURCE", help="a hub name (gpt2, gpt2-medium, ...), a Hugging Face "
                                                          "directory, an llm.c .bin file, or random / random:<size>")
    convert.add_argument("out", metavar="OUT.bin", help="the file to write (replaced if it exists)")
    args = parser.parse_args(argv)
    return run_command("gpt2kit.gpt2.checkpoint", lambda: convert_to_llmc(args.source, args.out))


def convert_to_llmc(source, out) -> None:
    """Convert, with each tenth of the reading and of the writing said on stderr (a 1.5B model takes a minute)."""
    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    check_writable_file(out)  # before a minute of reading or drawing
    config, params = load(source, progress)
    write_llmc(out, config, params, progress=progress)
    print(f"wrote {out}: GPT-2 of {config.num_parameters() / 1e6:.0f}M parameters (L={config.num_layers} "
          f"NH={config.num_heads} C={config.channels}) as an llm.c float32 checkpoint, version 3, "
          f"{Path(out).stat().st_size} bytes")


if __name__ == "__main__":
    sys.exit(main())
