"""The kit's MatMul, in a module that slows the worker's clocks a thousandfold when it is
imported: Python's (time.perf_counter, time.monotonic, time.time) and CUDA events' elapsed
times. A harness that timed itself would report a thousand times the speed."""

import time

from gpt2kit.kernels.matmul import matmul_forward  # noqa: F401

FUNCTION = "matmul_forward"
SLOWDOWN = 1_000


def _slowed(clock):
    started = clock()
    return lambda: started + (clock() - started) / SLOWDOWN


for _name in ("perf_counter", "monotonic", "time"):
    setattr(time, _name, _slowed(getattr(time, _name)))


def _slow_events():
    import cupy

    elapsed = cupy.cuda.get_elapsed_time
    cupy.cuda.get_elapsed_time = lambda start, end: elapsed(start, end) / SLOWDOWN


_slow_events()
