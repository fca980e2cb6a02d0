"""Milestone 2's technique checks must catch every known-wrong variant in tests/kernels/wrong_technique/:
a variant that computes right without its technique, or with cuBLAS where it is not allowed.

On the GPU each one runs every case of its variant under the variant's profile, and
what catches it must be what CAUGHT_BY says: the technique check (its cases all pass,
so the milestone-1 checks alone would not), as the grader makes it (the compiled code of
the kernels its calls launched, and what they executed), a refusal in its cases, or
its cases failing under the variant's profile (a TF32 kernel claimed as 3xTF32).
Without a GPU the compiled code of the ones that bring kernels of their own shows no
evidence, but for those whose code holds the technique's instructions where they never
run, or in a kernel never launched (IN_THEIR_CODE).
"""

import pytest

from gpt2kit.kernel_runtime.compiler import programs_in
from gpt2kit.reference.execution import execute
from gpt2kit.reference.judging import judge
from gpt2kit.reference.registry import build, cases
from gpt2kit.reference.techniques import TECHNIQUES, missing_technique_here, static_classes
from gpt2kit.reference.variants import VARIANTS
from tests.kernels.wrong_technique import load, names

CAUGHT_BY = {
    "tf32_that_is_plain_fp32": "no evidence of tensor cores",
    "tf32_only_where_counted": "no evidence of tensor cores: none of matmul_plain_unless_counted has",
    "tiled_without_shared_memory": "no evidence of shared memory",
    "tiled_with_hidden_cublas": "refused: computed with cupy.cublas.gemm (cuBLAS is allowed in the cuBLAS variant "
                                "only)",
    "cublas_that_never_calls_it": "no evidence of cublas",
    "layernorm_one_thread_per_row": "no evidence of reduction",
    "flash_that_stores_probabilities": "no evidence of flash",
    "layernorm_matmul_in_two_kernels": "no evidence of fused",
    "layernorm_matmul_gelu_in_three_kernels": "no evidence of fused",
    "matmul_residual_in_two_kernels": "no evidence of fused",
    "split_k_that_never_splits": "no evidence of split k",
    "tf32_claimed_as_3xtf32": "elements wrong",  # the fp32 profile: one TF32 pass is not float32's accuracy
    "flash_tf32_claimed_as_3xtf32": "elements wrong",
    "tf32_in_dead_code": "no evidence of tensor cores: tensor-core instructions (mma.sync, wmma.mma or wgmma) are in "
                         "the compiled code, but the graded cases never executed them",
    "tf32_with_idle_tensor_cores": "no evidence of tensor cores: its tensor-core instructions did",
    "layernorm_beside_a_decoy": "no evidence of reduction: none of layernorm_serial_rows has",
}
# the technique's instructions are in these modules' code: only what was launched, and executed, tells (or, for
# a one-pass kernel claimed as 3xTF32, the profile)
IN_THEIR_CODE = {"tf32_in_dead_code", "tf32_with_idle_tensor_cores", "layernorm_beside_a_decoy",
                 "flash_tf32_claimed_as_3xtf32"}


@pytest.fixture(autouse=True)
def kit_kernels(pytestconfig):
    if pytestconfig.getoption("kernels") is not None:
        pytest.skip("known-wrong variants are checked against the kit's own kernels (run without --kernels)")


def test_every_known_wrong_variant_says_what_catches_it():
    assert set(CAUGHT_BY) == set(names())
    # softmax's technique is caught as layernorm's, local attention's as flash attention's (the same kernel)
    claimed = {name for name, variant in VARIANTS.items() if variant.technique}
    assert {load(name).VARIANT for name in names()} == claimed - {"softmax_reduction", "attention_local"}


@pytest.mark.nvrtc
@pytest.mark.parametrize("name", [n for n in names() if programs_in(load(n)) and TECHNIQUES[
    VARIANTS[load(n).VARIANT].technique].in_ptx and n not in IN_THEIR_CODE])
def test_compiled_code_shows_no_technique(name):
    wrong = load(name)
    found = static_classes([(m.program, None) for m in programs_in(wrong)])
    assert not any(TECHNIQUES[VARIANTS[wrong.VARIANT].technique].shown_by(classes) for classes in found.values())


@pytest.mark.gpu
@pytest.mark.parametrize("name", names())
def test_the_checks_catch_it(name, pytestconfig):
    wrong = load(name)
    variant = VARIANTS[wrong.VARIANT]
    function = getattr(wrong, variant.function)
    problems = [build(case) for case in cases(variant.function, pytestconfig.getoption("seed"))]
    executions, failures = [], []
    for problem in problems:
        execution = execute(function, problem, permit=variant.permit)
        result = judge(problem, execution, profile=variant.profile)
        executions.append(execution)
        failures += [] if result.passed else [f"{problem.case.id}: {result.message}"]
    print(f"\n{name} ({variant.name}): {len(failures)} of {len(executions)} cases fail")
    if failures:
        assert all(CAUGHT_BY[name] in f for f in failures), failures[0]
    else:
        missing = missing_technique_here(variant.technique, executions, problems)
        print(f"  {missing}")
        assert missing is not None and missing.startswith(CAUGHT_BY[name])
