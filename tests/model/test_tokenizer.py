"""GPT-2's tokenizer, from the BPE file the README's setup fetches."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpt2kit.model_runtime.tokenizer import END_OF_TEXT, TokenizerMissing, get_tokenizer


@pytest.fixture(scope="module")
def enc():
    try:
        return get_tokenizer()
    except TokenizerMissing as err:
        pytest.fail(f"{err} (the README's setup fetches it)")


def test_known_ids(enc):
    assert enc.encode("Hello, world!") == [15496, 11, 995, 0]
    assert enc.encode(" the") == [262]


def test_end_of_text_is_special(enc):
    assert enc.encode("<|endoftext|>") == [END_OF_TEXT] == [50256]
    assert enc.decode([END_OF_TEXT]) == "<|endoftext|>"


@pytest.mark.parametrize("text", ["", "plain ascii", "  spaces\n\ttabs", "naïve café ☕ 日本語", "1234567 + 42"])
def test_round_trip(enc, text):
    assert enc.decode(enc.encode(text)) == text


def test_vocabulary_size(enc):
    assert enc.vocab_size == 50257


def test_missing_file_says_how_to_get_it(tmp_path, monkeypatch):
    import tiktoken

    monkeypatch.setenv("GPT2_KIT_CACHE", str(tmp_path))
    monkeypatch.delenv("GPT2_BPE_FILE", raising=False)
    monkeypatch.setattr(tiktoken, "get_encoding", lambda name: (_ for _ in ()).throw(OSError("offline")))
    get_tokenizer.cache_clear()
    try:
        with pytest.raises(TokenizerMissing, match=r"run `python -m gpt2kit.gpt2.tokenizer fetch`") as raised:
            get_tokenizer()
        assert "\n" not in str(raised.value)
    finally:
        get_tokenizer.cache_clear()


def test_a_corrupt_file_is_refused(tmp_path, monkeypatch):
    bad = tmp_path / "gpt2.tiktoken"
    bad.write_text("SGVsbG8= 0\n")
    monkeypatch.setenv("GPT2_BPE_FILE", str(bad))
    get_tokenizer.cache_clear()
    try:
        with pytest.raises(TokenizerMissing, match=f"^{bad}: not GPT-2's BPE file"):
            get_tokenizer()
    finally:
        get_tokenizer.cache_clear()


@pytest.mark.parametrize("environment, path, why", [
    ({"GPT2_KIT_CACHE": "/proc/kit"}, "/proc/kit/gpt2.tiktoken", "cannot write in /proc ("),
    ({"GPT2_KIT_CACHE": "{tmp}/a-file"}, "{tmp}/a-file/gpt2.tiktoken", "{tmp}/a-file is not a directory"),
    ({"HOME": "/proc/self"}, "/proc/self/.cache/gpt2-cuda-kit/gpt2.tiktoken", "cannot write in /proc/self ("),
    ({"HOME": "{tmp}/read-only"}, "{tmp}/read-only/.cache/gpt2-cuda-kit/gpt2.tiktoken",
     "cannot write in {tmp}/read-only (Permission denied)"),
], ids=["cache-in-proc", "cache-is-a-file", "home-in-proc", "home-read-only"])
def test_fetch_names_a_place_it_cannot_store_the_file_before_downloading(tmp_path, environment, path, why):
    """One line, nothing downloaded (nothing said of fetching), also where the home takes no file at all (CuPy's
    kernel cache is made there as it is imported)."""
    (tmp_path / "a-file").write_text("")
    (tmp_path / "read-only").mkdir(mode=0o555)
    if environment.get("HOME", "").endswith("read-only") and os.geteuid() == 0:
        pytest.skip("root writes in a read-only directory (the /proc cases stand for it)")
    environ = {k: v for k, v in os.environ.items() if k not in ("GPT2_KIT_CACHE", "GPT2_BPE_FILE")}
    environ |= {name: value.format(tmp=tmp_path) for name, value in environment.items()}
    done = subprocess.run([sys.executable, "-m", "gpt2kit.gpt2.tokenizer", "fetch"], capture_output=True, text=True,
                          cwd=Path(__file__).parents[2], env=environ, timeout=120)
    message = (f"gpt2kit.gpt2.tokenizer: cannot store GPT-2's BPE file: {path}: {why}").format(tmp=tmp_path)
    assert (done.returncode, done.stdout) == (1, "") and done.stderr.startswith(message), done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr
