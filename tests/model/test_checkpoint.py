"""Checkpoints: llm.c and Hugging Face round trips, and one clear line for every bad file."""

import json
import re
import signal
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gpt2kit.gpt2 import checkpoint
from gpt2kit.model_runtime import checkpoint_files
from gpt2kit.gpt2.checkpoint import (LLMC_HEADER_INTS, CheckpointError, hub_repo_id, load, perturbed_parameters,
                                     random_parameters, read_hf, read_llmc, write_hf, write_llmc)
from gpt2kit.gpt2.config import GPT2Config, preset
from gpt2kit.gpt2.model import GPT2
from tests.interrupting import PROMPTLY, interrupted, pausing
from tests.model.helpers import TINY

ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def params():
    return perturbed_parameters(TINY, seed=5)


def assert_same(a: dict, b: dict):
    assert list(a) == list(b)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def test_llmc_float32_round_trip(tmp_path, params):
    write_llmc(tmp_path / "m.bin", TINY, params)
    config, loaded = read_llmc(tmp_path / "m.bin")
    assert config == TINY
    assert_same(params, loaded)


def test_llmc_bfloat16_round_trip_rounds_to_nearest(tmp_path, params):
    write_llmc(tmp_path / "m.bin", TINY, params, dtype="bfloat16")
    _, loaded = read_llmc(tmp_path / "m.bin")
    for name, original in params.items():
        # bfloat16 keeps 8 significant bits: round to nearest is within half of 2^-7 relative
        np.testing.assert_allclose(loaded[name], original, rtol=2.0**-8, atol=0, err_msg=name)
        assert np.any(loaded[name] != original) or np.all(original == 0) or name.startswith("ln")


def test_llmc_header_layout(tmp_path, params):
    write_llmc(tmp_path / "m.bin", TINY, params)
    header = np.fromfile(tmp_path / "m.bin", dtype="<i4", count=LLMC_HEADER_INTS)
    assert list(header[:8]) == [20240326, 3, 64, 50257, 2, 4, 64, 50304]
    assert not header[8:].any()
    first = np.fromfile(tmp_path / "m.bin", dtype="<f4", count=5, offset=4 * LLMC_HEADER_INTS)
    np.testing.assert_array_equal(first, params["wte"].ravel()[:5])


def corrupt(path, offset, values):
    data = bytearray(path.read_bytes())
    data[offset:offset + 4 * len(values)] = np.array(values, dtype="<i4").tobytes()
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage, message", [
    (lambda p: corrupt(p, 0, [12345]), r"not an llm.c GPT-2 checkpoint \(magic 12345"),
    (lambda p: corrupt(p, 4, [4]), r"unsupported llm.c checkpoint version 4"),
    (lambda p: p.write_bytes(p.read_bytes()[:-10]), r"truncated: .* expected"),
    (lambda p: p.write_bytes(p.read_bytes() + b"\0" * 8), r"has trailing bytes"),
    (lambda p: p.write_bytes(p.read_bytes()[:100]), r"too short for an llm.c checkpoint header"),
    (lambda p: corrupt(p, 5 * 4, [3]), r"header describes no valid GPT-2 .*not a multiple"),
    (lambda p: corrupt(p, 4 * 4, [-2]), r"header describes no valid GPT-2 .*num_layers must be a positive"),
    (lambda p: corrupt(p, 2 * 4, [1 << 30]), r"truncated: .* max_T=1073741824"),
    (lambda p: (p.unlink(), p.mkdir()), r"cannot read \(Is a directory\)"),
], ids=["magic", "version", "truncated", "trailing", "short", "bad-heads", "negative-layers", "huge-context",
        "directory"])
def test_bad_llmc_file_gives_one_line(tmp_path, params, damage, message):
    path = tmp_path / "m.bin"
    write_llmc(path, TINY, params)
    damage(path)
    with pytest.raises(CheckpointError, match=message) as raised:
        read_llmc(path)
    assert str(path) in str(raised.value) and "\n" not in str(raised.value)


def test_hf_round_trip_single_and_sharded(tmp_path, params):
    write_hf(tmp_path / "one", TINY, params)
    write_hf(tmp_path / "many", TINY, params, max_shard_bytes=2_000_000)
    shards = sorted(p.name for p in (tmp_path / "many").glob("*.safetensors"))
    assert len(shards) > 1 and shards[0] == f"model-00001-of-{len(shards):05d}.safetensors"
    for directory in ("one", "many"):
        config, loaded = read_hf(tmp_path / directory)
        assert config == TINY
        assert_same(params, loaded)


def rewrite_config(directory, **changes):
    path = directory / "config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config))


def rewrite_header(directory, edit):
    """Rewrite model.safetensors with its JSON header replaced by edit(header)."""
    path = directory / "model.safetensors"
    data = path.read_bytes()
    length = struct.unpack("<Q", data[:8])[0]
    encoded = json.dumps(edit(json.loads(data[8:8 + length]))).encode()
    encoded += b" " * (-len(encoded) % 8)
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + data[8 + length:])


def without(mapping, key):
    return {k: v for k, v in mapping.items() if k != key}


def drop_tensor(directory, name):
    rewrite_header(directory, lambda header: without(header, name))


def set_tensor_field(directory, name, **fields):
    rewrite_header(directory, lambda header: header | {name: header[name] | fields})


def drop_tensor_field(directory, name, field):
    rewrite_header(directory, lambda header: header | {name: without(header[name], field)})


def replace_with_directory(path):
    path.unlink()
    path.mkdir()


@pytest.mark.parametrize("damage, message", [
    (lambda d: (d / "config.json").unlink(), r"config.json: cannot read \(No such file or directory\)"),
    (lambda d: replace_with_directory(d / "config.json"), r"config.json: cannot read \(Is a directory\)"),
    (lambda d: (d / "config.json").write_text("[1, 2]"), r"config.json: holds a JSON list, expected an object"),
    (lambda d: (d / "config.json").write_text("null"), r"config.json: holds a JSON null, expected an object"),
    (lambda d: (d / "config.json").write_text("{"), r"config.json: not valid JSON"),
    (lambda d: rewrite_config(d, n_embd="64"), r"config.json: n_embd must be a positive integer, got '64'"),
    (lambda d: rewrite_config(d, n_layer=True), r"config.json: n_layer must be a positive integer, got True"),
    (lambda d: rewrite_config(d, n_head=3), r"config.json: channels=64 is not a multiple of num_heads=3"),
    (lambda d: rewrite_config(d, layer_norm_epsilon="small"), r"layer_norm_epsilon 'small' is not 1e-5"),
    (lambda d: rewrite_config(d, activation_function="relu"), r"activation_function 'relu'"),
    (lambda d: rewrite_config(d, layer_norm_epsilon=1e-6), r"layer_norm_epsilon"),
    (lambda d: drop_tensor(d, "transformer.h.1.mlp.c_fc.weight"), r"missing tensor h.1.mlp.c_fc.weight"),
    (lambda d: set_tensor_field(d, "transformer.h.0.attn.c_attn.weight", shape=[192, 64]),
     r"tensor h.0.attn.c_attn.weight has shape \(192, 64\), expected \(64, 192\)"),
    (lambda d: set_tensor_field(d, "transformer.wpe.weight", dtype="I64"), r"wpe.weight has dtype I64"),
    (lambda d: (d / "model.safetensors").write_bytes((d / "model.safetensors").read_bytes()[:-100]),
     r"truncated: tensor"),
    (lambda d: (d / "model.safetensors").unlink(), r"no model.safetensors"),
    (lambda d: replace_with_directory(d / "model.safetensors"), r"model.safetensors: cannot read \(Is a directory\)"),
    (lambda d: (d / "model.safetensors").write_bytes(b"\0" * 4), r"too short for a safetensors file"),
    (lambda d: rewrite_header(d, lambda header: list(header)), r"safetensors header holds a JSON list"),
    (lambda d: drop_tensor_field(d, "transformer.wte.weight", "data_offsets"),
     r"tensor transformer.wte.weight: data_offsets must be \[begin, end\], got None"),
    (lambda d: set_tensor_field(d, "transformer.wte.weight", data_offsets=[8, 4]),
     r"tensor transformer.wte.weight: data_offsets must be \[begin, end\], got \[8, 4\]"),
    (lambda d: set_tensor_field(d, "transformer.wte.weight", dtype=["F32"]),
     r"tensor transformer.wte.weight: dtype must be a name such as F32, got \['F32'\]"),
    (lambda d: drop_tensor_field(d, "transformer.wte.weight", "shape"),
     r"tensor transformer.wte.weight: shape must be a list of sizes, got None"),
    (lambda d: rewrite_header(d, lambda header: header | {"transformer.wpe.weight": [0, 16]}),
     r"tensor transformer.wpe.weight: header entry is a JSON list, expected an object"),
    (lambda d: set_tensor_field(d, "transformer.wte.weight", data_offsets=[0, 16]),
     r"tensor wte.weight of shape \(50257, 64\) in F32 needs 12865792 bytes, its data_offsets hold 16"),
], ids=["no-config", "config-is-a-directory", "config-list", "config-null", "config-not-json", "config-string-size",
        "config-bool-size", "config-heads", "config-eps-string", "activation", "eps", "missing-tensor", "shape",
        "dtype", "truncated", "no-weights", "weights-are-a-directory", "weights-too-short", "header-list",
        "no-offsets", "offsets-backwards", "dtype-list", "no-shape", "entry-list", "data-too-short"])
def test_bad_hf_directory_gives_one_line(tmp_path, params, damage, message):
    write_hf(tmp_path, TINY, params)
    damage(tmp_path)
    with pytest.raises(CheckpointError, match=message) as raised:
        read_hf(tmp_path)
    assert str(tmp_path) in str(raised.value) and "\n" not in str(raised.value)


def rewrite_index(directory, index):
    (directory / "model.safetensors.index.json").write_text(json.dumps(index))


@pytest.mark.parametrize("damage, message", [
    (lambda d: rewrite_index(d, ["weight_map"]), r"index.json: holds a JSON list, expected an object"),
    (lambda d: rewrite_index(d, {"weight_map": ["model-00001-of-00002.safetensors"]}),
     r"index.json: weight_map must map tensor names to file names"),
    (lambda d: (d / "model-00002-of-00002.safetensors").unlink(), r"model-00002-of-00002.safetensors: missing shard"),
], ids=["index-list", "weight-map-list", "missing-shard"])
def test_bad_sharded_hf_directory_gives_one_line(tmp_path, params, damage, message):
    write_hf(tmp_path, TINY, params, max_shard_bytes=10_000_000)
    assert len(list(tmp_path.glob("*.safetensors"))) == 2
    damage(tmp_path)
    with pytest.raises(CheckpointError, match=message) as raised:
        read_hf(tmp_path)
    assert "\n" not in str(raised.value)


def test_load_dispatches_and_names_unknown_sources(tmp_path, params):
    write_llmc(tmp_path / "m.bin", TINY, params)
    assert load(tmp_path / "m.bin")[0] == TINY
    write_hf(tmp_path / "hf", TINY, params)
    assert load(tmp_path / "hf")[0] == TINY
    with pytest.raises(CheckpointError, match="nope.bin: no such file or directory, and not a model name"):
        load(tmp_path / "nope.bin")
    with pytest.raises(CheckpointError, match="unknown GPT-2 size 'huge'"):
        load("random:huge")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="empty: a directory without config.json, so not a Hugging Face"):
        load(tmp_path / "empty")


@pytest.mark.parametrize("name, repo_id", [
    ("gpt2", "openai-community/gpt2"), ("124M", "openai-community/gpt2"), ("gpt2-xl", "openai-community/gpt2-xl"),
    ("openai-community/gpt2-medium", "openai-community/gpt2-medium"), ("gpt3", None),
    ("openai-community/124M", None), ("someone/gpt2", None),
])
def test_hub_names(name, repo_id):
    assert hub_repo_id(name) == repo_id


def test_hub_name_wins_over_a_directory_without_config(tmp_path, monkeypatch, params):
    """Where a folder is named like the model (the kit's own gpt2/ package), "gpt2" still means the hub's."""
    write_hf(tmp_path / "snapshot", TINY, params)
    downloads = []
    monkeypatch.setattr(checkpoint, "download_from_hub", lambda repo_id: downloads.append(repo_id) or
                        tmp_path / "snapshot")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gpt2").mkdir()
    assert load("gpt2")[0] == TINY
    assert GPT2.from_pretrained("gpt2", backend="reference").config == TINY
    assert downloads == ["openai-community/gpt2"] * 2
    write_hf(tmp_path / "gpt2", TINY, params)  # a directory with config.json is a local checkpoint
    assert load("gpt2")[0] == TINY and len(downloads) == 2


def convert(capsys, *args) -> tuple[int, str, str]:
    try:
        status = checkpoint.main(["convert", *map(str, args)])
    except SystemExit as exit:
        status = exit.code
    captured = capsys.readouterr()
    return status, captured.out, captured.err


PROGRESS_LINE = re.compile(r"^(reading|writing|initialising) .+: \d+% \(\d+ of \d+ MB\)$")


def assert_progress(err: str, *steps: str):
    """stderr holds progress lines only: each of `steps` (such as "reading m.bin") counts up to 100%."""
    lines = err.splitlines()
    assert all(PROGRESS_LINE.match(line) for line in lines), lines
    for step in steps:
        percents = [int(line.split(": ")[-1].split("%")[0]) for line in lines if line.startswith(step + ": ")]
        assert percents and percents == sorted(percents) and percents[-1] == 100, (step, lines)


def test_convert_writes_llmc_float32(tmp_path, params, capsys):
    write_hf(tmp_path / "hf", TINY, params)
    status, out, err = convert(capsys, tmp_path / "hf", tmp_path / "from_hf.bin")
    assert status == 0
    assert_progress(err, f"reading {tmp_path / 'hf'}", f"writing {tmp_path / 'from_hf.bin'}")
    assert out == (f"wrote {tmp_path / 'from_hf.bin'}: GPT-2 of 3M parameters (L=2 NH=4 C=64) as an llm.c float32 "
                   f"checkpoint, version 3, {(tmp_path / 'from_hf.bin').stat().st_size} bytes\n")
    config, loaded = read_llmc(tmp_path / "from_hf.bin")
    assert config == TINY
    assert_same(params, loaded)
    assert convert(capsys, tmp_path / "from_hf.bin", tmp_path / "again.bin")[0] == 0
    assert (tmp_path / "again.bin").read_bytes() == (tmp_path / "from_hf.bin").read_bytes()


@pytest.mark.parametrize("args, status, message", [
    (("{tmp}/nope", "{tmp}/out.bin"), 1, ("gpt2kit.gpt2.checkpoint: {tmp}/nope: no such file or directory, and not a "
                                          "model name (gpt2, gpt2-medium, gpt2-large, gpt2-xl or random)")),
    (("{tmp}/model.bin",), 2, ("python -m gpt2kit.gpt2.checkpoint convert: the following arguments are required: "
                               "OUT.bin (see --help)")),
])
def test_convert_errors_are_one_line(tmp_path, params, capsys, args, status, message):
    write_llmc(tmp_path / "model.bin", TINY, params)
    result, out, err = convert(capsys, *(arg.format(tmp=tmp_path) for arg in args))
    *progress, last = err.splitlines()
    assert (result, out, last) == (status, "", message.format(tmp=tmp_path))
    assert_progress("\n".join(progress))  # reading went as far as it did


@pytest.mark.parametrize("out, message", [
    ("{tmp}/no/such/dir/out.bin", "{tmp}/no/such/dir/out.bin: no directory {tmp}/no/such/dir to write it in"),
    ("{tmp}", "{tmp}: is a directory; name a file to write"),
    ("{tmp}/model.bin/out.bin", "{tmp}/model.bin/out.bin: {tmp}/model.bin is not a directory"),
], ids=["no-directory", "a-directory", "under-a-file"])
def test_an_output_convert_cannot_write_is_refused_before_the_weights_are_made(tmp_path, params, capsys, out,
                                                                               message):
    write_llmc(tmp_path / "model.bin", TINY, params)
    status, printed, err = convert(capsys, "random:gpt2-medium", out.format(tmp=tmp_path))
    assert (status, printed, err) == (1, "", f"gpt2kit.gpt2.checkpoint: {message.format(tmp=tmp_path)}\n")


def test_convert_runs_as_a_module(tmp_path, params):
    write_hf(tmp_path / "hf", TINY, params)
    done = subprocess.run([sys.executable, "-m", "gpt2kit.gpt2.checkpoint", "convert", str(tmp_path / "hf"),
                           str(tmp_path / "out.bin")], capture_output=True, text=True, cwd=ROOT, timeout=120,
                          check=False)
    assert done.returncode == 0
    assert_progress(done.stderr)  # and no runpy warning about a module imported twice
    assert done.stdout.startswith(f"wrote {tmp_path / 'out.bin'}: ")


def test_random_init_follows_gpt2():
    config = GPT2Config.sized(4, 4, 128)
    params = random_parameters(config, seed=1)
    assert np.std(params["qkvw"]) == pytest.approx(0.02, rel=0.02)
    assert np.std(params["fcprojw"]) == pytest.approx(0.02 / np.sqrt(8), rel=0.02)
    assert not params["qkvb"].any() and (params["ln1w"] == 1).all()
    assert not params["wte"][config.vocab_size:].any()
    again = random_parameters(config, seed=1)
    np.testing.assert_array_equal(params["wte"], again["wte"])


@pytest.mark.parametrize("name, layers, channels", [("124M", 12, 768), ("355M", 24, 1024), ("774M", 36, 1280),
                                                     ("1558M", 48, 1600)])
def test_preset_sizes(name, layers, channels):
    config = preset(name)
    assert (config.num_layers, config.channels, config.padded_vocab_size) == (layers, channels, 50304)
    C = channels  # embeddings, then per layer 4 weight matrices (12 C^2) and 13 C of biases and norms
    assert config.num_parameters() == 50304 * C + 1024 * C + layers * (12 * C * C + 13 * C) + 2 * C


def test_124M_has_llmc_parameter_count():
    assert preset("gpt2").num_parameters() == 124475904  # what llm.c prints for gpt2_124M.bin


def leftovers(directory: Path, keep: set[str]) -> list[str]:
    """Files in `directory` other than `keep`: a partial file left behind would be one."""
    return sorted(p.name for p in directory.iterdir() if p.name not in keep)


def test_an_interrupted_write_keeps_the_previous_checkpoint(tmp_path, params, monkeypatch):
    path = tmp_path / "m.bin"
    write_llmc(path, TINY, params)
    before = path.read_bytes()
    to_bfloat16, converted = checkpoint_files.float32_to_bfloat16, []

    def interrupted_on_the_third_call(values):  # as Ctrl-C would, with two tensors' bytes written
        if len(converted) == 2:
            raise KeyboardInterrupt
        converted.append(values)
        return to_bfloat16(values)

    monkeypatch.setattr(checkpoint, "float32_to_bfloat16", interrupted_on_the_third_call)
    with pytest.raises(KeyboardInterrupt):
        write_llmc(path, TINY, params, dtype="bfloat16")
    assert path.read_bytes() == before
    assert leftovers(tmp_path, {"m.bin"}) == []


@pytest.fixture(scope="module")
def zeros_124M(tmp_path_factory) -> Path:
    """An llm.c checkpoint of GPT-2 124M's sizes holding zeros, made sparse: at once, and read back fast, while its
    conversion writes 500 MB, long enough to be interrupted at a progress line."""
    config, path = preset("gpt2"), tmp_path_factory.mktemp("zeros") / "zeros_124M.bin"
    header = np.zeros(LLMC_HEADER_INTS, "<i4")
    header[:8] = [20240326, 3, config.max_T, config.vocab_size, config.num_layers, config.num_heads, config.channels,
                  config.padded_vocab_size]
    with open(path, "wb") as f:
        header.tofile(f)
        f.truncate(header.nbytes + 4 * config.num_parameters())
    return path


def progress_reached(step: str, percent: int):
    """A test of a line: the progress line of `step` ("writing") at `percent` or past it."""
    def matches(line: str) -> bool:
        found = re.match(rf"{step} .*: (\d+)% ", line)
        return found is not None and int(found.group(1)) >= percent
    return matches


@pytest.mark.parametrize("source, moment", [
    ("random:gpt2-medium", progress_reached("initialising", 10)),
    ("zeros", progress_reached("reading", 50)),
    ("zeros", progress_reached("writing", 10)),
    ("zeros", progress_reached("writing", 50)),
], ids=["drawing", "reading", "writing-10%", "writing-50%"])
def test_ctrl_c_stops_convert_at_once_and_keeps_the_previous_checkpoint(tmp_path, params, zeros_124M, source,
                                                                         moment):
    """Ctrl-C as a user presses it, whatever convert is doing: it stops at once (130) and leaves the
    previous checkpoint and nothing beside it; until then its progress lines are all it printed."""
    out = tmp_path / "out.bin"
    write_llmc(out, TINY, params)
    before = out.read_bytes()
    source = zeros_124M if source == "zeros" else source
    stopped = interrupted([sys.executable, "-m", "gpt2kit.gpt2.checkpoint", "convert", str(source), str(out)], moment)
    assert stopped.status == 130 and stopped.seconds < PROMPTLY, stopped
    assert all(PROGRESS_LINE.match(line) for line in stopped.lines if line), stopped.lines
    assert out.read_bytes() == before
    assert leftovers(tmp_path, {"out.bin"}) == []


@pytest.mark.parametrize("mode", ["raise", "swallow"])
def test_ctrl_c_as_the_written_checkpoint_goes_to_disk_keeps_the_previous_one(tmp_path, params, mode):
    """The last moment before the rename: every byte written, the file being flushed to disk. A Ctrl-C there stops
    the rename, even one that was swallowed (the C handler ran, no KeyboardInterrupt came)."""
    source, out = tmp_path / "source.bin", tmp_path / "out.bin"
    write_llmc(source, TINY, params)
    write_llmc(out, TINY, perturbed_parameters(TINY, seed=6))
    before = out.read_bytes()
    stopped = interrupted([*pausing("gpt2kit.kernel_runtime.files:_flush_to_disk", mode), "gpt2kit.gpt2.checkpoint",
                           "convert", str(source), str(out)], "pausing in ")
    assert stopped.status == 130 and stopped.seconds < PROMPTLY, stopped
    assert out.read_bytes() == before
    assert leftovers(tmp_path, {"source.bin", "out.bin"}) == []
