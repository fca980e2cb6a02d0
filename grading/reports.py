"""Grade reports: a console table, Gradescope's results.json, a class gradebook CSV."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from grading.grade import SubmissionGrade
from grading.items import Scheme


def console_table(grade: SubmissionGrade, width: int = 100) -> str:
    lines = [f"submission: {grade.submission}   (seed {grade.seed})",
             f"{'item':30s} {'weight':>6s} {'score':>6s}  reason"]
    for g in grade.items:
        reason = g.reason if len(g.reason) <= width else g.reason[: width - 3] + "..."
        lines.append(f"{g.item.title:30s} {g.item.weight:6g} {g.score:6.2f}  {reason}")
    if grade.menu_cap_points:
        lines.append(f"{'(menu items count up to ' + format(grade.menu_cap_points, 'g') + ' points)':30s}")
    lines.append(f"{'total':30s} {grade.max_score:6g} {grade.score:6.2f}")
    return "\n".join(lines)


MAX_LISTED_FAILURES = 20  # per item, so one broken kernel cannot flood the student's page


def gradescope_results(grade: SubmissionGrade) -> dict:
    """Gradescope's autograder format: the total, and one test per item with its output."""
    tests = []
    for g in grade.items:
        output = g.reason
        if g.details:
            shown = g.details[:MAX_LISTED_FAILURES]
            output += f"\nfailing cases ({len(g.details)}):\n" + "\n".join(f"- {d}" for d in shown)
            if len(g.details) > len(shown):
                output += f"\n... and {len(g.details) - len(shown)} more"
        tests.append({"name": g.item.title, "score": round(g.score, 4), "max_score": g.item.weight,
                      "output": output})
    return {"score": round(grade.score, 4), "output": f"{grade.score:g} of {grade.max_score:g} points",
            "tests": tests}


def write_results_json(results: dict, path: Path) -> None:
    """Write gradescope_results(...) to `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")


def write_gradebook(rows: list[tuple[str, dict]], scheme: Scheme, path: Path) -> None:
    """One row per submission: its name, total, and each item's score (from results.json contents)."""
    titles = [item.title for item in scheme.items]
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["submission", "total", *titles])
        for name, results in rows:
            by_title = {t["name"]: t["score"] for t in results["tests"]}
            writer.writerow([name, results["score"], *(by_title.get(t, 0) for t in titles)])


def read_results(directory: Path) -> list[tuple[str, dict]]:
    """Every <submission>/results.json below `directory`, by submission name."""
    return [(p.parent.name, json.loads(p.read_text())) for p in sorted(directory.glob("*/results.json"))]
