"""The Grape study's tables and figures: what each experiment writes, in the artifact's formats.

    speedometer.csv            Name, Attrs, Avg, Std, min, Median, MAX        (seconds per run)
    gpt2_generate_profile.csv  Name, InputPrep, Model, BeamSearch             (ms per run)
    metadata_compression.csv   Model, Original Size, Compressed Size (MB)    (graph memory)

Name is an executor (baseline, ptgraph, grape, or a reference such as transformers);
Attrs is a JSON object saying what was run ({"Model": "GPT-2", "Search": "beam5"}).
Each table has a PNG beside it that reads without the CSV: its title says what was
measured and how, its axes carry units, and every bar its value.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import statistics
from pathlib import Path

SPEEDOMETER_COLUMNS = ("Name", "Attrs", "Avg", "Std", "min", "Median", "MAX")
BREAKDOWN_COLUMNS = ("Name", "InputPrep", "Model", "BeamSearch")
GRAPH_MEMORY_COLUMNS = ("Model", "Original Size", "Compressed Size (MB)")


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
class GraphMemory:
    """Device memory held by one executor's CUDA graphs, in MB (original: ptgraph's; compressed: grape's)."""

    model: str
    original_mb: float
    compressed_mb: float

    def row(self) -> dict:
        return {"Model": self.model, "Original Size": self.original_mb, "Compressed Size (MB)": self.compressed_mb}


def write_csv(path: Path, columns: tuple[str, ...], rows: list) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(r.row() for r in rows)
    return path


def write_speedometer(directory: Path, timings: list[Timing], device: str) -> tuple[Path, Path]:
    """speedometer.csv and speedometer.png: median seconds per run, whiskers from min to max."""
    csv_path = write_csv(Path(directory) / "speedometer.csv", SPEEDOMETER_COLUMNS, timings)
    labels = [f"{t.name}\n{', '.join(f'{k} {v}' for k, v in t.attrs.items())}" for t in timings]
    medians = [statistics.median(t.seconds) for t in timings]
    spread = [[m - min(t.seconds) for m, t in zip(medians, timings)],
              [max(t.seconds) - m for m, t in zip(medians, timings)]]
    runs = sorted({len(t.seconds) for t in timings})
    title = (f"End-to-end generation time per run on {device}\n"
             f"median of {'/'.join(map(str, runs))} timed runs after warm-up; whiskers: min to max")
    return csv_path, _bar_figure(csv_path.with_suffix(".png"), labels, [medians], ["median"], "seconds per run",
                                 title, errors=spread)


def write_breakdown(directory: Path, breakdowns: list[Breakdown], device: str, how: str) -> tuple[Path, Path]:
    """gpt2_generate_profile.csv and .png: each executor's time per stage, stacked."""
    csv_path = write_csv(Path(directory) / "gpt2_generate_profile.csv", BREAKDOWN_COLUMNS, breakdowns)
    stages = [[b.input_prep_ms for b in breakdowns], [b.model_ms for b in breakdowns],
              [b.beam_search_ms for b in breakdowns]]
    title = f"Where generation's time goes on {device}\n{how}"
    return csv_path, _bar_figure(csv_path.with_suffix(".png"), [b.name for b in breakdowns], stages,
                                 ["InputPrep", "Model", "BeamSearch"], "milliseconds per run", title, stacked=True)


def write_graph_memory(directory: Path, memories: list[GraphMemory], device: str, how: str) -> tuple[Path, Path]:
    """metadata_compression.csv and .png: graph memory of ptgraph (every length) against grape's."""
    csv_path = write_csv(Path(directory) / "metadata_compression.csv", GRAPH_MEMORY_COLUMNS, memories)
    title = f"Device memory held by CUDA graphs on {device}\n{how}"
    return csv_path, _bar_figure(csv_path.with_suffix(".png"), [m.model for m in memories],
                                 [[m.original_mb for m in memories], [m.compressed_mb for m in memories]],
                                 ["ptgraph: one graph per length", "grape: shared graphs"], "MB (log scale)", title,
                                 log=True)


def _bar_figure(path: Path, labels: list[str], series: list[list[float]], names: list[str], unit: str,
                title: str, *, errors=None, stacked: bool = False, log: bool = False) -> Path:
    """Bars per label (grouped, or stacked), each bar's value written on it; saved as `path`."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no screen needed
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(max(6.0, 1.6 * len(labels) + 2), 4.5))
    positions = list(range(len(labels)))
    width = 0.8 if stacked or len(series) == 1 else 0.8 / len(series)
    bottom = [0.0] * len(labels)
    for number, (values, name) in enumerate(zip(series, names)):
        offset = 0.0 if stacked else (number - (len(series) - 1) / 2) * width
        bars = axes.bar([p + offset for p in positions], values, width, bottom=bottom if stacked else None,
                        label=name, yerr=errors if errors is not None and number == 0 else None, capsize=4)
        axes.bar_label(bars, labels=[f"{v:.4g}" for v in values], label_type="center" if stacked else "edge",
                       fontsize=8)
        if stacked:
            bottom = [b + v for b, v in zip(bottom, values)]
    axes.set_xticks(positions, labels, fontsize=8)
    axes.set_ylabel(unit)
    axes.set_title(title, fontsize=10)
    if log:
        axes.set_yscale("log")
    if len(series) > 1:
        axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path
