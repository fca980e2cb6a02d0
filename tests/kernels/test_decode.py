"""Tests of kernels/decode.py: the KV-cache kernels, against the NumPy reference and gold.

The cache cases poison exactly the rows the call must write and fill the rest with
earlier content that must survive; the attention cases put NaN past each row's
length, which must never be read.
"""

import pytest

from reference.checks import DECODE_FUNCTIONS, cases, run_case

import kernels.decode as decode

DECODE_CASES = [c for kernel in DECODE_FUNCTIONS for c in cases(kernel)]


@pytest.mark.gpu
@pytest.mark.parametrize("against", ["numpy", "gold"])
@pytest.mark.parametrize("decode_case", DECODE_CASES, ids=lambda c: f"{c.kernel}-{c.id}")
def test_decode_kernel(decode_case, against):
    result = run_case(getattr(decode, DECODE_FUNCTIONS[decode_case.kernel]), decode_case, against=against)
    assert result.passed, result.message
