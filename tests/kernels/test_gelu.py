"""Tests of kernels/gelu.py against the NumPy reference and gold."""

from tests.kernels.common import test_matches_gold, test_matches_numpy_reference  # noqa: F401

KERNEL = "gelu"
