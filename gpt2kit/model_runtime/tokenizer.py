"""GPT-2's byte-pair encoding, through tiktoken, working offline: what the text families read (GPT-J's
vocabulary is GPT-2's, padded).

    from gpt2kit.model_runtime.tokenizer import get_tokenizer
    enc = get_tokenizer()
    enc.encode("Hello, world!")   # [15496, 11, 995, 0]
    enc.decode([15496, 11, 995, 0])

The BPE table is tiktoken's r50k_base file (GPT-2's 50257 tokens, <|endoftext|> =
50256). `python -m gpt2kit.gpt2.tokenizer fetch` gets it through PyPI, from the sdist of
openai-whisper (whisper/assets/gpt2.tiktoken is the same file), checks its sha256
against the one tiktoken expects, and stores it in the kit's cache directory:
$GPT2_KIT_CACHE, else ~/.cache/gpt2-cuda-kit. $GPT2_BPE_FILE points at a copy
elsewhere (either, set but empty, counts as unset). When neither exists, tiktoken's
own download is tried (needs the network). Where the file cannot be stored is one
line before anything is downloaded.
"""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from gpt2kit.kernel_runtime import KitError
from gpt2kit.kernel_runtime.files import OutputPathError, check_writable_file, replacing

END_OF_TEXT = 50256
BPE_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"  # tiktoken's r50k_base
WHISPER_SDIST = "openai-whisper==20250625"
WHISPER_MEMBER = "whisper/assets/gpt2.tiktoken"
# GPT-2's pre-tokenisation pattern, as tiktoken writes it for r50k_base
PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""


class TokenizerMissing(KitError):
    """GPT-2's BPE file is not on this machine."""


def cache_dir() -> Path:
    return Path(os.environ.get("GPT2_KIT_CACHE") or Path.home() / ".cache" / "gpt2-cuda-kit")


def bpe_path() -> Path:
    return Path(os.environ.get("GPT2_BPE_FILE") or cache_dir() / "gpt2.tiktoken")


class Tokenizer:
    def __init__(self, encoding):
        self._encoding = encoding
        self.eot_token = END_OF_TEXT
        self.vocab_size = encoding.n_vocab

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`; a literal <|endoftext|> becomes token 50256."""
        return self._encoding.encode(text, allowed_special={"<|endoftext|>"})

    def decode(self, ids) -> str:
        """Text of `ids`. An id past the BPE's (GPT-J's LM head has 143 more rows, never trained to be chosen)
        reads as <|extratoken_N|>, N from 1, as GPT-J's tokenizer in transformers names them."""
        text, run = [], []
        for i in map(int, ids):
            if i < self.vocab_size:
                run.append(i)
                continue
            text += [self._encoding.decode(run), f"<|extratoken_{i - self.vocab_size + 1}|>"]
            run = []
        return "".join(text) + self._encoding.decode(run)


@functools.lru_cache(maxsize=None)
def get_tokenizer() -> Tokenizer:
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    path = bpe_path()
    if path.is_file():
        try:
            ranks = load_tiktoken_bpe(str(path), expected_hash=BPE_SHA256)
        except OSError as err:
            raise TokenizerMissing(f"{path}: cannot read GPT-2's BPE file ({err.strerror or err})") from None
        except ValueError:  # tiktoken's word for a sha256 that differs
            raise TokenizerMissing(f"{path}: not GPT-2's BPE file (its sha256 is not r50k_base's)") from None
        encoding = tiktoken.Encoding(name="gpt2", pat_str=PATTERN, mergeable_ranks=ranks,
                                     special_tokens={"<|endoftext|>": END_OF_TEXT})
        return Tokenizer(encoding)
    try:
        return Tokenizer(tiktoken.get_encoding("r50k_base"))
    except Exception:  # offline and not in tiktoken's cache
        raise TokenizerMissing(f"GPT-2's BPE file is missing ({path}): run `python -m gpt2kit.gpt2.tokenizer fetch` "
                               f"(needs PyPI) or set GPT2_BPE_FILE to a copy of gpt2.tiktoken") from None


def check_storable(destination: Path) -> None:
    """TokenizerMissing, one line, unless fetch can store the BPE file at `destination` (its missing directories
    made): said before the download."""
    try:
        check_writable_file(destination, parents_made=True)
    except OutputPathError as err:
        raise TokenizerMissing(f"cannot store GPT-2's BPE file: {err}; choose a place for it with $GPT2_KIT_CACHE "
                               "(a directory) or $GPT2_BPE_FILE") from None


def fetch(destination: Path | None = None) -> Path:
    """Download openai-whisper's sdist from PyPI, take gpt2.tiktoken out, verify, store."""
    destination = destination or bpe_path()
    check_storable(destination)
    with tempfile.TemporaryDirectory() as tmp:
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
                   "--dest", tmp, WHISPER_SDIST]
        done = subprocess.run(command, capture_output=True, text=True)
        archives = list(Path(tmp).glob("openai_whisper-*.tar.gz")) + list(Path(tmp).glob("openai-whisper-*.tar.gz"))
        if done.returncode != 0 or not archives:
            reason = (done.stderr.strip().splitlines() or ["no archive"])[-1]
            raise TokenizerMissing(f"could not download {WHISPER_SDIST} from PyPI: {reason}")
        with tarfile.open(archives[0]) as archive:
            member = next((m for m in archive.getmembers() if m.name.endswith(WHISPER_MEMBER)), None)
            if member is None:
                raise TokenizerMissing(f"{archives[0].name} holds no {WHISPER_MEMBER}")
            data = archive.extractfile(member).read()
    digest = hashlib.sha256(data).hexdigest()
    if digest != BPE_SHA256:
        raise TokenizerMissing(f"{WHISPER_MEMBER} has sha256 {digest}, expected {BPE_SHA256}")
    destination.parent.mkdir(parents=True, exist_ok=True)
    with replacing(destination) as partial:
        partial.write_bytes(data)
    return destination
