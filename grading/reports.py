"""Grade reports: a console table, Gradescope's results.json, a class gradebook CSV.

Each names the milestone whose weights file made the grade, and the isolation its workers
ran under (grading.sandbox). results.json keeps both in Gradescope's extra_data (stored
there, shown to no one), so that `grading gather`
builds the gradebook from that milestone's items. Each file is written whole or not
at all (kernel_runtime.files): a grading run stopped midway keeps the previous report.
An item whose calls launched a staff solution's kernel (grading.provenance) says so
under its row of the table, in its test's output and, by item title, in extra_data.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from gpt2kit.grading.grade import SubmissionGrade
from gpt2kit.grading.items import Scheme
from gpt2kit.kernel_runtime import KitError
from gpt2kit.kernel_runtime.files import replacing


def console_table(grade: SubmissionGrade, width: int = 100) -> str:
    lines = [f"submission: {grade.submission}   (milestone {grade.milestone}, seed {grade.seed})",
             *filter(None, [grade.isolation]),
             f"{'item':30s} {'weight':>6s} {'score':>6s}  reason"]
    for g in grade.items:
        reason = g.reason if len(g.reason) <= width else g.reason[: width - 3] + "..."
        lines.append(f"{g.item.title:30s} {g.item.weight:6g} {g.score:6.2f}  {reason}")
        lines += [f"{'':45s} {line}" for line in g.staff_kernels]  # under the reason, whole: the TA reads the code
    if grade.menu_cap_points:
        lines.append(f"{'(menu items count up to ' + format(grade.menu_cap_points, 'g') + ' points)':30s}")
    lines.append(f"{'total':30s} {grade.max_score:6g} {grade.score:6.2f}")
    return "\n".join(lines)


MAX_LISTED_FAILURES = 20  # per item, so one broken kernel cannot flood the student's page


def gradescope_results(grade: SubmissionGrade) -> dict:
    """Gradescope's autograder format: the total, and one test per item with its output."""
    tests = []
    for g in grade.items:
        output = "\n".join([g.reason, *g.staff_kernels])
        if g.details:
            shown = g.details[:MAX_LISTED_FAILURES]
            output += f"\nfailing cases ({len(g.details)}):\n" + "\n".join(f"- {d}" for d in shown)
            if len(g.details) > len(shown):
                output += f"\n... and {len(g.details) - len(shown)} more"
        tests.append({"name": g.item.title, "score": round(g.score, 4), "max_score": g.item.weight,
                      "output": output})
    staff_kernels = {g.item.title: g.staff_kernels for g in grade.items if g.staff_kernels}
    extra = ({"milestone": grade.milestone} | ({"isolation": grade.isolation} if grade.isolation else {})
             | ({"staff_kernels": staff_kernels} if staff_kernels else {}))
    return {"score": round(grade.score, 4),
            "output": f"milestone {grade.milestone}: {grade.score:g} of {grade.max_score:g} points",
            "extra_data": extra, "tests": tests}


def milestone_of(results: dict) -> int | None:
    """The milestone a results.json says it was graded under; None if it does not say."""
    extra = results.get("extra_data")
    return extra.get("milestone") if isinstance(extra, dict) else None


def write_results_json(results: dict, path: Path) -> None:
    """Write gradescope_results(...) to `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with replacing(path) as partial:
        partial.write_text(json.dumps(results, indent=2) + "\n")


class GatherError(KitError):
    """Results that cannot make one gradebook."""


def gathered_milestone(rows: list[tuple[str, dict]], directory: Path, milestone: int | None) -> int:
    """The one milestone of the results read from `directory`, checked against `milestone` (--milestone)
    when it is given; results that do not say theirs need it given."""
    by_milestone: dict[int | None, list[str]] = {}
    for name, results in rows:
        by_milestone.setdefault(milestone_of(results), []).append(name)
    said = sorted(m for m in by_milestone if m is not None)
    if len(said) > 1:
        mixed = "; ".join(f"milestone {m}: {_some(by_milestone[m])}" for m in said)
        raise GatherError(f"the results in {directory} mix milestones ({mixed}); "
                          f"gather each milestone's from a directory of its own")
    if milestone is not None and said and said != [milestone]:
        raise GatherError(f"--milestone {milestone}, but the results in {directory} are milestone {said[0]}'s")
    if milestone is None and None in by_milestone:
        raise GatherError(f"the results of {_some(by_milestone[None])} in {directory} do not say their milestone; "
                          f"name it with --milestone N")
    return milestone if milestone is not None else said[0]


def _some(names: list[str], shown: int = 3) -> str:
    """A few of `names` and how many there are, for one line about a class."""
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


def write_gradebook(rows: list[tuple[str, dict]], scheme: Scheme, path: Path) -> None:
    """One row per submission: its name, milestone, total, and each of the scheme's items' scores (from
    results.json contents). Results without a score for one of the items were made by another scheme."""
    titles = [item.title for item in scheme.items]
    scores = {name: {t["name"]: t["score"] for t in results["tests"]} for name, results in rows}
    for name, by_title in scores.items():
        missing = [title for title in titles if title not in by_title]
        if missing:
            raise GatherError(f"{name}: its results have no score for {missing[0]!r}, "
                              f"an item of milestone {scheme.milestone}")
    with replacing(path) as partial, open(partial, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["submission", "milestone", "total", *titles])
        for name, results in rows:
            writer.writerow([name, scheme.milestone, results["score"], *(scores[name][t] for t in titles)])


def read_results(directory: Path) -> list[tuple[str, dict]]:
    """Every <submission>/results.json below `directory`, by submission name."""
    return [(p.parent.name, json.loads(p.read_text())) for p in sorted(directory.glob("*/results.json"))]
