"""Every host function with a spec in reference/specs/, on every one of its cases.

Each case draws fresh seeded inputs (the seed is in the test id; --seed N or KIT_SEED
draws others), poisons the outputs with NaN, calls the host function of the kernels
directory under test, checks the inputs are unchanged and every output element is
within its documented tolerance (reference/specs/), then replays the call's own
kernel launches on a second set of inputs and checks those outputs too.

In a starter kit each host function's test_is_written fails, in one line naming it and
its file, while what it runs still holds the handout's TODO stub; its cases skip with
the same line (the `calls` marker, tests/conftest.py).

    pytest tests/kernels -k layernorm      # one host function's cases
    pytest tests/kernels --profile tf32    # bounds for TF32 tensor cores (reference.precision)
"""

import pytest

from reference.judging import run_case
from reference.registry import SPECS, host_function, not_written_yet


def pytest_generate_tests(metafunc):
    if "case" in metafunc.fixturenames:
        seed = metafunc.config.getoption("seed")
        all_cases = [case for spec in SPECS.values() for case in spec.test_cases(seed)]
        metafunc.parametrize("case", [pytest.param(c, marks=pytest.mark.calls(c.function), id=f"{c.function}-{c.id}")
                                      for c in all_cases])


@pytest.mark.parametrize("function", list(SPECS))
def test_is_written(function):
    stub = not_written_yet([function])
    if stub:
        pytest.fail(stub, pytrace=False)


@pytest.mark.gpu
def test_matches_numpy_reference(case, pytestconfig):
    result = run_case(host_function(case.function), case, against="numpy", profile=pytestconfig.precision_profile)
    assert result.passed, result.message


@pytest.mark.gpu
def test_matches_gold(case, pytestconfig):
    result = run_case(host_function(case.function), case, against="gold", profile=pytestconfig.precision_profile)
    assert result.passed, result.message
