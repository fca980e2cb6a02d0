"""kernel_runtime.recording on real arrays: what is taped, what is allowed, what is refused.

A call is taped: its own kernel launches (CudaKernel, cupy.RawKernel, cupy.RawModule),
and the constants it writes (allocation with zeros or a fill, host-to-device copies).
Viewing device data is allowed; computing on it, copying it, or reading it on the host
is refused by name. Replaying the tape does the launches again after restoring the
constants, so a kernel that accumulates into a zeroed buffer gives the same answer twice.
"""

import re

import numpy as np
import pytest

from kernel_runtime import CudaKernel, recording

pytestmark = pytest.mark.gpu

SOURCE = r"""
extern "C" __global__ void add_one(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1.0f;
}
"""
add_one = CudaKernel(SOURCE, "add_one")


@pytest.fixture
def cupy():
    import cupy

    recording.install()
    return cupy


def test_launches_and_constants_are_taped_and_replayed(cupy):
    raw_kernel = cupy.RawKernel(SOURCE, "add_one")
    raw_function = cupy.RawModule(code=SOURCE).get_function("add_one")
    with recording.record() as taped:
        x = cupy.zeros(5, np.float32)                    # a constant: zeros
        y = cupy.asarray(np.arange(5, dtype=np.float32))  # a constant: a host-to-device copy
        z = cupy.empty(5, np.float32)
        z.fill(10)                                        # a constant: a fill
        z[1:3] = 20                                       # a constant: an assignment of a host value
        add_one((1,), (32,), (x, np.int32(5)))
        raw_kernel((1,), (32,), (y, np.int32(5)))
        raw_function((1,), (32,), (z, np.int32(5)))
    assert taped.refused is None and taped.launches == 3
    assert [step.kind for step in taped.steps] == ["constant"] * 4 + ["launch"] * 3
    expected = [np.ones(5), np.arange(1, 6), [11, 21, 21, 11, 11]]
    for array, want in zip((x, y, z), expected):
        np.testing.assert_array_equal(array.get(), want)
    for array in (x, y, z):
        array.fill(-1)  # what a replay on other inputs finds: anything
    taped.replay()
    for array, want in zip((x, y, z), expected):  # the constants restored, then the launches again
        np.testing.assert_array_equal(array.get(), want)


def test_views_are_allowed(cupy):
    x = cupy.zeros((4, 6), np.float32)
    with recording.record() as taped:
        views = [x.reshape(24), x.ravel(), x[1:3], x[:, 2], x.T, cupy.reshape(x, (6, 4)), cupy.asarray(x),
                 cupy.ascontiguousarray(x), x.view(np.int32), x.squeeze(), len(x), x.shape, x.size]
    assert taped.refused is None and not taped.steps and len(views) == 13


@pytest.mark.parametrize("operation, refusal", [
    (lambda cp, x: x + x, "computed with cupy.ndarray.__add__"),
    (lambda cp, x: x.sum(), "computed with cupy.ndarray.sum"),
    (lambda cp, x: x[cp.asarray([0, 2])], "computed with cupy.ndarray.__getitem__ (it copied device data)"),
    (lambda cp, x: cp.ascontiguousarray(x[:, ::2]), "computed with cupy.ascontiguousarray (it copied device data)"),
    (lambda cp, x: x.copy(), "computed with cupy.ndarray.copy"),
    (lambda cp, x: x.reshape(2, 12).T.reshape(24), "computed with cupy.ndarray.reshape (it copied device data)"),
    (lambda cp, x: cp.exp(x), "computed with cupy.exp"),
    (lambda cp, x: cp.matmul(x, x.T), "computed with cupy.matmul"),
    (lambda cp, x: x.__setitem__(Ellipsis, x[::-1]), "computed with cupy.ndarray.__setitem__ (from device data)"),
    (lambda cp, x: x.get(), "copied device data to the host (cupy.ndarray.get)"),
    (lambda cp, x: cp.asnumpy(x), "copied device data to the host (cupy.asnumpy)"),
    (lambda cp, x: float(x[0, 0]), "copied device data to the host (cupy.ndarray.__float__)"),
    (lambda cp, x: str(x), "copied device data to the host (cupy.ndarray.__str__)"),
    (lambda cp, x: x.__array__(), "copied device data to the host (cupy.ndarray.__array__)"),
    (lambda cp, x: cp.random.default_rng(0).random(3), "computed with cupy.random.default_rng"),
])
def test_computing_and_reading_on_the_host_are_refused(cupy, operation, refusal):
    x = cupy.ones((4, 6), np.float32)
    with recording.record() as taped:
        with pytest.raises(recording.RefusedOperation, match=f"^{re.escape(refusal)}$"):
            operation(cupy, x)
    assert taped.refused == refusal


def test_numpy_on_device_data_is_refused(cupy):
    x = cupy.ones(3, np.float32)
    with recording.record() as taped:
        for attempt in (lambda: np.asarray(x), lambda: np.exp(x), lambda: np.sum(x)):
            with pytest.raises(recording.RefusedOperation):
                attempt()
    assert taped.refused.startswith("copied device data to the host")  # np.asarray, the first attempt


def test_outside_a_recording_nothing_is_refused_or_taped(cupy):
    x = cupy.arange(6, dtype=np.float32).reshape(2, 3)
    assert float((x @ x.T).sum()) == 83  # [[5, 14], [14, 50]]
    assert cupy.asnumpy(x + 1)[1, 2] == 6
