"""kernel_runtime.overlap on a GPU: a kernel that waits for the previous one starts early
on sm_90 and later, and still sees everything the previous kernel wrote.

The producer of each round spins ~100 us before it writes; the consumer copies what
it wrote. A consumer launched to overlap without waiting reads the previous round's
values (which shows the overlap is real); one that waits reads this round's, eagerly
and inside a CUDA graph.
"""

import numpy as np
import pytest

from kernel_runtime import CudaKernel, overlap

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

    if not overlap.launches_overlapped():
        pytest.skip("overlapped launches need sm_90 or later")
    return cupy


def spin_clocks(cupy):
    return np.int64(cupy.cuda.Device().attributes["ClockRate"] // 10)  # ~100 us (the rate is in kHz)


def rounds(cupy, consumer, launch_consumer):
    x, y = cupy.zeros(BLOCKS * THREADS, np.int32), cupy.full(BLOCKS * THREADS, -1, np.int32)
    spin = spin_clocks(cupy)
    seen = []
    for round_ in range(1, ROUNDS + 1):
        produce((BLOCKS,), (THREADS,), (x, np.int32(round_), spin))
        launch_consumer(consumer, y, x)
        seen.append(y.copy())  # an ordinary copy: it waits for the consumer
    return [s.get() for s in seen]


def launched(consumer, y, x):
    consumer((BLOCKS,), (THREADS,), (y, x))


def test_a_waiting_kernel_sees_the_previous_kernels_writes(cupy):
    for round_, y in enumerate(rounds(cupy, consume, launched), start=1):
        assert (y == round_).all(), f"round {round_}: {np.unique(y)}"


def test_without_the_wait_the_overlap_shows(cupy):
    def launch_overlapped(consumer, y, x):  # what CudaKernel never does for a kernel that does not wait
        overlap.launch(consumer.compiled(), (BLOCKS,), (THREADS,), (y, x))

    stale = [round_ for round_, y in enumerate(rounds(cupy, consume_without_waiting, launch_overlapped), start=1)
             if not (y == round_).all()]
    assert stale, "a consumer that does not wait read every round's values: the launches did not overlap"


def test_a_captured_graph_keeps_the_order(cupy):
    x, y = cupy.zeros(BLOCKS * THREADS, np.int32), cupy.full(BLOCKS * THREADS, -1, np.int32)
    spin = spin_clocks(cupy)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        for r in range(1, ROUNDS + 1):
            produce((BLOCKS,), (THREADS,), (x, np.int32(r), spin))
            consume((BLOCKS,), (THREADS,), (y, x))
        graph = stream.end_capture()
        for _ in range(3):
            y.fill(-1)
            graph.launch(stream)
            stream.synchronize()
            assert (y.get() == ROUNDS).all()


def test_overlap_can_be_turned_off(cupy):
    with overlap.overlapping_launches(False):
        assert not overlap.launches_overlapped()
        for round_, y in enumerate(rounds(cupy, consume, launched), start=1):
            assert (y == round_).all()
    assert overlap.launches_overlapped()
