"""The milestone variants (reference.variants): each on every case of its host function,
judged under its own precision profile (unless --profile or $KIT_PROFILE names another),
where its module or profile is not its host function's own (the others' cases are
test_kernels.py's, as they are), and its calls showing its technique: the compiled code of the kernels it launched and
what they executed, or its cuBLAS calls, judged as the grader judges them
(reference.techniques).

    pytest tests/kernels/test_variants.py -k tf32

A variant's tests skip while what it runs is still a handout's TODO stub, in the line that
names it (the `calls` marker, tests/conftest.py); that line is the failure of its host
function's test_is_written (test_kernels.py), or of its own below when its module is not
its host function's.
"""

import pytest

from gpt2kit.kernel_runtime.compiler import programs_in
from gpt2kit.reference.execution import execute
from gpt2kit.reference.judging import run_case
from gpt2kit.reference.registry import SPECS, build, cases, host_function, kernel_module, not_written_yet
from gpt2kit.reference.techniques import TECHNIQUES, missing_technique_here, static_classes
from gpt2kit.reference.variants import VARIANTS, resolve_profile


def pytest_generate_tests(metafunc):
    if "variant_case" in metafunc.fixturenames:
        seed = metafunc.config.getoption("seed")
        metafunc.parametrize("variant_case", [pytest.param((v, c), marks=calls(v), id=f"{v.name}-{c.id}")
                                              for v in OWN_CASES for c in SPECS[v.function].test_cases(seed)])


OWN_CASES = [v for v in VARIANTS.values() if (v.module, v.profile_name) != (SPECS[v.function].module, "fp32")]


def calls(variant):
    return pytest.mark.calls(variant.function, module=variant.module)


def marked(variants) -> list:
    """`variants` as parameters, each marked with what it calls."""
    return [pytest.param(v, marks=calls(v), id=v.name) for v in variants]


@pytest.mark.parametrize("variant", [v for v in VARIANTS.values() if v.module != SPECS[v.function].module],
                         ids=lambda v: v.name)
def test_variant_is_written(variant):
    stub = not_written_yet([variant.function], variant.module)
    if stub:
        pytest.fail(stub, pytrace=False)


@pytest.mark.gpu
@pytest.mark.parametrize("against", ["numpy", "gold"])
def test_variant_matches_the_reference_under_its_profile(variant_case, against, pytestconfig):
    variant, case = variant_case
    profile = resolve_profile(pytestconfig.getoption("profile"), [variant])
    result = run_case(host_function(variant.function, variant.module), case, against=against,
                      profile=profile, permit=variant.permit)
    assert result.passed, f"{variant.name} under {profile.name}: {result.message}"


WITH_TECHNIQUE = [v for v in VARIANTS.values() if v.technique]  # the KV cache's variants need none


@pytest.mark.gpu
@pytest.mark.parametrize("variant", marked(WITH_TECHNIQUE))
def test_variant_calls_show_its_technique(variant, pytestconfig):
    function = host_function(variant.function, variant.module)
    problems = [build(case) for case in cases(variant.function, pytestconfig.getoption("seed"))]
    executions = [execute(function, problem, permit=variant.permit) for problem in problems]
    assert missing_technique_here(variant.technique, executions, problems) is None


@pytest.mark.nvrtc
@pytest.mark.parametrize("variant", marked(v for v in WITH_TECHNIQUE if TECHNIQUES[v.technique].in_ptx))
def test_variant_module_compiles_to_its_technique(variant):
    found = static_classes([(m.program, None) for m in programs_in(kernel_module(variant.module))])
    assert any(TECHNIQUES[variant.technique].shown_by(classes) for classes in found.values()), found
