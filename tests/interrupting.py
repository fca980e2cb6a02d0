"""Ctrl-C as a user presses it, sent to a kit command at a moment the test knows.

    stopped = interrupted([sys.executable, "-m", "gpt2kit.gpt2.checkpoint", "convert", ...], when="writing ")
    assert stopped.status == 130 and stopped.seconds < PROMPTLY

The command runs in a child process, with SIGINT at its default (as a terminal's foreground process has it), and
gets SIGINT as soon as it prints a line that `when` matches (a progress line, a step): what it was doing then is
what the Ctrl-C interrupts. pausing() makes the moment a function's call: the child runs the command with that
function made to pause first (in its first call, or its Nth with "module:function@N"), saying so in a line
`pausing in NAME`, as long work would:
- "raise": until the Ctrl-C, whose KeyboardInterrupt goes on from there as from any Python code;
- "swallow": until the Ctrl-C, whose KeyboardInterrupt is dropped, as NumPy's C code sometimes drops one
  (kernel_runtime.commands): the command must stop at its next check;
- "hold": for HOLD_SECONDS whatever comes, as work the command holds Ctrl-C back from would.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import runpy
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).parents[1]
HOLD_SECONDS = 1.0
# A command stops within a second of Ctrl-C on an idle machine (a tenth of that for most); the tests allow a busy
# one more, the suite's other processes beside them: what they prove is that it stops, not how fast the machine is.
PROMPTLY = 5.0


@dataclasses.dataclass
class Stopped:
    status: int
    seconds: float     # from the Ctrl-C to the exit
    lines: list[str]   # what it printed, stdout and stderr together, up to the Ctrl-C and after


def interruptible() -> None:
    """A child's preexec_fn where a test sends it Ctrl-C: SIGINT at its default, as a terminal's foreground process
    has it. A suite started in the background (`pytest &`, nohup) hands its children SIGINT ignored, and Python then
    never raises KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def interrupted(command: list[str], when: str | Callable[[str], bool], cwd: Path = ROOT,
                timeout: float = 120) -> Stopped:
    """Run `command` until it prints a line that starts with `when` (or that when(line) accepts), send it SIGINT,
    and wait for it to end. AssertionError if it ends before."""
    matches = (lambda line: line.startswith(when)) if isinstance(when, str) else when
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=cwd,
                               preexec_fn=interruptible)
    try:
        lines = []
        for line in process.stdout:  # each line as it is printed
            lines.append(line.rstrip("\n"))
            if matches(lines[-1]):
                sent = time.perf_counter()
                process.send_signal(signal.SIGINT)
                break
        else:
            raise AssertionError(f"{command} ended with {process.wait()} before a line matched: {lines}")
        rest = []  # read beside the wait, so that a command that never ends fails the test at `timeout`
        reader = threading.Thread(target=lambda: rest.extend(process.stdout.read().splitlines()))
        reader.start()
        status = process.wait(timeout=timeout)
        seconds = time.perf_counter() - sent
        reader.join()
        return Stopped(status, seconds, lines + rest)
    finally:
        process.kill()
        process.stdout.close()


def pausing(target: str, mode: str) -> list[str]:
    """The start of a command line that runs a kit command (its module and arguments follow) with `target`
    ("module:function", or "module:function@N" for its Nth call) pausing in `mode` (see above)."""
    return [sys.executable, "-m", "tests.interrupting", target, mode]


def _run_pausing() -> None:
    target, mode, command, *arguments = sys.argv[1:]
    function, _, call = target.partition("@")
    module_name, name = function.split(":")
    module = importlib.import_module(module_name)
    original, calls = getattr(module, name), []

    @functools.wraps(original)
    def paused(*args, **kwargs):
        calls.append(args)
        if len(calls) == int(call or 1):
            print(f"pausing in {name}", file=sys.stderr, flush=True)
            if mode == "hold":
                time.sleep(HOLD_SECONDS)
            else:
                try:
                    time.sleep(120)
                except KeyboardInterrupt:
                    if mode == "raise":
                        raise
        return original(*args, **kwargs)

    setattr(module, name, paused)
    sys.argv = [command, *arguments]
    runpy.run_module(command, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    _run_pausing()
