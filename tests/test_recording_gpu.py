"""gpt2kit.kernel_runtime.recording on real arrays: what is taped, what is allowed, what is refused,
and kernel_runtime.replay of what was taped.

A call is taped as data: its own kernel launches (CudaKernel, cupy.RawKernel,
cupy.RawModule), each argument a pointer into a buffer or a typed scalar, and the
constants it writes (allocation with zeros or a fill, host-to-device copies). Viewing
device data is allowed; computing on it, copying it, or reading it on the host is refused
by name. A replay, from the tape's JSON, on arrays of its own, compiles the programs
anew and does the steps again: constants, then launches.
"""

import re

import numpy as np
import pytest

from gpt2kit.kernel_runtime import CudaKernel, recording
from gpt2kit.kernel_runtime.replay import count_instructions, replay
from gpt2kit.kernel_runtime.tape import Launch, Pointer, Scalar, Tape, Write
from gpt2kit.reference.techniques import INSTRUCTION_CLASSES

pytestmark = pytest.mark.gpu

SOURCE = r"""
extern "C" __global__ void add_one(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1.0f;
}

extern "C" __global__ void copy(float* out, const float* in, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i];
    if (n < 0) out[0] = __expf(in[0]);  // never runs: its instruction is in the code only
}
"""
add_one = CudaKernel(SOURCE, "add_one")

# A kernel with 1 KB of static shared memory whose dynamic shared memory is as large as its launch says: thread i
# writes i + seed at floats i, i + 256, ... of it and reads back the last one it wrote, so a launch gets all of it
SHARED_SOURCE = r"""
extern "C" __global__ void through_shared(float* out, int floats, float seed) {
    extern __shared__ float dynamic[];
    __shared__ float own[256];
    int last = -1;
    for (int i = threadIdx.x; i < floats; i += blockDim.x) { dynamic[i] = i + seed; last = i; }
    own[threadIdx.x] = last < 0 ? seed : dynamic[last];
    __syncthreads();
    out[threadIdx.x] = own[threadIdx.x];
}
"""
through_shared = CudaKernel(SHARED_SOURCE, "through_shared")


@pytest.fixture
def cupy():
    import cupy

    recording.install()
    return cupy


def test_launches_and_constants_are_taped_as_data_and_replayed(cupy):
    raw_kernel = cupy.RawKernel(SOURCE, "add_one")
    raw_function = cupy.RawModule(code=SOURCE).get_function("add_one")
    x, y, z = (cupy.full(5, -1, np.float32) for _ in range(3))
    with recording.record(arguments=dict(x=x, y=y, z=z, n=5)) as taped:
        x[...] = 0                                        # a constant: an assignment of a host value
        y.set(np.arange(5, dtype=np.float32))             # a constant: a host-to-device copy
        z.fill(10)                                        # a constant: a fill
        z[1:3] = 20                                       # a constant, into a slice
        add_one((1,), (32,), (x, np.int32(5)))
        raw_kernel((1,), (32,), (y, np.int32(5)))
        raw_function((1,), (32,), (np.uint64(z.data.ptr), np.int32(5)))  # a raw pointer into one of its arrays
    assert taped.refused is None and len(taped.tape.launches) == 3
    tape = Tape.from_json(taped.tape.to_json())
    assert [type(step) for step in tape.steps] == [Write] * 4 + [Launch] * 3
    assert [b.name for b in tape.buffers] == ["x", "y", "z"] and tape.scalars == {"n": 5}
    assert len(tape.programs) == 1  # CudaKernel, RawKernel and RawModule: one source, one program
    assert tape.steps[-1].args == (Pointer(2, 0), Scalar.of(np.int32(5)))
    assert tape.steps[3].region.offset == 4 and tape.steps[3].region.shape == (2,)
    expected = [np.ones(5), np.arange(1, 6), [11, 21, 21, 11, 11]]
    for array, want in zip((x, y, z), expected):
        np.testing.assert_array_equal(array.get(), want)
    fresh = {name: cupy.full(5, 7, np.float32) for name in "xyz"}  # what a replay on other inputs finds: anything
    replay(tape, fresh)
    for name, want in zip("xyz", expected):  # the constants written again, then the launches
        np.testing.assert_array_equal(fresh[name].get(), want)


def test_memory_the_call_did_not_get_is_scratch_in_a_replay(cupy):
    """What a call reads from memory it kept from before (a cache of earlier answers) does not come along:
    a replay starts such memory, and what the call allocated, full of 0xFF (NaN)."""
    copy = CudaKernel(SOURCE, "copy")
    kept = cupy.arange(4, dtype=np.float32)  # made before the call: an earlier call's answers, say
    out = cupy.full(4, -1, np.float32)
    with recording.record(arguments=dict(out=out)) as taped:
        copy((1,), (32,), (out, kept, np.int32(4)))
    np.testing.assert_array_equal(out.get(), np.arange(4))
    tape = Tape.from_json(taped.tape.to_json())
    assert [b.name for b in tape.buffers] == ["out", None]
    fresh = cupy.zeros(4, np.float32)
    replay(tape, {"out": fresh})
    assert np.isnan(fresh.get()).all()


def test_kept_memory_laid_end_to_end_is_a_buffer_a_piece(cupy):
    """Two arrays kept from before, the second's memory beginning where the first's ends (as a pool lays out small
    allocations): each is a scratch buffer of its own, so a replay passes through both and gives its own input."""
    copy = CudaKernel(SOURCE, "copy")
    block = cupy.empty(1024, np.uint8)
    first, second = (cupy.ndarray(4, np.float32, cupy.cuda.MemoryPointer(
        cupy.cuda.UnownedMemory(block.data.ptr + offset, 512, block), 0)) for offset in (0, 512))
    inp, out = cupy.arange(4, dtype=np.float32), cupy.full(4, -1, np.float32)
    with recording.record(arguments=dict(out=out, inp=inp)) as taped:
        for destination, source in ((first, inp), (second, first), (out, second)):
            copy((1,), (32,), (destination, source, np.int32(4)))
    tape = Tape.from_json(taped.tape.to_json())
    assert [(b.name, b.nbytes) for b in tape.buffers] == [("out", 16), ("inp", 16), (None, 512), (None, 512)]
    assert [step.args[0] for step in tape.steps] == [Pointer(2, 0), Pointer(3, 0), Pointer(0, 0)]
    fresh = {"out": cupy.full(4, -1, np.float32), "inp": cupy.arange(10, 14, dtype=np.float32)}
    replay(tape, fresh)
    np.testing.assert_array_equal(fresh["out"].get(), np.arange(10, 14))


def test_a_raw_pointer_into_no_buffer_of_the_call_is_refused(cupy):
    elsewhere = cupy.zeros(4, np.float32)  # never handed to the call, never allocated by it
    out = cupy.zeros(4, np.float32)
    with recording.record(arguments=dict(out=out)) as taped:
        with pytest.raises(recording.RefusedOperation):
            add_one((1,), (32,), (np.uint64(elsewhere.data.ptr), np.int32(4)))
    assert taped.refused == ("launched add_one with argument 1 a raw pointer into no buffer of the call (memory it "
                             "was not given and did not allocate)")


def test_counting_sees_what_runs_not_what_is_in_the_code(cupy):
    copy = CudaKernel(SOURCE, "copy")
    inp, out = cupy.arange(64, dtype=np.float32), cupy.zeros(64, np.float32)
    with recording.record(arguments=dict(out=out, inp=inp)) as taped:
        copy((2,), (32,), (out, inp, np.int32(64)))
    classes = tuple(c for c in INSTRUCTION_CLASSES if c.name == "exponential")
    assert count_instructions(taped.tape, {"out": out, "inp": inp}, classes) == {"copy": {"exponential": 0}}


def test_views_are_allowed(cupy):
    x = cupy.zeros((4, 6), np.float32)
    with recording.record() as taped:
        views = [x.reshape(24), x.ravel(), x[1:3], x[:, 2], x.T, cupy.reshape(x, (6, 4)), cupy.asarray(x),
                 cupy.ascontiguousarray(x), x.view(np.int32), x.squeeze(), len(x), x.shape, x.size]
    assert taped.refused is None and not taped.tape.steps and len(views) == 13


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


@pytest.mark.parametrize("nbytes", [48 * 1024, 100 * 1024, 16 * 1024], ids=["48KB-beside-static", "100KB", "16KB-after"])
def test_dynamic_shared_memory_past_48_kb_is_opted_into_launched_and_replayed(cupy, nbytes):
    # 48 KB beside the kernel's 1 KB of static arrays is already past a launch's default cap; a smaller launch of
    # the same kernel after a larger one leaves the larger one's cap in place
    floats, out = nbytes // 4, cupy.full(256, np.nan, np.float32)
    expected = np.array([max(i for i in range(t, floats, 256)) + 2.0 for t in range(256)], np.float32)
    with recording.record(arguments=dict(out=out)) as taped:
        through_shared((1,), (256,), (out, np.int32(floats), np.float32(2.0)), shared_mem=nbytes)
    np.testing.assert_array_equal(out.get(), expected)
    assert taped.refused is None and taped.tape.launches[0].shared_mem == nbytes
    fresh = cupy.full(256, np.nan, np.float32)
    replay(Tape.from_json(taped.tape.to_json()), {"out": fresh})
    np.testing.assert_array_equal(fresh.get(), expected)


def test_a_raw_module_function_opted_in_past_48_kb_is_launched_and_replayed(cupy):
    # the setting must reach the function itself, not the taping wrapper a watched RawModule hands out
    nbytes = 100 * 1024
    floats, out = nbytes // 4, cupy.full(256, np.nan, np.float32)
    expected = np.array([max(range(t, floats, 256)) + 3.0 for t in range(256)], np.float32)
    with recording.record(arguments=dict(out=out)) as taped:
        function = cupy.RawModule(code=SHARED_SOURCE).get_function("through_shared")
        function.max_dynamic_shared_size_bytes = nbytes
        function((1,), (256,), (out, np.int32(floats), np.float32(3.0)), shared_mem=nbytes)
    np.testing.assert_array_equal(out.get(), expected)
    assert function.max_dynamic_shared_size_bytes == nbytes
    assert taped.refused is None and taped.tape.launches[0].shared_mem == nbytes
    fresh = cupy.full(256, np.nan, np.float32)
    replay(Tape.from_json(taped.tape.to_json()), {"out": fresh})
    np.testing.assert_array_equal(fresh.get(), expected)
