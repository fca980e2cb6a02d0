"""gpt2kit: the GPT-2 CUDA kernel kit, under one import name.

In a checkout, the folders students and TAs open sit at its top, and the machinery in
gpt2kit/. This package's __path__ holds the checkout's top as well as gpt2kit/, so both
import as its subpackages, installed with pip install -e or not at all (PYTHONPATH=.):

    gpt2kit.kernels                       kernels/: bound by path, one directory a process (below)
    gpt2kit.gpt2, gpt2kit.reference,      gpt2/, reference/, grading/, benchmarks/
    gpt2kit.grading, gpt2kit.benchmarks
    gpt2kit.kernel_runtime, ...           gpt2kit/kernel_runtime/, model_runtime/, generation/,
                                          training/, gptj/, wav2vec2/

A wheel (pip install .) holds them all inside gpt2kit/ (pyproject.toml maps the top's
folders into it), so it puts this one name into site-packages.

gpt2kit.kernels is never found on __path__: a process runs one kernels directory, which
gpt2kit.kernel_runtime.loader binds (a student's, a submission's, or this kit's own), and
an import of it before any is bound binds this kit's own through the loader too. kernels/
holds no __init__.py: run from the checkout's top, it would take the top-level name
`kernels` from Hugging Face's package, which transformers imports.

    python -m gpt2kit "The meaning of life is"      GPT-2's command (gpt2/__main__.py)
"""

import importlib.machinery
import sys
from pathlib import Path

COURSE_FOLDERS = ("kernels", "gpt2", "reference", "grading", "benchmarks")  # at a checkout's top
INSTALLED = (Path(__file__).resolve().parent / "reference").is_dir()  # a wheel maps the course folders in here
KIT_ROOT = Path(__file__).resolve().parents[0 if INSTALLED else 1]  # the directory holding the course folders
PATH_ENTRY = Path(__file__).resolve().parents[1]  # the directory holding gpt2kit/: what PYTHONPATH names
if not INSTALLED:
    __path__.append(str(KIT_ROOT))


class KernelsThroughTheLoader:
    """Finds gpt2kit.kernels and its modules, ahead of every other finder. The package is the loader's (a directory
    it bound is in sys.modules already; before any, this kit's own kernels/), and a module of it comes from the
    bound directory or from nowhere: never from another finder (an editable install's maps gpt2kit.kernels to the
    checkout's kernels/)."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        package = f"{__name__}.kernels"
        if name == package:
            from gpt2kit.kernel_runtime.loader import kernels_spec
            return kernels_spec()
        if not name.startswith(f"{package}."):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return spec


sys.meta_path.insert(0, KernelsThroughTheLoader)
