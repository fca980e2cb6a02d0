"""Bad arguments give one clear KernelArgumentError naming the argument, never a CUDA crash."""

import numpy as np
import pytest

from gpt2kit.kernel_runtime import KernelArgumentError
from gpt2kit.reference.execution import call_arguments
from gpt2kit.reference.registry import SPECS, build, host_function

pytestmark = pytest.mark.gpu

MISTAKES = ("float64", "too-small", "host-array", "not-contiguous")


def broken_call(spec, mistake):
    """A valid call of `spec`'s host function with its first float32 input (or its first input) broken in one
    way."""
    import cupy

    problem = build(spec.test_cases()[1])
    args = call_arguments(problem, cupy)  # as the tests call it: outputs of their own dtypes
    inputs = problem.inputs()  # its first float32 input, else its first (a reordering's rows)
    name = next((k for k, v in inputs.items() if v.dtype == np.float32), next(iter(inputs)))
    good = args[name]
    args[name] = {
        "float64": good.astype(np.float64),
        "too-small": good.ravel()[:-1],
        "host-array": cupy.asnumpy(good),
        "not-contiguous": cupy.repeat(good.ravel(), 2)[::2],
    }[mistake]
    return args, name


@pytest.mark.parametrize("mistake", MISTAKES)
@pytest.mark.parametrize("function", [pytest.param(f, marks=pytest.mark.calls(f)) for f in SPECS])
def test_bad_argument_is_named(function, mistake):
    args, name = broken_call(SPECS[function], mistake)
    with pytest.raises(KernelArgumentError, match=rf"{function}: {name}\b") as raised:
        host_function(function)(*args.values())
    assert "\n" not in str(raised.value)


@pytest.mark.calls("attention_forward")
def test_attention_rejects_heads_that_do_not_divide_channels():
    import cupy

    B, T, C, NH = 1, 4, 10, 3
    out, qkvr = cupy.zeros(B * T * C, np.float32), cupy.zeros(3 * B * T * C, np.float32)
    att, inp = cupy.zeros(B * NH * T * T, np.float32), cupy.zeros(B * T * 3 * C, np.float32)
    with pytest.raises(KernelArgumentError, match="not a multiple of NH"):
        host_function("attention_forward")(out, qkvr, att, inp, B, T, C, NH)


@pytest.mark.calls("decode_attention_forward")
@pytest.mark.parametrize("case_index", [1, 4], ids=["HS48", "ring"])
def test_decode_attention_reads_caches_that_are_not_16_byte_aligned(case_index):
    """A contiguous view one float into its allocation is valid input; the kernel then reads float by
    float, and the host must size its groups of keys for that path, or some would never be summed."""
    import cupy

    from gpt2kit.reference.judging import allowed_errors, compare, expected_outputs

    spec = SPECS["decode_attention_forward"]
    problem = build(spec.test_cases()[case_index])
    values = {k: problem.arguments.initial.get(k, v) for k, v in problem.args.items() if k != "out"}  # the caches'
    args = {k: cupy.asarray(v) if isinstance(v, np.ndarray) else v for k, v in values.items()}  # content, not shape
    for name in ("qkv", "k_cache", "v_cache"):
        padded = cupy.concatenate([cupy.zeros(1, np.float32), args[name].ravel()])
        args[name] = padded[1:]  # 4 bytes past a 16-byte boundary
        assert args[name].data.ptr % 16 == 4
    out = cupy.full(problem.args["out"], np.nan, np.float32)
    host_function("decode_attention_forward")(out, *args.values())
    expected = expected_outputs(problem)
    got = {"out": cupy.asnumpy(out)} | {name: cupy.asnumpy(args[name]).reshape(expected[name].shape)
                                        for name in ("k_cache", "v_cache")}
    result = compare(problem.case, got, expected, allowed_errors(problem, expected))
    assert result.passed, result.message
