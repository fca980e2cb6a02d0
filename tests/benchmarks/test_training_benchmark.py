"""The training benchmark's parts that need no GPU: its loss-curve files, and its one-line refusal without one."""

import numpy as np
import pytest

from benchmarks.grape_tables import read_csv
from benchmarks.training import CURVE_COLUMNS, write_curve


def test_the_curve_is_a_csv_of_both_losses_and_its_png(tmp_path):
    kit, pytorch = [10.9, 9.8, 8.1], [10.9, 9.80001, 8.10002]
    csv_path, png = write_curve(tmp_path, kit, pytorch, "a title")
    rows = read_csv(csv_path)
    assert tuple(rows[0]) == CURVE_COLUMNS and [int(r["step"]) for r in rows] == [1, 2, 3]
    np.testing.assert_allclose([float(r["kit"]) for r in rows], kit)
    np.testing.assert_allclose([float(r["pytorch"]) for r in rows], pytorch)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_benchmark_says_in_one_line_that_it_needs_a_gpu(capsys):
    from kernel_runtime import gpu_unavailable_reason

    if gpu_unavailable_reason() is None:
        pytest.skip("this machine has a GPU")
    from benchmarks.training import main

    with pytest.raises(SystemExit) as exit_:
        main(["--runs", "1"])
    assert exit_.value.code != 0
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("benchmarks.training: cannot run")
