"""The training benchmark's parts that need no GPU: its step table and loss-curve files, its one-line refusal
without one, and the warnings its PyTorch comparison leaves out."""

import warnings

import numpy as np
import pytest

from gpt2kit.benchmarks.grape_tables import read_csv, write_csv
from gpt2kit.benchmarks.training import CURVE_COLUMNS, STEP_COLUMNS, StepTime, write_curve
from gpt2kit.benchmarks.transformers_model import silence_tf32_advice


def test_the_curve_is_a_csv_of_both_losses_and_its_png(tmp_path):
    pytest.importorskip("matplotlib", reason="the loss curve's figure needs matplotlib: pip install -e '.[experiments]'")
    kit, pytorch = [10.9, 9.8, 8.1], [10.9, 9.80001, 8.10002]
    csv_path, png = write_curve(tmp_path, kit, pytorch, "a title")
    rows = read_csv(csv_path)
    assert tuple(rows[0]) == CURVE_COLUMNS and [int(r["step"]) for r in rows] == [1, 2, 3]
    np.testing.assert_allclose([float(r["kit"]) for r in rows], kit)
    np.testing.assert_allclose([float(r["pytorch"]) for r in rows], pytorch)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_step_table_compares_each_method_with_pytorch_eager(tmp_path):
    eager = 0.093
    times = [StepTime("PyTorch eager", eager, 4096, eager), StepTime("kit, CUDA graphs", 0.120, 4096, eager)]
    rows = read_csv(write_csv(tmp_path / "training_step.csv", STEP_COLUMNS, times))
    assert tuple(rows[0]) == STEP_COLUMNS and [r["method"] for r in rows] == ["PyTorch eager", "kit, CUDA graphs"]
    assert [float(r["vs_pytorch_eager"]) for r in rows] == [1.0, 0.775]  # 93 / 120: slower than eager is below 1
    assert [float(r["ms_per_step"]) for r in rows] == [93.0, 120.0]
    assert int(rows[1]["tokens_per_s"]) == round(4096 / 0.120)
    assert times[1].line().split()[-1] == "0.78x"


def test_the_benchmark_says_in_one_line_that_it_needs_a_gpu(capsys, monkeypatch, tmp_path):
    from gpt2kit.kernel_runtime import gpu_unavailable_reason

    if gpu_unavailable_reason() is None:
        pytest.skip("this machine has a GPU")
    from gpt2kit.benchmarks import training

    monkeypatch.setattr(training, "check_installed", lambda needed: None)  # as where PyTorch and matplotlib are
    with pytest.raises(SystemExit) as exit_:
        training.main(["--runs", "1", "--out", str(tmp_path)])
    assert exit_.value.code != 0
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("gpt2kit.benchmarks.training: cannot run")


def test_only_torch_compile_s_advice_to_turn_on_tf32_is_left_out():
    with warnings.catch_warnings(record=True) as caught:  # the filter goes when the block ends
        warnings.simplefilter("always")
        silence_tf32_advice()
        warnings.warn("TensorFloat32 tensor cores for float32 matrix multiplication available but not enabled.")
        warnings.warn("TensorFloat32 tensor cores, as a DeprecationWarning", DeprecationWarning)
        warnings.warn("any other advice")
    assert [str(w.message) for w in caught] == ["TensorFloat32 tensor cores, as a DeprecationWarning",
                                                "any other advice"]
