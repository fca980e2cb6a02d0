"""The tests every kernel gets; each test_<kernel>.py imports them and sets KERNEL.

Cases come from reference.checks (pytest_generate_tests in conftest.py). Each case
draws fresh seeded inputs, poisons the outputs with NaN, calls the kernel, checks the
inputs are unchanged and every output element is within its documented tolerance.
"""

import pytest

from reference.checks import run_case


@pytest.mark.gpu
def test_matches_numpy_reference(implementation, case):
    result = run_case(implementation, case, against="numpy")
    assert result.passed, result.message


@pytest.mark.gpu
def test_matches_gold(implementation, case):
    result = run_case(implementation, case, against="gold")
    assert result.passed, result.message
