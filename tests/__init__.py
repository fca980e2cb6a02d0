"""The kit's tests. KIT_PACKAGES: the folders of the kit's Python at the checkout's top, but tests/ (gpt2kit/ and the
course folders it imports as its own: a student's kit has no grading/), so that a test that copies the kit copies
these."""

from pathlib import Path

import gpt2kit

_ROOT = Path(__file__).parents[1]
KIT_PACKAGES = tuple(sorted(name for name in ("gpt2kit", *gpt2kit.COURSE_FOLDERS) if (_ROOT / name).is_dir()))
