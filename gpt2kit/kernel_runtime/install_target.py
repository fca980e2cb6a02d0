"""What to `pip install` on this machine: the README's first lines run it before anything is installed.

    pip install -e "$(python3 gpt2kit/kernel_runtime/install_target.py)"        # .[cuda13], .[cuda12] or .
    pip install -e "$(python3 gpt2kit/kernel_runtime/install_target.py test)"   # the same with the tests' extras

A GPU needs CuPy and the CUDA libraries built for its driver's CUDA major (pip
packages, about 1 GB). A machine without one needs none of that: the model runs on
NumPy there, and the tests only compile the kernels, for which NVRTC alone will do
(nvrtc13, about 100 MB). The driver's CUDA version is the one nvidia-smi prints; a
driver newer than the newest CUDA build runs that build. The choice and its reason
go to stderr, the requirement alone to stdout.

Run as a file (python3 gpt2kit/kernel_runtime/install_target.py): the standard library only,
as nothing else is installed yet.
"""

import re
import subprocess
import sys

NEWEST_CUDA = 13   # the newest CUDA major with an extra in pyproject.toml
OLDEST_CUDA = 12


def driver_cuda_major() -> int | None:
    """The CUDA major version of this machine's NVIDIA driver, or None where there is no driver to ask."""
    try:
        shown = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r"CUDA Version:\s*(\d+)", shown)
    return int(found.group(1)) if found else None


def choose(cuda_major: int | None, extras: list[str]) -> tuple[str, str]:
    """(the requirement, why) for a driver of CUDA `cuda_major` (None: no GPU) and the extras asked for."""
    if cuda_major is not None and cuda_major >= OLDEST_CUDA:
        build = min(cuda_major, NEWEST_CUDA)
        chosen, why = [f"cuda{build}"], f"a CUDA {cuda_major} driver: CuPy and the CUDA {build} libraries"
    else:
        found = "no NVIDIA driver" if cuda_major is None else f"a CUDA {cuda_major} driver, older than CUDA {OLDEST_CUDA}"
        compile_checks = "test" in extras
        chosen = [f"nvrtc{NEWEST_CUDA}"] if compile_checks else []
        why = f"{found}: no CUDA libraries, the model runs on NumPy" + (
            " (NVRTC alone, for the tests' compile checks)" if compile_checks else "")
    chosen += [extra for extra in extras if extra not in chosen]
    return (f".[{','.join(chosen)}]" if chosen else "."), why


def main(extras: list[str]) -> None:
    requirement, why = choose(driver_cuda_major(), extras)
    print(f"installing {requirement}: {why}", file=sys.stderr)
    print(requirement)


if __name__ == "__main__":
    main([extra for argument in sys.argv[1:] for extra in argument.split(",") if extra])
