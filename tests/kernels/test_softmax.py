"""Tests of softmax_forward (kernels/attention.py), on its own, including in place."""

from tests.kernels.common import test_matches_gold, test_matches_numpy_reference  # noqa: F401

KERNEL = "softmax"
