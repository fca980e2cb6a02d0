"""What the kit's commands share: a mistake on the command line is one line, status 2.

    parser = OneLineArgumentParser(prog="python -m gpt2")
    parser.add_argument("--max-new-tokens", type=NON_NEGATIVE_INT, default=64)
    # python -m gpt2: argument --max-new-tokens: must be an integer >= 0, got -1 (see --help)
"""

from __future__ import annotations

import argparse


class OneLineArgumentParser(argparse.ArgumentParser):
    """argparse, with a mistake on the command line reported in one line (no usage block), status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: {message} (see --help)\n")


def checked(convert, accept, rule: str):
    """An argparse type: `convert` the text and keep the value if `accept` takes it, else say it `must be {rule}`."""
    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            value = None
        if value is None or not accept(value):
            raise argparse.ArgumentTypeError(f"must be {rule}, got {text}")
        return value
    return parse


NON_NEGATIVE_INT = checked(int, lambda n: n >= 0, "an integer >= 0")
POSITIVE_INT = checked(int, lambda n: n >= 1, "an integer >= 1")
