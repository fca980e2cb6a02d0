"""Every `pip install` line the READMEs give resolves from PyPI alone, for both CUDA extras.

Only when asked (KIT_INSTALL_TESTS=1; CI asks): each check asks PyPI, with pip's own
defaults (`--isolated`: no local mirror or config) and the pip the README's commands
upgrade to, for a dry run. A line naming `cuda13` is also checked with `cuda12`, and
the other way round, unless it picks a PyTorch for its CUDA. A line that asks
gpt2kit/kernel_runtime/install_target.py is checked with each requirement it can print. A
CPU-only line must bring no CUDA library and no PyTorch.
"""

import json
import os
import re
import shlex
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from gpt2kit.kernel_runtime import install_target
from tests.readme import READMES, install_lines

ROOT = Path(__file__).parents[1]
ASKED = re.compile(r'"\$\(python3 gpt2kit/kernel_runtime/install_target\.py ?(?P<extras>[^)]*)\)"')

pytestmark = pytest.mark.skipif(os.environ.get("KIT_INSTALL_TESTS") != "1",
                                reason="install checks ask PyPI: set KIT_INSTALL_TESTS=1 to run them")

# pip reads each wheel's dependencies through HTTP range requests instead of downloading it whole: the same
# resolution for a fraction of the bytes (PyTorch's and the CUDA libraries' wheels are hundreds of MB, and a resolve
# may weigh several versions of each). A pip that no longer has the feature resolves the ordinary way.
FAST_DEPS = "--use-feature=fast-deps"
CUDA_PACKAGES = re.compile(r"^(nvidia-|cuda-|cupy|torch$|triton$)", re.IGNORECASE)


def readme_install_lines() -> list[str]:
    """The arguments of every `.venv/bin/pip install` in the READMEs' code blocks, as written (a starter
    kit has no staff README)."""
    found = [line for readme in READMES.values() if readme.exists() for line in install_lines(readme.read_text())]
    return list(dict.fromkeys(found))


def as_chosen(lines: list[str]) -> list[str]:
    """Each line with install_target.py's choice written in: one line for each requirement it can print (a CUDA 13
    driver, a CUDA 12 one, no GPU)."""
    chosen = []
    for line in lines:
        asked = ASKED.search(line)
        extras = asked.group("extras").split() if asked else []
        chosen += [ASKED.sub(f"'{install_target.choose(cuda, extras)[0]}'", line) for cuda in (13, 12, None)] \
            if asked else [line]
    return list(dict.fromkeys(chosen))


def with_both_cuda_extras(lines: list[str]) -> list[str]:
    """Each line, and its twin for the other CUDA major (not for a line that picks its PyTorch for one)."""
    variants = []
    for line in as_chosen(lines):
        variants.append(line)
        for one, other in (("cuda13", "cuda12"), ("cuda12", "cuda13"), ("nvrtc13", "nvrtc12"), ("nvrtc12", "nvrtc13")):
            if one in line and "torch" not in line:
                variants.append(line.replace(one, other))
    return list(dict.fromkeys(variants))


@pytest.fixture(scope="module")
def pip(tmp_path_factory) -> Path:
    """A fresh venv's pip, upgraded from PyPI as the README's commands do."""
    venv = tmp_path_factory.mktemp("pip-check") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "pip"), "--isolated", "install", "--quiet", "-U", "pip"], check=True,
                   timeout=300)
    return venv / "bin" / "pip"


def reachable(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=10)
    except OSError:
        return False
    return True


def test_the_readme_gives_the_setups_it_promises():
    lines = readme_install_lines()
    for expected in ('-e "$(python3 gpt2kit/kernel_runtime/install_target.py)"',
                     '-e "$(python3 gpt2kit/kernel_runtime/install_target.py test)"',
                     "-e '.[cuda13,test]'", "-e '.[cuda12,test]'", "-e '.[test]'", "-e .",
                     "-e '.[nvrtc13,test]'", "-e '.[cuda13,test,hf]' 'torch>=2.11'",
                     "-e '.[cuda12,test,hf]' 'torch>=2.4,<2.11'", "-e '.[test,hf]'", "-e '.[experiments]'"):
        assert expected in lines, f"{expected} is in no README"


@pytest.mark.parametrize("arguments", with_both_cuda_extras(readme_install_lines()))
def test_install_line_resolves_from_pypi(pip, arguments):
    index = re.search(r"--index-url (\S+)", arguments)
    if index and not reachable(index.group(1)):
        pytest.skip(f"{index.group(1)} is not reachable from here")
    command = [str(pip), "--isolated", "install", "--dry-run", "--quiet", "--report", "-", FAST_DEPS,
               *shlex.split(arguments)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=900)
    if done.returncode != 0 and "--use-feature: invalid choice" in done.stderr:  # a pip without fast-deps
        command.remove(FAST_DEPS)
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert done.returncode == 0, f"pip install {arguments}: " + done.stderr[-3000:]
    names = [item["metadata"]["name"] for item in json.loads(done.stdout)["install"]]
    if not re.search(r"cuda|nvrtc|hf|torch", arguments):
        assert not [n for n in names if CUDA_PACKAGES.match(n)], f"a CPU-only setup brings {names}"
