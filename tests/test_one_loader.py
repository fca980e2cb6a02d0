"""One loader: a kernels directory is loaded the same way by every path that runs it.

The submission here is a whole kit (with its own tests/) whose residual.py imports
its own encoder module, which holds a mark the kit's encoder lacks: wherever the
residual were handed the kit's encoder instead, its import would fail. Every path
runs it: pytest --kernels (also for the GPU-less compile checks), the quick check,
the step check, the benchmarks, the model's kernels backend and the grader's worker.
"""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpt2kit.model_runtime.ops import MODEL_FUNCTIONS
from tests import KIT_PACKAGES

ROOT = Path(__file__).parents[1]
MARK = "the submission's own encoder"


@pytest.fixture(scope="module")
def own_kit(tmp_path_factory):
    kit = tmp_path_factory.mktemp("mine")
    for name in (*KIT_PACKAGES, "tests"):
        if (ROOT / name).exists():  # a student's kit has no grading/
            shutil.copytree(ROOT / name, kit / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", kit)
    with open(kit / "kernels" / "encoder.py", "a") as f:
        f.write(f"\nMARK = {MARK!r}\n")
    with open(kit / "kernels" / "residual.py", "a") as f:
        f.write("\nfrom gpt2kit.kernels.encoder import MARK  # noqa: E402,F401  (this kit's own encoder)\n")
    return kit


def run(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT, timeout=timeout)


@pytest.mark.nvrtc
def test_pytest_compiles_the_kernels_it_is_given(own_kit):
    # residual.py, which imports the kit's own encoder: the compile checks of the other kernels add nothing here
    done = run("-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/kernels/test_compile.py", "-k", "residual",
               "--kernels", str(own_kit))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    assert f"kernel resources (NVRTC, no GPU needed) of {own_kit / 'kernels'}" in done.stdout


@pytest.mark.nvrtc
def test_pytest_reports_a_compile_error_in_the_kernels_it_is_given(own_kit, tmp_path):
    broken = tmp_path / "kernels"
    shutil.copytree(own_kit / "kernels", broken)
    gelu = broken / "gelu.py"
    gelu.write_text(gelu.read_text().replace("float cube = 0.044715f * x * x * x;", "float cube = 0.044715f * x * y;"))
    done = run("-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/kernels/test_compile.py", "-k", "gelu",
               "--kernels", str(broken))
    assert done.returncode == 1
    assert f"{gelu}:" in done.stdout and 'identifier "y" is undefined' in done.stdout


@pytest.mark.calls(*MODEL_FUNCTIONS)  # the copy holds the kit's kernels, which the backend refuses as stubs
def test_the_model_backend_loads_the_kernels_it_is_given(own_kit):
    done = run("-c", "import sys; from gpt2kit.model_runtime.backends import kernel_ops; "
                     "ops = kernel_ops(sys.argv[1]); print(sys.modules[ops.residual_forward.__module__].MARK)",
               str(own_kit))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == MARK


def test_a_bad_kernels_option_is_one_line():
    done = run("-m", "pytest", "-q", "tests/kernels/test_compile.py", "--kernels", "/nowhere/at/all")
    assert done.returncode == 4 and "ERROR: --kernels: no kernels directory at /nowhere/at/all" in done.stderr


@pytest.mark.gpu
@pytest.mark.calls(*MODEL_FUNCTIONS)  # the copy holds the kit's kernels
@pytest.mark.parametrize("command", [
    ("-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/kernels", "-k", "residual", "--kernels", "{kit}"),
    ("-m", "gpt2kit.reference.verify", "--kernels", "{kit}", "--seed", "5"),
    ("-m", "gpt2kit.gpt2.step_check", "--kernels", "{kit}", "--batch", "1", "--tokens", "8"),
    ("-m", "gpt2kit.benchmarks.kernels", "--kernels", "{kit}", "--only", "residual"),
    ("-c", "import sys; from gpt2kit.gpt2.model import GPT2; from gpt2kit.gpt2.checkpoint import random_parameters; "
           "from gpt2kit.gpt2.config import GPT2Config; config = GPT2Config.sized(2, 2, 64); "
           "model = GPT2(config, random_parameters(config), backend='kernels', kernels=sys.argv[1]); "
           "model([[1, 2, 3]]); print(sys.modules['gpt2kit.kernels.residual'].MARK)", "{kit}"),
], ids=["pytest", "quick-check", "step-check", "benchmark", "model"])
def test_every_path_runs_the_submission_s_own_files(own_kit, command):
    done = run(*(part.format(kit=own_kit) for part in command))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.mark.gpu
@pytest.mark.skipif(not (ROOT / "grading").exists(), reason="this kit has no grader")
def test_the_grader_runs_the_submission_s_own_files(own_kit):
    from gpt2kit.grading.grade import grade_item
    from gpt2kit.grading.items import load_scheme

    scheme = load_scheme()
    grade = grade_item(own_kit, scheme.item("residual"), scheme, seed=3)
    assert grade.score == scheme.item("residual").weight, grade.reason
