"""The kit beside Hugging Face's `kernels` package, which transformers 5.25 and later require
and import: the kit's kernels are gpt2kit.kernels, so the name `kernels` is theirs, even
run from the checkout's top, where the folder kernels/ is (it holds no __init__.py, so a
package of that name elsewhere on the path wins over it).

Only when asked (KIT_INSTALL_TESTS=1; CI asks, after installing the newest transformers
and kernels: .ci/run), and where transformers is installed.
"""

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]

pytestmark = pytest.mark.skipif(os.environ.get("KIT_INSTALL_TESTS") != "1",
                                reason="checks beside the newest transformers, which CI installs: set "
                                       "KIT_INSTALL_TESTS=1 to run them")


def test_kernels_is_hugging_face_s_and_the_kit_s_are_gpt2kit_s():
    pytest.importorskip("transformers")
    try:
        installed = Path(importlib.metadata.distribution("kernels").locate_file("kernels/__init__.py")).resolve()
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("Hugging Face's kernels is not installed (transformers 5.25 and later require it)")
    code = ("import kernels, transformers, gpt2kit.kernels.gelu, gpt2kit.gpt2.model; "
            "print(kernels.__file__, gpt2kit.kernels.gelu.__file__, sep='\\n')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    theirs, ours = (Path(line).resolve() for line in done.stdout.split())
    assert theirs == installed, f"Hugging Face's kernels is shadowed by {theirs}"
    assert ours == (ROOT / "kernels" / "gelu.py").resolve()
