"""Grade kernel submissions, or write the students' handout.

    python -m gpt2kit.grading SUBMISSION [SUBMISSION ...] [--milestone N] [--seed N] [--out DIR] [--results-json PATH]
    python -m gpt2kit.grading --class-list FILE [--out DIR]    # one submission directory per line
    python -m gpt2kit.grading gather DIR [--milestone N]       # gradebook.csv of DIR/*/results.json, of their milestone
    python -m gpt2kit.grading handout OUT_DIR [--milestone N]  # the starter kit, solutions stubbed
    python -m gpt2kit.grading leaderboard SUBMISSION [...] [--variant NAME] [--seed N] [--out DIR]   # checked tok/s

A submission is a directory holding a student's kernels/ (or a kernels/ directory
itself). Each item of the milestone's weights file (grading/weights.toml for milestone
1, grading/weights_mN.toml for milestone N: --milestone's choices below are those
there are) runs in its own process, under a time limit: a worker records the
submission's calls, and a replayer that never imports it replays them on inputs from
a secret seed, fresh for each submission (printed in its report so a regrade can
repeat it). Per submission: a console table and OUT/<name>/results.json in
Gradescope's format; for several, OUT/gradebook.csv too. Where the reports go is
checked before the grading starts.
"""

from __future__ import annotations

import argparse
import secrets
import sys
from pathlib import Path

from gpt2kit.grading import reports
from gpt2kit.grading.grade import grade_submission
from gpt2kit.grading.handout import make_handout
from gpt2kit.grading.items import WEIGHTS_FILES, scheme_for
from gpt2kit.kernel_runtime import KitError
from gpt2kit.kernel_runtime.commands import SEED, SEED_LIMIT, OneLineArgumentParser, run_command
from gpt2kit.kernel_runtime.device import exit_without_gpu, keep_compiled_kernels_private
from gpt2kit.kernel_runtime.files import check_writable_directory, check_writable_file


def grade_main(argv) -> int:
    parser = OneLineArgumentParser(prog="python -m gpt2kit.grading", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("submissions", nargs="*", type=Path, help="submission directories")
    add_milestone_option(parser)
    parser.add_argument("--class-list", type=Path, help="a file naming one submission directory per line")
    parser.add_argument("--seed", type=SEED, help="seed of the inputs the replays are judged on, to repeat a run "
                                                   "(default: a fresh secret one per submission)")
    parser.add_argument("--out", type=Path, default=Path("grading-results"),
                        help="where reports go (default: grading-results)")
    parser.add_argument("--results-json", type=Path, help="also write the (single) submission's results.json here "
                                                          "(Gradescope: /autograder/results/results.json)")
    args = parser.parse_args(argv)
    submissions = list(args.submissions)
    if args.class_list:
        submissions += read_class_list(args.class_list)
    if not submissions:
        parser.error("name at least one submission directory (or --class-list)")
    check_submissions(submissions)
    check_writable_directory(args.out, f"--out {args.out}")
    if args.results_json:
        check_writable_file(args.results_json, f"--results-json {args.results_json}", parents_made=True)
    scheme = scheme_for(args.milestone)
    exit_without_gpu("gpt2kit.grading", "cannot grade without a GPU")
    rows = []
    for number, submission in enumerate(submissions, start=1):
        # fresh for each submission: a seed in one report must not be the next submission's secret
        seed = args.seed if args.seed is not None else secrets.randbelow(SEED_LIMIT)
        print(f"[{number}/{len(submissions)}] grading {submission} (milestone {scheme.milestone}) ...",
              file=sys.stderr, flush=True)
        grade = grade_submission(submission, scheme, seed, progress=lambda m: print(m, file=sys.stderr, flush=True))
        name = submission.resolve().name
        results, results_json = reports.gradescope_results(grade), args.out / name / "results.json"
        reports.write_results_json(results, results_json)
        print(reports.console_table(grade), flush=True)
        print(f"details: {results_json}\n", flush=True)
        if args.results_json:
            reports.write_results_json(results, args.results_json)
        rows.append((name, results))
    if len(rows) > 1:
        reports.write_gradebook(rows, scheme, args.out / "gradebook.csv")
        print(f"milestone {scheme.milestone} gradebook: {args.out / 'gradebook.csv'}", file=sys.stderr)
    return 0


def add_milestone_option(parser: argparse.ArgumentParser, default: int | None = 1,
                         help: str = "which milestone's items (default: 1)") -> None:
    parser.add_argument("--milestone", type=int, choices=sorted(WEIGHTS_FILES), default=default, help=help)


class GradingInputError(KitError):
    """A class list or submission the grader cannot read."""


def read_class_list(path: Path) -> list[Path]:
    """The submission directories a class list names, one per line (blank lines skipped)."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        raise GradingInputError(f"--class-list {path}: no such file") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as err:
        raise GradingInputError(f"--class-list {path}: cannot read it ({err.strerror or err.reason})") from None
    return [Path(line.strip()) for line in lines if line.strip()]


def check_submissions(submissions: list[Path]) -> None:
    """Raise one GradingInputError naming every submission that cannot be graded."""
    problems = [problem for problem in map(submission_problem, submissions) if problem]
    if problems:
        raise GradingInputError("; ".join(problems))


def submission_problem(submission: Path) -> str | None:
    """Why `submission` cannot be graded, or None."""
    if submission.is_dir():
        return None
    if submission.exists():
        return f"{submission} is a file, not a submission directory (unpack it into a directory first)"
    return f"no such submission directory: {submission}"


def gather_main(argv) -> int:
    parser = OneLineArgumentParser(prog="python -m gpt2kit.grading gather")
    parser.add_argument("directory", type=Path, help="the --out directory of the grading runs")
    add_milestone_option(parser, default=None, help="the milestone the results were graded under "
                                                    "(default: the one they say; given, it is checked against it)")
    args = parser.parse_args(argv)
    rows = reports.read_results(args.directory)
    if not rows:
        print(f"gpt2kit.grading gather: no */results.json under {args.directory}", file=sys.stderr)
        return 2
    scheme = scheme_for(reports.gathered_milestone(rows, args.directory, args.milestone))
    reports.write_gradebook(rows, scheme, args.directory / "gradebook.csv")
    print(f"milestone {scheme.milestone} gradebook of {len(rows)} submissions: {args.directory / 'gradebook.csv'}")
    return 0


def handout_main(argv) -> int:
    parser = OneLineArgumentParser(prog="python -m gpt2kit.grading handout")
    parser.add_argument("destination", type=Path)
    add_milestone_option(parser)
    args = parser.parse_args(argv)
    stubbed = make_handout(args.destination, milestone=args.milestone)
    print(f"milestone {args.milestone} handout written to {args.destination}; stubbed: {', '.join(stubbed)}")
    return 0


def leaderboard_main(argv) -> int:
    from gpt2kit.grading import leaderboard
    from gpt2kit.grading.ranking import commands, make_judge, rank_submission
    from gpt2kit.model_runtime.backends import check_fused_decode_set
    from gpt2kit.reference.variants import resolve_profile, variant_named

    parser = OneLineArgumentParser(prog="python -m gpt2kit.grading leaderboard", description=leaderboard.__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("submissions", nargs="+", type=Path, help="submission directories")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME",
                        help="a milestone variant in its host function's place, e.g. matmul_tf32 (repeatable)")
    parser.add_argument("--table", type=Path, default=leaderboard.TABLE_FILE,
                        help="the workload (default: grading/leaderboard.toml)")
    parser.add_argument("--seed", type=SEED, help="seed of the timed runs' prompts, to repeat a report's "
                                                   "(default: a fresh secret one per submission)")
    parser.add_argument("--out", type=Path, default=Path("leaderboard-results"),
                        help="where reports go (default: leaderboard-results)")
    args = parser.parse_args(argv)
    check_submissions(args.submissions)
    check_writable_directory(args.out, f"--out {args.out}")
    workload = leaderboard.load_workload(args.table)
    # the variants' own profile, whatever the TA's shell holds: a standing must not depend on it
    profile = resolve_profile(None, [variant_named(name) for name in args.variant], environ={})
    check_fused_decode_set(tuple(args.variant))  # a part of the set would be timed nowhere
    exit_without_gpu("gpt2kit.grading leaderboard", "cannot time kernels without a GPU")
    print(f"computing the gate's reference ({profile.name} profile) and the roofline ...", file=sys.stderr, flush=True)
    judge = make_judge(workload, profile)
    standings = []
    for number, submission in enumerate(args.submissions, start=1):
        print(f"[{number}/{len(args.submissions)}] timing {submission} ...", file=sys.stderr, flush=True)
        # each its own: reports show it, and --seed takes it back
        seed = args.seed if args.seed is not None else secrets.randbelow(SEED_LIMIT)
        result = rank_submission(submission, commands(args.table, tuple(args.variant)), judge, seed,
                                 progress=lambda m: print(m, file=sys.stderr, flush=True))
        reports.write_results_json(leaderboard.gradescope_fields(result),
                                   args.out / submission.resolve().name / "leaderboard.json")
        print(leaderboard.console_table(result) + "\n", flush=True)
        standings.append(result)
    for place, result in enumerate(sorted(standings, key=lambda r: -(r.score or 0)), start=1):
        score = f"{result.score:10.0f} tok/s" if result.score is not None else f"{'no score':>16s}"
        print(f"{place:3d}. {score}  {result.submission}  ({result.reason})")
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    keep_compiled_kernels_private()  # before CUDA starts: the grader and the ranking trust what they compile
    commands = {"handout": handout_main, "gather": gather_main, "leaderboard": leaderboard_main}
    if argv and argv[0] in commands:
        return run_command("gpt2kit.grading", lambda: commands[argv[0]](argv[1:]), error_status=2)
    return run_command("gpt2kit.grading", lambda: grade_main(argv), error_status=2)


if __name__ == "__main__":
    sys.exit(main())
