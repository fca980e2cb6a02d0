"""Bad arguments give one clear KernelArgumentError naming the argument, never a CUDA crash."""

import cupy
import numpy as np
import pytest

from gpt2.cuda import KernelArgumentError
from reference.checks import FUNCTIONS, build, cases

pytestmark = pytest.mark.gpu

MISTAKES = ("float64", "too-small", "host-array", "not-contiguous")


def broken_call(kernel, mistake):
    """A valid call of `kernel` with its first input array broken in one way."""
    problem = build(cases(kernel)[1])
    args = {k: (cupy.zeros(v, np.float32) if k in problem.output_names else v) for k, v in problem.args.items()}
    args = {k: (cupy.asarray(v) if isinstance(v, np.ndarray) else v) for k, v in args.items()}
    name = next(k for k, v in problem.inputs().items() if v.dtype == np.float32)
    good = args[name]
    args[name] = {
        "float64": good.astype(np.float64),
        "too-small": good.ravel()[:-1],
        "host-array": cupy.asnumpy(good),
        "not-contiguous": cupy.repeat(good.ravel(), 2)[::2],
    }[mistake]
    return args, name


@pytest.mark.parametrize("mistake", MISTAKES)
@pytest.mark.parametrize("kernel", list(FUNCTIONS))
def test_bad_argument_is_named(kernel_package, kernel, mistake):
    args, name = broken_call(kernel, mistake)
    with pytest.raises(KernelArgumentError, match=rf"{FUNCTIONS[kernel]}: {name}\b") as raised:
        getattr(kernel_package, FUNCTIONS[kernel])(*args.values())
    assert "\n" not in str(raised.value)


def test_attention_rejects_heads_that_do_not_divide_channels(kernel_package):
    B, T, C, NH = 1, 4, 10, 3
    out, qkvr = cupy.zeros(B * T * C, np.float32), cupy.zeros(3 * B * T * C, np.float32)
    att, inp = cupy.zeros(B * NH * T * T, np.float32), cupy.zeros(B * T * 3 * C, np.float32)
    with pytest.raises(KernelArgumentError, match="not a multiple of NH"):
        kernel_package.attention_forward(out, qkvr, att, inp, B, T, C, NH)
