"""The kernel tests must reject every known-wrong implementation and cheat in tests/kernels/wrong/.

For each one, every case of its host function is run against the NumPy reference;
at least one must fail. The failing cases are listed, so it is visible which check
catches it. These test the kit's tests, against the kit's own kernels: with
--kernels they skip.
"""

import pytest

from gpt2kit.reference.judging import run_case
from gpt2kit.reference.registry import cases, graded
from tests.kernels.wrong import load, names


@pytest.fixture(autouse=True)
def kit_kernels(pytestconfig):
    if pytestconfig.getoption("kernels") is not None:
        pytest.skip("known-wrong implementations are checked against the kit's own kernels (run without --kernels)")


@pytest.mark.gpu
@pytest.mark.parametrize("name", names())
def test_suite_rejects(name, pytestconfig):
    wrong = load(name)
    results = [run_case(getattr(wrong, wrong.FUNCTION), c) for c in cases(wrong.FUNCTION, pytestconfig.getoption("seed"))]
    rejected = [r for r in results if not r.passed]
    print(f"\n{name}: rejected by {len(rejected)} of {len(results)} cases")
    for r in rejected:
        print(f"  {r.case.id}: {r.message[:160]}")
    assert rejected, f"{name} passed every {wrong.FUNCTION} case: the tests cannot tell it is wrong"


def test_every_graded_host_function_has_a_known_wrong_implementation():
    mistakes = {load(name).FUNCTION for name in names() if not name.startswith("cheat_")}
    assert {spec.function for spec in graded()} <= mistakes
