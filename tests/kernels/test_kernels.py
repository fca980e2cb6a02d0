"""Every host function with a spec in reference/specs/, on every one of its cases.

Each case draws fresh seeded inputs (the seed is in the test id; --seed N or KIT_SEED
draws others), poisons the outputs with NaN, calls the host function of the kernels
directory under test, checks the inputs are unchanged and every output element is
within its documented tolerance (reference/specs/), then replays the call's own
kernel launches on a second set of inputs and checks those outputs too. Each function's smallest
case is also run twice in a row, as a later call finds what an earlier one kept.

In a starter kit each host function's test_is_written fails, in one line naming it and
its file, while what it runs still holds the handout's TODO stub; its cases skip with
the same line (the `calls` marker, tests/conftest.py).

    pytest tests/kernels -k layernorm      # one host function's cases
    pytest tests/kernels --profile tf32    # bounds for TF32 tensor cores (reference.precision)
"""

import math

import pytest

from gpt2kit.reference.judging import run_case
from gpt2kit.reference.registry import SPECS, host_function, not_written_yet
from gpt2kit.reference.spec import Case


def smallest_plain_case(cases: list[Case]) -> Case:
    """The case with the fewest elements, normal values and no variant where there is one."""
    plain = [case for case in cases if case.values == "normal" and not case.variant] or cases
    return min(plain, key=lambda case: math.prod(case.size.values()))


def pytest_generate_tests(metafunc):
    seed = metafunc.config.getoption("seed")
    for name, cases_of in (("case", lambda spec: spec.test_cases(seed)),
                           ("smallest_case", lambda spec: [smallest_plain_case(spec.test_cases(seed))])):
        if name in metafunc.fixturenames:
            cases = [case for spec in SPECS.values() for case in cases_of(spec)]
            metafunc.parametrize(name, [pytest.param(c, marks=pytest.mark.calls(c.function),
                                                     id=f"{c.function}-{c.id}") for c in cases])


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


@pytest.mark.gpu
def test_a_second_call_in_the_same_process_passes_too(smallest_case, pytestconfig):
    """The same case twice in a row: what a host function keeps from one call to the next (kernels compiled
    once, scratch made once per shape and kept) must change neither its answer nor its replay."""
    for call in ("first", "second"):
        result = run_case(host_function(smallest_case.function), smallest_case, against="numpy",
                          profile=pytestconfig.precision_profile)
        assert result.passed, f"{call} call: {result.message}"
