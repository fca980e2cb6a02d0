"""GPT-2's tokenizer, from the BPE file the README's setup fetches."""

import pytest

from gpt2.tokenizer import END_OF_TEXT, TokenizerMissing, get_tokenizer


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
        with pytest.raises(TokenizerMissing, match=r"run `python -m gpt2.tokenizer fetch`") as raised:
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
