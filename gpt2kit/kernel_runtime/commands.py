"""What the kit's commands share: a mistake on the command line is one line, status 2;
a KitError while running is one line too; Ctrl-C and a closed pipe end quietly.

    parser = OneLineArgumentParser(prog="python -m gpt2kit")
    parser.add_argument("--max-new-tokens", type=NON_NEGATIVE_INT, default=64)
    # python -m gpt2kit: argument --max-new-tokens: must be an integer >= 0, got -1 (see --help)
    return run_command("gpt2kit", lambda: complete(args))
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import signal
import sys
import threading
from typing import Callable

from gpt2kit.kernel_runtime.errors import KitError


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


def check_installed(needed: dict[str, str]) -> None:
    """KitError naming the first module of `needed` (import name -> what needs it and how to install it) that this
    Python cannot import: said before a command's long work rather than after it."""
    for module, why in needed.items():
        if importlib.util.find_spec(module) is None:
            raise KitError(f"{module} is not installed: {why}")


def run_command(program: str, body: Callable[[], int | None], error_status: int = 1) -> int:
    """`body()`'s exit status (None: 0); a KitError prints `program: message` and gives `error_status`."""
    try:
        with _interrupts_recorded():
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


# NumPy's random generators sometimes swallow a Ctrl-C: Python's C handler runs (it writes the
# signal's number to the wakeup file descriptor) but no KeyboardInterrupt is ever raised; about 1 in
# 200 Ctrl-Cs sent while `Generator.standard_normal` fills an array on a busy machine. A command
# records the signals in a pipe of its own, and raise_lost_interrupt() raises one that was lost.
_recorded: list[int] = []  # the read end of the pipe of the command running, while one runs


@contextlib.contextmanager
def _interrupts_recorded():
    if threading.current_thread() is not threading.main_thread():  # only the main thread receives signals
        yield
        return
    read, write = os.pipe()
    os.set_blocking(read, False)
    os.set_blocking(write, False)
    previous = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    _recorded.append(read)
    try:
        yield
    finally:
        _recorded.remove(read)
        signal.set_wakeup_fd(previous)
        os.close(read)
        os.close(write)


def raise_lost_interrupt() -> None:
    """KeyboardInterrupt if a Ctrl-C reached the running command without raising one (see above). Called where
    a command passes from one long step to the next: a lost Ctrl-C takes effect there."""
    if not _recorded:
        return
    try:
        received = os.read(_recorded[-1], 512)
    except BlockingIOError:
        return
    if signal.SIGINT in received:
        raise KeyboardInterrupt


def forget_interrupts() -> None:
    """Drop the Ctrl-Cs recorded so far: for a command that has answered one (training saves its state before it
    stops), so that only a new Ctrl-C stops that answer."""
    while _recorded:
        try:
            if not os.read(_recorded[-1], 512):
                return
        except BlockingIOError:
            return


@contextlib.contextmanager
def interrupts_deferred():
    """Hold a Ctrl-C back while the block runs, and raise it once the block is done: for short work that must be
    done whole or not at all (an optimizer's update of every parameter). Where Ctrl-C is not Python's
    KeyboardInterrupt (ignored, as in a background job, or handled otherwise), nothing changes."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield
        return
    received = []
    signal.signal(signal.SIGINT, lambda number, frame: received.append(number))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if received:
        raise KeyboardInterrupt
