"""The kit's `kernels` package and Hugging Face's, which share an import name."""

import pytest


def test_a_class_of_hugging_face_s_kernels_package_is_refused_in_one_line_naming_the_fix():
    with pytest.raises(ImportError) as refused:
        from kernels import CUDAProperties  # noqa: F401  (what transformers 5.25 and later import)
    assert "pip install 'transformers<5.25'" in str(refused.value) and "\n" not in str(refused.value)


def test_the_kit_s_own_modules_still_import_from_the_package():
    from kernels import residual

    assert callable(residual.residual_forward)
    assert not hasattr(__import__("kernels"), "no_such_module")
