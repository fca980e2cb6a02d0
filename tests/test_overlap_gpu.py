"""gpt2kit.kernel_runtime.overlap on a GPU: captured into a CUDA graph on sm_90 and later, a
kernel that waits for the previous one starts early, and still sees everything the
previous kernel wrote.

The producer of each round spins ~100 us before it writes; the consumer copies what
it wrote. A consumer launched to overlap without waiting reads the previous round's
values (which shows the overlap is real); one that waits reads this round's.
"""

import numpy as np
import pytest

from gpt2kit.kernel_runtime import CudaKernel, overlap

pytestmark = pytest.mark.gpu

SOURCE = r"""
extern "C" __global__ void produce(int* x, int round, long long spin) {
    let_next_kernel_start();  // the consumer may launch now
    wait_for_previous_kernel();
    long long start = clock64();
    while (clock64() - start < spin) {}
    x[blockIdx.x * blockDim.x + threadIdx.x] = round;
}

extern "C" __global__ void consume(int* y, const int* x) {
    let_next_kernel_start();
    WAIT
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    y[i] = x[i];
}
"""
produce = CudaKernel(SOURCE.replace("WAIT", "wait_for_previous_kernel();"), "produce")
consume = CudaKernel(SOURCE.replace("WAIT", "wait_for_previous_kernel();"), "consume")
consume_without_waiting = CudaKernel(SOURCE.replace("WAIT", ""), "consume")
BLOCKS, THREADS, ROUNDS = 64, 128, 8


@pytest.fixture
def cupy():
    import cupy

    if not overlap.device_supports_overlap():
        pytest.skip("overlapped launches need sm_90 or later")
    return cupy


def rounds(cupy, launch_consumer, capture=True):
    """What the consumer saw in each round, the rounds captured as one graph (or launched one by one)."""
    x = cupy.zeros(BLOCKS * THREADS, np.int32)
    seen = cupy.full((ROUNDS, BLOCKS * THREADS), -1, np.int32)
    spin = np.int64(cupy.cuda.Device().attributes["ClockRate"] // 10)  # ~100 us (the rate is in kHz)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        if capture:
            stream.begin_capture()
        for round_ in range(ROUNDS):
            produce((BLOCKS,), (THREADS,), (x, np.int32(round_), spin))
            launch_consumer(seen[round_], x)
        if capture:
            stream.end_capture().launch(stream)
        stream.synchronize()
    return seen.get()


def launched(y, x):
    consume((BLOCKS,), (THREADS,), (y, x))


def check_every_round(seen):
    for round_, y in enumerate(seen):
        assert (y == round_).all(), f"round {round_}: the consumer saw {np.unique(y)}"


def test_a_waiting_kernel_sees_the_previous_kernels_writes(cupy):
    def launched_overlapped(y, x):
        assert overlap.launches_overlapped()  # on sm_90, while captured
        launched(y, x)

    check_every_round(rounds(cupy, launched_overlapped))


def test_without_the_wait_the_overlap_shows(cupy):
    def launch_overlapped(y, x):  # what CudaKernel never does for a kernel that does not wait
        overlap.launch(consume_without_waiting.compiled().kernel.ptr, (BLOCKS,), (THREADS,), (y, x))

    seen = rounds(cupy, launch_overlapped)
    assert any((y != round_).any() for round_, y in enumerate(seen)), (
        "a consumer that does not wait saw every round's values: the launches did not overlap")


def test_only_captured_launches_overlap_and_overlap_can_be_turned_off(cupy):
    assert not overlap.launches_overlapped()  # launched one by one
    check_every_round(rounds(cupy, launched, capture=False))
    with overlap.overlapping_launches(False):
        check_every_round(rounds(cupy, launched))
