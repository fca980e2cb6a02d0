"""The command that fetches GPT-2's BPE file, which every text family reads (model_runtime.tokenizer).

    python -m gpt2kit.gpt2.tokenizer fetch            # through PyPI, verified, into the kit's cache directory
    python -m gpt2kit.gpt2.tokenizer encode "Hello"   # the token ids of a text
"""

from __future__ import annotations

import hashlib
import sys

from gpt2kit.kernel_runtime.commands import OneLineArgumentParser, run_command
from gpt2kit.model_runtime.tokenizer import BPE_SHA256, WHISPER_SDIST, bpe_path, check_storable, fetch, get_tokenizer


def main(argv=None) -> int:
    parser = OneLineArgumentParser(prog="python -m gpt2kit.gpt2.tokenizer", description="GPT-2's BPE file")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("fetch", help="download GPT-2's BPE file through PyPI and verify it")
    encode = commands.add_parser("encode", help="print the token ids of a text")
    encode.add_argument("text")
    args = parser.parse_args(argv)
    if args.command == "encode":
        return run_command("gpt2kit.gpt2.tokenizer", lambda: print(get_tokenizer().encode(args.text)))
    return run_command("gpt2kit.gpt2.tokenizer", fetch_once)


def fetch_once() -> None:
    """`fetch`, unless GPT-2's BPE file is where bpe_path() says already."""
    path = bpe_path()
    if path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == BPE_SHA256:
        print(f"GPT-2 BPE file already present: {path}")
        return
    check_storable(path)
    print(f"fetching GPT-2's BPE file from PyPI ({WHISPER_SDIST} sdist) ...", flush=True)
    print(f"verified sha256 and stored {fetch(path)}")


if __name__ == "__main__":
    sys.exit(main())
