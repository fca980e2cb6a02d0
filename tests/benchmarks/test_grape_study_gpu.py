"""The Grape study's commands end to end on the GPU, for each model family, at a small size: every
experiment's files are written, with their columns and a row per executor per model, and both models'
rows share speedometer.csv and metadata_compression.csv (so a crash at the end of a long run shows here,
in seconds, not after the run)."""

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("matplotlib", reason="the figures need matplotlib: pip install -e '.[experiments]'")
torch = pytest.importorskip("torch", reason="transformers' rows need PyTorch and transformers")
pytest.importorskip("transformers", reason="transformers' rows need transformers: pip install -e '.[hf]'")

from gpt2kit.benchmarks.grape_tables import (BREAKDOWN_COLUMNS, GRAPH_MEMORY_COLUMNS,  # noqa: E402
                                             SPEEDOMETER_COLUMNS, TRAINING_BREAKDOWN_COLUMNS)
from gpt2kit.model_runtime.executors import EXECUTORS  # noqa: E402
from gpt2kit.model_runtime.ops import MODEL_FUNCTIONS, SPEECH_FUNCTIONS, TRAINING_FUNCTIONS  # noqa: E402
from tests.model.hf_gptj import hf_gptj  # noqa: E402

ROOT = Path(__file__).parents[2]
pytestmark = [pytest.mark.gpu, pytest.mark.calls(*MODEL_FUNCTIONS, "rotary_forward")]


def read(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def study(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpt2kit.benchmarks.grape_study", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=500, check=False)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """`runtime`, `breakdown` and `graph-memory` for GPT-2 124M, then `all` for a small GPT-J, into one directory."""
    out, gptj = tmp_path_factory.mktemp("grape"), tmp_path_factory.mktemp("gptj")
    hf_gptj(seed=0, n_layer=2, n_embd=256, n_head=1, rotary_dim=64).save_pretrained(gptj)  # head size 256
    small = ("--max-length", "12", "--beams", "3", "--runs", "2", "--out", str(out))
    for args in (("runtime", *small), ("breakdown", "--no-hf", *small), ("graph-memory", *small),
                 ("all", "--model", str(gptj), *small)):
        done = study(*args)
        assert done.returncode == 0, f"{' '.join(args)}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        assert f"wrote {out}" in done.stdout
    return out


def test_speedometer_has_a_beam_and_a_greedy_row_per_executor_per_model(results):
    rows = read(results / "speedometer.csv")
    assert tuple(rows[0]) == SPEEDOMETER_COLUMNS
    found = sorted((json.loads(r["Attrs"])["Model"], json.loads(r["Attrs"])["Search"], r["Name"]) for r in rows)
    names = [*EXECUTORS, "transformers"]
    assert found == sorted((model, search, name) for model in ("GPT-2", "GPT-J") for search in ("beam3", "greedy")
                           for name in names)
    assert all(0 < float(r["min"]) <= float(r["Median"]) <= float(r["MAX"]) for r in rows)


def test_breakdowns_and_graph_memory_per_model(results):
    for family in ("gpt2", "gptj"):
        rows = read(results / f"{family}_generate_profile.csv")
        assert tuple(rows[0]) == BREAKDOWN_COLUMNS and [r["Name"] for r in rows] == list(EXECUTORS)
        assert all(float(r["Model"]) > 0 for r in rows)
    rows = read(results / "metadata_compression.csv")
    assert tuple(rows[0]) == GRAPH_MEMORY_COLUMNS
    assert [r["Model"] for r in rows] == ["GPT-2 beam3", "GPT-2 greedy", "GPT-J beam3", "GPT-J greedy"]
    assert all(float(r["Original Size"]) > 0 and float(r["Compressed Size (MB)"]) > 0 for r in rows)


@pytest.mark.parametrize("figure", ["speedometer", "gpt2_generate_profile", "gptj_generate_profile",
                                    "metadata_compression"])
def test_every_table_has_its_figure(results, figure):
    png = results / f"{figure}.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_transformers_loads_after_the_kits_executors_went_back_to_the_device(monkeypatch, tmp_path):
    """transformers' rows load a second copy of the weights (GPT-J's 24 GB): before that the kit's executors,
    ptgraph's graph for every length among them, are dropped and CuPy's pool gives back the blocks it keeps, so
    that on an 80 GB card the copy finds room."""
    from gpt2kit.benchmarks import grape_study
    from gpt2kit.model_runtime.backends import make_backend
    from gpt2kit.model_runtime.families import family_of

    events = []  # (what happened, executors the study still held)
    give_back_memory = grape_study.give_back_memory

    def given_back():
        events.append(("memory given back", len(study.executors)))
        give_back_memory()

    def hf_runs(study, runs):
        events.append(("transformers loads", len(study.executors)))
        return {"beam": [1.0] * runs, "greedy": [1.0] * runs}

    monkeypatch.setattr(grape_study, "give_back_memory", given_back)
    monkeypatch.setattr(grape_study, "hf_runs", hf_runs)
    family = family_of("random")
    study = grape_study.Study(family, *family.load("random"), max_length=12, beams=3, prompt_length=5,
                              backend=make_backend("kernels"))
    grape_study.runtime(study, tmp_path, 1, EXECUTORS, True, "this GPU")
    assert events == [("memory given back", 0), ("transformers loads", 0)]
    assert [r["Name"] for r in read(tmp_path / "speedometer.csv")] == [*EXECUTORS, "transformers"] * 2


@pytest.mark.calls(*MODEL_FUNCTIONS, *TRAINING_FUNCTIONS, *SPEECH_FUNCTIONS)
def test_wav2vec2_s_rows_join_the_same_tables(tmp_path):
    """--model wav2vec2 at one utterance a batch and two steps a run: a runtime row per executor and transformers',
    graph memory's forward and backward rows, in the tables the language models' rows share, and its training
    profile."""
    done = study("all", "--model", "wav2vec2", "--batch", "1", "--steps", "2", "--runs", "1", "--out", str(tmp_path))
    assert done.returncode == 0, f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    rows = read(tmp_path / "speedometer.csv")
    assert sorted(r["Name"] for r in rows) == sorted(["baseline", "ptgraph", "grape", "transformers"])
    assert {json.loads(r["Attrs"])["Model"] for r in rows} == {"Wav2Vec2"}
    rows = read(tmp_path / "metadata_compression.csv")
    assert [r["Model"] for r in rows] == ["Wav2Vec2 forward", "Wav2Vec2 backward"]
    assert all(float(r["Original Size"]) >= float(r["Compressed Size (MB)"]) > 0 for r in rows)
    rows = read(tmp_path / "wav2vec2_train_profile.csv")
    assert tuple(rows[0]) == TRAINING_BREAKDOWN_COLUMNS
    assert [r["Name"] for r in rows] == ["baseline", "ptgraph", "grape"]
    assert all(float(r["Model"]) > 0 and float(r["Optimizer"]) > 0 for r in rows)
    for figure in ("speedometer", "metadata_compression", "wav2vec2_train_profile"):
        assert (tmp_path / f"{figure}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
