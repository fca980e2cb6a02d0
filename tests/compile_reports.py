"""The compile checks' reports, shared by every process of one pytest run.

A run compiles the same programs again and again: each process of a spread run, and each pytest run inside a
test (a fresh handout's commands, a copy of the kit given with --kernels), compiles every kernel module it
is given for sm_86 and sm_90. A program's report for an architecture follows from the program alone (NVRTC and
the headers are the run's), so the first process to compile it leaves the report in the run's directory,
$KIT_COMPILE_REPORTS, and the others read it there. A compile error is never kept: each process meets it anew.
Within a process, Compiling compiles on several threads at once: NVRTC runs outside the GIL.
"""

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from gpt2kit.kernel_runtime.compiler import KernelResources, ModuleProgram, compile_report

RUN_DIRECTORY = "KIT_COMPILE_REPORTS"


def share_in_this_run() -> Path | None:
    """Make the run's directory, unless a process above this one made it: the directory made here (to remove
    at the end of the run), else None. Set in the environment, it reaches the spread run's workers and every
    pytest run a test starts."""
    if RUN_DIRECTORY in os.environ:
        return None
    directory = Path(tempfile.mkdtemp(prefix="kit-compile-reports-"))
    os.environ[RUN_DIRECTORY] = str(directory)
    return directory


def end_of_run(directory: Path | None) -> None:
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)
        os.environ.pop(RUN_DIRECTORY, None)


def compile_report_once(program: ModuleProgram, arch: str) -> list[KernelResources]:
    """compile_report(program, arch), compiled by the first process of the run that asks for it."""
    directory = Path(os.environ.get(RUN_DIRECTORY, ""))
    if RUN_DIRECTORY not in os.environ or not directory.is_dir():  # a run of its own (a job on another node)
        return compile_report(program, arch)
    path = directory / f"{report_key(program, arch)}.json"
    if path.exists():
        return [KernelResources(**fields) for fields in json.loads(path.read_text())]
    resources = compile_report(program, arch)
    written = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}")
    written.write_text(json.dumps([dataclasses.asdict(r) for r in resources]))
    os.replace(written, path)  # whole or absent to a process reading it
    return resources


def report_key(program: ModuleProgram, arch: str) -> str:
    """The program (source, options, name expressions, backend), the architecture, and NVRTC's and CuPy's
    versions, hashed."""
    import cupy
    from cupy.cuda import nvrtc

    compiled = (arch, dataclasses.astuple(program.program), nvrtc.getVersion(), cupy.__version__)
    return hashlib.sha256(repr(compiled).encode()).hexdigest()


class Compiling:
    """Compile reports made on `threads` threads: start() a program early, report() waits for it. Each program
    is compiled once for an architecture."""

    def __init__(self, threads: int):
        self.pool = ThreadPoolExecutor(threads)
        self.started: dict[tuple[ModuleProgram, str], Future] = {}

    def start(self, program: ModuleProgram, arch: str) -> Future:
        if (program, arch) not in self.started:
            self.started[program, arch] = self.pool.submit(compile_report_once, program, arch)
        return self.started[program, arch]

    def report(self, program: ModuleProgram, arch: str) -> list[KernelResources]:
        """compile_report(program, arch): raises what it raises."""
        return self.start(program, arch).result()

    def close(self) -> None:
        self.pool.shutdown(cancel_futures=True)
