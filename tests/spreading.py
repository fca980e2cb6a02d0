"""How many processes a pytest run is spread over (pytest-xdist), where -n does not say."""

MAX_WORKERS = 4  # the slow tests bound the run: more processes than this gain little
# What each process of a spread run computes with: one thread. The run's processes keep every core busy, and
# BLAS's own threads beside them would only fight them for the cores (OpenBLAS's spin while they wait).
ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}


def suite_workers(whole_suite: bool, gpu_reason: str | None, nested: bool, cpus: int) -> int:
    """0 (this process alone), except for the whole suite (`pytest` with no paths) on a machine without
    a GPU: GPU tests and their timings keep one process and the GPU to themselves, a chosen file or
    directory starts at once, and a pytest run inside a test stays one process beside those running."""
    if not whole_suite or gpu_reason is None or nested or cpus < 2:
        return 0
    return min(cpus, MAX_WORKERS)
