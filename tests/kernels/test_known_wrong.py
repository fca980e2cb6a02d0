"""The kernel tests must reject every known-wrong implementation in tests/kernels/wrong/.

For each one, every case of its kernel is run against the NumPy reference; at least
one must fail. The failing cases are listed, so it is visible which test catches it.
"""

import pytest

from reference.checks import FUNCTIONS, cases, run_case
from tests.kernels.wrong import all_wrong

WRONG = all_wrong()


@pytest.mark.gpu
@pytest.mark.parametrize("wrong", WRONG, ids=[m.__name__.rsplit(".", 1)[1] for m in WRONG])
def test_suite_rejects(wrong, pytestconfig):
    function = getattr(wrong, FUNCTIONS[wrong.KERNEL])
    results = [run_case(function, c) for c in cases(wrong.KERNEL, pytestconfig.getoption("seed"))]
    rejected = [r for r in results if not r.passed]
    print(f"\n{wrong.__name__}: rejected by {len(rejected)} of {len(results)} cases")
    for r in rejected:
        print(f"  {r.case.id}: {r.message[:160]}")
    assert rejected, f"{wrong.__name__} passed every {wrong.KERNEL} case: the tests cannot tell it is wrong"


def test_every_kernel_has_a_known_wrong_implementation():
    assert {m.KERNEL for m in WRONG} == set(FUNCTIONS)
