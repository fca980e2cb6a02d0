"""The Grape study's CSV and figure writers, on made-up measurements (no GPU needed)."""

import csv
import json

import numpy as np
import pytest

from gpt2kit.benchmarks.grape_tables import (BREAKDOWN_COLUMNS, GRAPH_MEMORY_COLUMNS, SPEEDOMETER_COLUMNS,
                                             TRAINING_BREAKDOWN_COLUMNS, Breakdown, GraphMemory, Timing,
                                             TrainingBreakdown, write_breakdown, write_csv, write_graph_memory,
                                             write_training_breakdown, write_speedometer)

pytest.importorskip("matplotlib", reason="the figures need matplotlib: pip install -e '.[experiments]'")


def read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def assert_png(path):
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000


@pytest.mark.parametrize("seed", [0, 1], ids=lambda s: f"seed{s}")
def test_speedometer_statistics_and_figure(tmp_path, seed):
    rng = np.random.default_rng(seed)
    timings = [Timing(name, {"Model": "GPT-2", "Search": "beam5"}, list(rng.uniform(0.1, 10, 7)))
               for name in ("baseline", "ptgraph", "grape")] + [Timing("grape", {"Search": "greedy"}, [0.25])]
    csv_path, png_path = write_speedometer(tmp_path / "out", timings, "NVIDIA H200", "GPT-2")
    rows = read(csv_path)
    assert tuple(rows[0]) == SPEEDOMETER_COLUMNS and len(rows) == 4
    for row, timing in zip(rows, timings):
        s = np.array(timing.seconds)
        assert row["Name"] == timing.name and json.loads(row["Attrs"]) == timing.attrs
        expected = [s.mean(), s.std(ddof=1) if s.size > 1 else 0.0, s.min(), np.median(s), s.max()]
        np.testing.assert_allclose([float(row[c]) for c in ("Avg", "Std", "min", "Median", "MAX")], expected,
                                   rtol=1e-12)
    assert_png(png_path)


def test_breakdown_and_graph_memory(tmp_path):
    breakdowns = [Breakdown("baseline", 1.5, 900.0, 120.0), Breakdown("grape", 0.2, 300.0, 0.0)]
    csv_path, png_path = write_breakdown(tmp_path, breakdowns, "NVIDIA H200", "CUDA events around each stage")
    rows = read(csv_path)
    assert tuple(rows[0]) == BREAKDOWN_COLUMNS
    assert [(r["Name"], float(r["Model"]), float(r["BeamSearch"])) for r in rows] == [
        ("baseline", 900.0, 120.0), ("grape", 300.0, 0.0)]
    assert_png(png_path)

    training = [TrainingBreakdown("ptgraph", 40.0, 2500.0, 60.5), TrainingBreakdown("grape", 4.0, 2000.0, 60.5)]
    csv_path, png_path = write_training_breakdown(tmp_path, training, "NVIDIA H200", "CUDA events", "wav2vec2")
    assert csv_path.name == "wav2vec2_train_profile.csv"
    rows = read(csv_path)
    assert tuple(rows[0]) == TRAINING_BREAKDOWN_COLUMNS
    assert [(r["Name"], float(r["Model"]), float(r["Optimizer"])) for r in rows] == [
        ("ptgraph", 2500.0, 60.5), ("grape", 2000.0, 60.5)]
    assert_png(png_path)

    memories = [GraphMemory("GPT-2 beam5", 5120.5, 97.25)]
    csv_path, png_path = write_graph_memory(tmp_path, memories, "NVIDIA H200", "GPT-2")
    rows = read(csv_path)
    assert tuple(rows[0]) == GRAPH_MEMORY_COLUMNS
    assert (float(rows[0]["Original Size"]), float(rows[0]["Compressed Size (MB)"])) == (5120.5, 97.25)
    assert_png(png_path)


class Interrupted:
    """A row whose turn comes as Ctrl-C does."""

    def row(self):
        raise KeyboardInterrupt


def test_an_interrupted_table_keeps_the_previous_one(tmp_path):
    path = write_csv(tmp_path / "speedometer.csv", SPEEDOMETER_COLUMNS, [Timing("grape", {}, [1.0, 2.0])])
    before = path.read_text()
    with pytest.raises(KeyboardInterrupt):
        write_csv(path, SPEEDOMETER_COLUMNS, [Timing("baseline", {}, [3.0]), Interrupted()])
    assert path.read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["speedometer.csv"]


def test_runtime_writes_a_beam_and_a_greedy_row_per_executor(tmp_path, monkeypatch, capsys):
    """The runtime experiment end to end on made-up timings: every executor's two rows reach speedometer.csv,
    after grape's GPU-time line."""
    from types import SimpleNamespace

    from gpt2kit.benchmarks import grape_study

    monkeypatch.setattr(grape_study, "timed", lambda run, runs, label: [0.5 + 0.1 * i for i in range(runs)])
    monkeypatch.setattr(grape_study, "grape_gpu_seconds", lambda study, beam_search: 0.4 if beam_search else 0.2)
    study = SimpleNamespace(beams=5, new_tokens=11, attrs=lambda search: {"Model": "GPT-2", "Search": search},
                            beam_run=lambda name: None, greedy_run=lambda name: None, name="GPT-2")
    executors = ["baseline", "ptgraph", "grape"]
    paths = grape_study.runtime(study, tmp_path, runs=3, executors=executors, with_hf=False, device="a GPU")
    rows = read(tmp_path / "speedometer.csv")
    assert [(r["Name"], json.loads(r["Attrs"])["Search"]) for r in rows] == (
        [(name, "beam5") for name in executors] + [(name, "greedy") for name in executors])
    assert {float(r["Median"]) for r in rows} == {0.6} and tmp_path / "speedometer.png" in paths
    printed = capsys.readouterr().out
    assert "grape beam: GPU 40.000 ms/step" in printed and "grape greedy: GPU 20.000 ms/step" in printed


def test_a_models_rows_replace_its_own_and_keep_the_other_models(tmp_path):
    """GPT-2's study, then GPT-J's, then GPT-2's again: both models' rows, GPT-2's from its last run (written
    last, so after GPT-J's); each model's breakdown in a file of its own."""
    def study(model, seconds):
        write_speedometer(tmp_path, [Timing(name, {"Model": model, "Search": "beam5"}, [seconds])
                                     for name in ("baseline", "grape")], "a GPU", model)
        write_graph_memory(tmp_path, [GraphMemory(f"{model} {search}", 100 * seconds, seconds)
                                      for search in ("beam5", "greedy")], "a GPU", model)

    study("GPT-2", 1.0)
    study("GPT-J", 7.0)
    study("GPT-2", 2.0)
    rows = read(tmp_path / "speedometer.csv")
    assert [(json.loads(r["Attrs"])["Model"], r["Name"], float(r["Median"])) for r in rows] == [
        ("GPT-J", "baseline", 7.0), ("GPT-J", "grape", 7.0), ("GPT-2", "baseline", 2.0), ("GPT-2", "grape", 2.0)]
    assert [(r["Model"], float(r["Compressed Size (MB)"])) for r in read(tmp_path / "metadata_compression.csv")] == [
        ("GPT-J beam5", 7.0), ("GPT-J greedy", 7.0), ("GPT-2 beam5", 2.0), ("GPT-2 greedy", 2.0)]
    write_breakdown(tmp_path, [Breakdown("grape", 0.1, 9.0, 0.0)], "a GPU", "events", "gptj")
    assert (tmp_path / "gptj_generate_profile.csv").exists() and not (tmp_path / "gpt2_generate_profile.csv").exists()
    assert_png(tmp_path / "speedometer.png")
