"""The Grape study's tables and figures: what each experiment writes, in the artifact's formats.

    speedometer.csv            Name, Attrs, Avg, Std, min, Median, MAX        (seconds per run)
    gpt2_generate_profile.csv  Name, InputPrep, Model, BeamSearch             (ms per run; gptj_... for GPT-J)
    wav2vec2_train_profile.csv Name, InputPrep, Model, Optimizer              (ms per run of training steps)
    metadata_compression.csv   Model, Original Size, Compressed Size (MB)    (graph memory)

speedometer.csv and metadata_compression.csv hold every model's rows: a study of one
model replaces that model's rows and keeps the others'.
Name is an executor (baseline, ptgraph, grape, or a reference such as transformers);
Attrs is a JSON object saying what was run ({"Model": "GPT-2", "Search": "beam5"}).
Each table has a PNG beside it that reads without the CSV: its title says what was
measured and how, its axes carry units, and every bar its value. Each file appears
whole or not at all (kernel_runtime.files), so a study stopped midway keeps the
previous run's tables.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import statistics
import textwrap
from pathlib import Path
from typing import Callable

from gpt2kit.kernel_runtime.files import replacing

SPEEDOMETER_COLUMNS = ("Name", "Attrs", "Avg", "Std", "min", "Median", "MAX")
BREAKDOWN_COLUMNS = ("Name", "InputPrep", "Model", "BeamSearch")
TRAINING_BREAKDOWN_COLUMNS = ("Name", "InputPrep", "Model", "Optimizer")
GRAPH_MEMORY_COLUMNS = ("Model", "Original Size", "Compressed Size (MB)")
FIGURES = {"matplotlib": "the figures are drawn with it: pip install -e '.[experiments]'"}  # for check_installed


@dataclasses.dataclass
class Timing:
    """Seconds of each timed run of one executor on one configuration."""

    name: str
    attrs: dict
    seconds: list[float]

    def row(self) -> dict:
        s = self.seconds
        return {"Name": self.name, "Attrs": json.dumps(self.attrs, sort_keys=True), "Avg": statistics.fmean(s),
                "Std": statistics.stdev(s) if len(s) > 1 else 0.0, "min": min(s), "Median": statistics.median(s),
                "MAX": max(s)}


@dataclasses.dataclass
class Breakdown:
    """Milliseconds per run in each stage of generation."""

    name: str
    input_prep_ms: float
    model_ms: float
    beam_search_ms: float

    def row(self) -> dict:
        return {"Name": self.name, "InputPrep": self.input_prep_ms, "Model": self.model_ms,
                "BeamSearch": self.beam_search_ms}


@dataclasses.dataclass
class TrainingBreakdown:
    """Milliseconds per run of training steps in each stage: the batch into the step's buffers, the forward pass
    with the loss and the backward pass, the optimizer's update."""

    name: str
    input_prep_ms: float
    model_ms: float
    optimizer_ms: float

    def row(self) -> dict:
        return {"Name": self.name, "InputPrep": self.input_prep_ms, "Model": self.model_ms,
                "Optimizer": self.optimizer_ms}


@dataclasses.dataclass
class GraphMemory:
    """Device memory held by one executor's CUDA graphs, in MB (original: ptgraph's; compressed: grape's)."""

    model: str
    original_mb: float
    compressed_mb: float

    def row(self) -> dict:
        return {"Model": self.model, "Original Size": self.original_mb, "Compressed Size (MB)": self.compressed_mb}


def write_csv(path: Path, columns: tuple[str, ...], rows: list, kept: Callable[[dict], bool] | None = None) -> Path:
    """`rows` as the CSV at `path`; with `kept`, after the rows of the file there already that kept(row) keeps."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    earlier = [row for row in read_csv(path) if kept(row)] if kept is not None and path.exists() else []
    with replacing(path) as partial, open(partial, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(earlier + [r.row() for r in rows])
    return path


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def write_speedometer(directory: Path, timings: list[Timing], device: str, model: str) -> tuple[Path, Path]:
    """speedometer.csv and speedometer.png: median seconds per run, whiskers from min to max; `timings` replace
    the rows of `model` (their Attrs' Model) and keep the other models'."""
    csv_path = write_csv(Path(directory) / "speedometer.csv", SPEEDOMETER_COLUMNS, timings,
                         kept=lambda row: json.loads(row["Attrs"]).get("Model") != model)
    runs = "/".join(map(str, sorted({len(t.seconds) for t in timings})))
    return csv_path, plot_speedometer(csv_path, device, runs)


def plot_speedometer(csv_path: Path, device: str, runs: str) -> Path:
    """speedometer.png from speedometer.csv; `runs`: how many timed runs each row has."""
    rows = read_csv(csv_path)
    shared = _shared_attrs([json.loads(r["Attrs"]) for r in rows])
    labels = [_label(r["Name"], {k: v for k, v in json.loads(r["Attrs"]).items() if k not in shared}) for r in rows]
    medians = [float(r["Median"]) for r in rows]
    spread = [[m - float(r["min"]) for m, r in zip(medians, rows)], [float(r["MAX"]) - m for m, r in zip(medians, rows)]]
    said = f" ({', '.join(f'{k} {v}' for k, v in shared.items())})" if shared else ""  # what every row shares
    title = (f"End-to-end time per run (a generation, or a sequence of training steps) on {device}{said}: median of "
             f"{runs} timed runs after a warm-up; "
             "whiskers from min to max")
    return _bar_figure(Path(csv_path).with_suffix(".png"), labels, [medians], ["median"], "seconds per run", title,
                       errors=spread)


def write_breakdown(directory: Path, breakdowns: list[Breakdown], device: str, how: str,
                    family: str = "gpt2") -> tuple[Path, Path]:
    """<family>_generate_profile.csv and .png: each executor's time per stage of generation, stacked."""
    csv_path = write_csv(Path(directory) / f"{family}_generate_profile.csv", BREAKDOWN_COLUMNS, breakdowns)
    return csv_path, plot_breakdown(csv_path, device, f"generation, {how}")


def write_training_breakdown(directory: Path, breakdowns: list[TrainingBreakdown], device: str, how: str,
                             family: str) -> tuple[Path, Path]:
    """<family>_train_profile.csv and .png: each executor's time per stage of its training steps, stacked."""
    csv_path = write_csv(Path(directory) / f"{family}_train_profile.csv", TRAINING_BREAKDOWN_COLUMNS, breakdowns)
    return csv_path, plot_breakdown(csv_path, device, f"training, {how}")


def plot_breakdown(csv_path: Path, device: str, how: str) -> Path:
    """A stacked bar per executor of the CSV's stage columns (all but Name)."""
    rows = read_csv(csv_path)
    stages = [column for column in rows[0] if column != "Name"]
    return _bar_figure(Path(csv_path).with_suffix(".png"), [r["Name"] for r in rows],
                       [[float(r[stage]) for r in rows] for stage in stages], stages, "milliseconds per run",
                       f"Where the time goes on {device}: {how}", stacked=True)


# how every model's graph memory is measured: the figure holds every model's rows, so its title says all
GRAPH_MEMORY_METHOD = ("generation: every length captured, CuPy pool growth + driver memory outside the pool, the KV "
                       "cache left out; Wav2Vec2 training: every padded length's forward and backward graphs, their "
                       "buffers + capture pools, the parameters and optimizer state left out")


def write_graph_memory(directory: Path, memories: list[GraphMemory], device: str, model: str) -> tuple[Path, Path]:
    """metadata_compression.csv and .png: graph memory of ptgraph (every length) against grape's; `memories`
    (labelled "<model> <what>") replace the rows of `model` and keep the other models'."""
    csv_path = write_csv(Path(directory) / "metadata_compression.csv", GRAPH_MEMORY_COLUMNS, memories,
                         kept=lambda row: not row["Model"].startswith(f"{model} "))
    return csv_path, plot_graph_memory(csv_path, device, GRAPH_MEMORY_METHOD)


def plot_graph_memory(csv_path: Path, device: str, how: str) -> Path:
    rows = read_csv(csv_path)
    original = [float(r["Original Size"]) for r in rows]
    compressed = [float(r["Compressed Size (MB)"]) for r in rows]
    labels = [f"{r['Model']}\n{o / c:.0f}x less" if c > 0 else r["Model"] for r, o, c in zip(rows, original, compressed)]
    return _bar_figure(Path(csv_path).with_suffix(".png"), labels, [original, compressed],
                       ["ptgraph: one graph per length", "grape: shared graphs"], "MB (log scale)",
                       f"Device memory held by CUDA graphs on {device}: {how}", log=True)


def _shared_attrs(attrs: list[dict]) -> dict:
    """The attributes every row has with the same value (said once, in the title)."""
    return {k: v for k, v in attrs[0].items() if all(a.get(k) == v for a in attrs)} if attrs else {}


def _label(name: str, attrs: dict) -> str:
    """The executor, then an attribute a line, wrapped to the width of a bar (a long one, as Wav2Vec2's batches)."""
    return "\n".join([name] + [line for k, v in attrs.items() for line in textwrap.wrap(f"{k} {v}", 16)])


def _value_text(value: float) -> str:
    """Four significant digits, without an exponent for the big ones (15,575, not 1.558e+04)."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def _bar_figure(path: Path, labels: list[str], series: list[list[float]], names: list[str], unit: str,
                title: str, *, errors=None, stacked: bool = False, log: bool = False) -> Path:
    """Bars per label (grouped, or stacked), each bar's value written on it; saved as `path`."""
    plt = pyplot()
    width_inches = max(6.0, 1.3 * len(labels) + 2)
    figure, axes = plt.subplots(figsize=(width_inches, 5.0))
    positions = list(range(len(labels)))
    width = 0.8 if stacked or len(series) == 1 else 0.8 / len(series)
    bottom = [0.0] * len(labels)
    for number, (values, name) in enumerate(zip(series, names)):
        offset = 0.0 if stacked else (number - (len(series) - 1) / 2) * width
        bars = axes.bar([p + offset for p in positions], values, width, bottom=bottom if stacked else None,
                        label=name, yerr=errors if errors is not None and number == 0 else None, capsize=4)
        axes.bar_label(bars, labels=[_value_text(v) for v in values], label_type="center" if stacked else "edge",
                       fontsize=8)
        if stacked:
            bottom = [b + v for b, v in zip(bottom, values)]
    axes.set_xticks(positions, labels, fontsize=8)
    axes.set_ylabel(unit)
    axes.set_title(textwrap.fill(title, width=int(width_inches * 13)), fontsize=9)
    if log:
        axes.set_yscale("log")
    if len(series) > 1:
        axes.legend(fontsize=8)
    return save_figure(figure, path)


def pyplot():
    """matplotlib.pyplot, drawing to files only (no screen needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(figure, path: Path) -> Path:
    """`figure` laid out and written to `path` as a whole file, then closed."""
    figure.tight_layout()
    try:
        with replacing(path) as partial:
            figure.savefig(partial, dpi=120)
    finally:
        pyplot().close(figure)
    return path
