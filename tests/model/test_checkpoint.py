"""Checkpoints: llm.c and Hugging Face round trips, and one clear line for every bad file."""

import json
import struct

import numpy as np
import pytest

from gpt2.checkpoint import (LLMC_HEADER_INTS, CheckpointError, load, random_parameters, read_hf, read_llmc,
                             write_hf, write_llmc)
from gpt2.config import GPT2Config, preset
from tests.model.helpers import TINY, perturbed_parameters


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
], ids=["magic", "version", "truncated", "trailing", "short", "bad-heads"])
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


def edit_header(directory, edit):
    """Rewrite model.safetensors with `edit` applied to its JSON header."""
    path = directory / "model.safetensors"
    data = path.read_bytes()
    length = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + length])
    edit(header)
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + data[8 + length:])


def drop_tensor(directory, name):
    edit_header(directory, lambda header: header.pop(name))


def set_tensor_field(directory, name, **fields):
    edit_header(directory, lambda header: header[name].update(fields))


@pytest.mark.parametrize("damage, message", [
    (lambda d: (d / "config.json").unlink(), r"config.json: missing"),
    (lambda d: rewrite_config(d, activation_function="relu"), r"activation_function 'relu'"),
    (lambda d: rewrite_config(d, layer_norm_epsilon=1e-6), r"layer_norm_epsilon"),
    (lambda d: drop_tensor(d, "transformer.h.1.mlp.c_fc.weight"), r"missing tensor h.1.mlp.c_fc.weight"),
    (lambda d: set_tensor_field(d, "transformer.h.0.attn.c_attn.weight", shape=[192, 64]),
     r"tensor h.0.attn.c_attn.weight has shape \(192, 64\), expected \(64, 192\)"),
    (lambda d: set_tensor_field(d, "transformer.wpe.weight", dtype="I64"), r"wpe.weight has dtype I64"),
    (lambda d: (d / "model.safetensors").write_bytes((d / "model.safetensors").read_bytes()[:-100]),
     r"truncated: tensor"),
    (lambda d: (d / "model.safetensors").unlink(), r"no model.safetensors"),
], ids=["no-config", "activation", "eps", "missing-tensor", "shape", "dtype", "truncated", "no-weights"])
def test_bad_hf_directory_gives_one_line(tmp_path, params, damage, message):
    write_hf(tmp_path, TINY, params)
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
