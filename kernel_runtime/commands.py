"""What the kit's commands share: a mistake on the command line is one line, status 2;
a KitError while running is one line too; Ctrl-C and a closed pipe end quietly.

    parser = OneLineArgumentParser(prog="python -m gpt2")
    parser.add_argument("--max-new-tokens", type=NON_NEGATIVE_INT, default=64)
    # python -m gpt2: argument --max-new-tokens: must be an integer >= 0, got -1 (see --help)
    return run_command("gpt2", lambda: complete(args))
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Callable

from kernel_runtime.errors import KitError


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

# Every seed of the kit, on any command line or in $KIT_SEED: reference.spec mixes a base seed
# into each case's seed mod 2**31, so a larger seed would repeat a smaller one's inputs.
SEED_LIMIT = 2**31
SEED = checked(int, lambda n: 0 <= n < SEED_LIMIT, "a seed, an integer from 0 to 2**31 - 1")


def run_command(program: str, body: Callable[[], int | None], error_status: int = 1) -> int:
    """`body()`'s exit status (None: 0); a KitError prints `program: message` and gives `error_status`."""
    try:
        return body() or 0
    except KitError as err:
        print(f"{program}: {err}", file=sys.stderr)
        return error_status
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader of stdout has gone (`| head`). Point stdout at /dev/null so that
        # Python's last flush at exit does not fail again, and exit as cat or grep do
        # when SIGPIPE ends them: 128 + 13, which says that not all the text was taken.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
