"""Quick check: run each host function once on fresh random inputs and print PASS/FAIL.

    python -m gpt2kit.reference.verify                  # this kit's kernels/
    python -m gpt2kit.reference.verify --kernels DIR    # another kernels/ directory
    python -m gpt2kit.reference.verify --seed 1234      # repeat a run exactly
    python -m gpt2kit.reference.verify --profile tf32   # judged under a precision profile (reference.precision)

Each host function with a quick case in its spec gets that one GPT-2-sized case,
compared with the float64 NumPy reference under the same tolerances as the tests
(reference/specs/), under --profile, else $KIT_PROFILE, else fp32
(reference.variants.resolve_profile). A host function still a starter kit's stub is
named ("TODO ... not written yet"), not run. For the full set of odd sizes and
extreme values run `pytest tests/kernels`.
"""

import random
import sys

from gpt2kit.kernel_runtime import recording
from gpt2kit.kernel_runtime.commands import SEED, OneLineArgumentParser, run_command
from gpt2kit.kernel_runtime.device import exit_without_gpu
from gpt2kit.kernel_runtime.errors import KitError
from gpt2kit.kernel_runtime.loader import use_kernels
from gpt2kit.reference.judging import run_case
from gpt2kit.reference.registry import SPECS, host_function, not_written_yet
from gpt2kit.reference.variants import add_profile_option, resolve_profile


def quick_cases(seed: int) -> list:
    """The quick check's rows: one case per host function whose spec has a quick case."""
    return [spec.quick_case(seed) for spec in SPECS.values() if spec.quick is not None]


def main(argv=None) -> int:
    parser = OneLineArgumentParser(prog="python -m gpt2kit.reference.verify", description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", help="kernels/ directory to check (default: this kit's)")
    parser.add_argument("--seed", type=SEED, help="base seed, from 0 to 2**31 - 1 (default: a fresh one, printed)")
    add_profile_option(parser.add_argument, "the checks judge by", "fp32")
    args = parser.parse_args(argv)
    return run_command("gpt2kit.reference.verify", lambda: verify(args), error_status=2)


def verify(args) -> int:
    seed = args.seed if args.seed is not None else random.randrange(1_000_000)
    profile = resolve_profile(args.profile)
    directory = use_kernels(args.kernels)  # a wrong path is named before a missing GPU
    exit_without_gpu("gpt2kit.reference.verify")
    recording.install()  # before any kernel module is imported
    rows = quick_cases(seed)
    print(f"checking {directory} with seed {seed} (--seed {seed} repeats this run), "
          f"under the {profile.name} profile")
    print(f"{'host function':20s} {'case':32s} {'result':6s} {'max abs err':>11s} {'max rel err':>11s} "
          f"{'err/allowed':>11s}")
    failures = stubs = 0
    for case in rows:
        stub = not_written_yet([case.function])
        if stub:  # a starter kit's stub: named, not run
            print(f"{case.function:20s} {'':32s} TODO   {stub}")
            stubs += 1
            continue
        try:
            result = run_case(host_function(case.function), case, profile=profile)
        except KitError as err:
            print(f"{case.function:20s} {'':32s} FAIL   {err}")
            failures += 1
            continue
        failures += not result.passed
        print(f"{case.function:20s} {case.id.rsplit('-seed', 1)[0]:32s} {'PASS' if result.passed else 'FAIL':6s} "
              f"{result.max_abs_error:11.2e} {result.max_rel_error:11.2e} {result.worst_ratio:11.3f}")
        if not result.passed:
            print(f"{'':21s}{result.message}")
    unwritten = f", {stubs} not written yet" if stubs else ""
    print(f"{len(rows) - failures - stubs} of {len(rows)} host functions pass{unwritten}")
    return 1 if failures or stubs else 0


if __name__ == "__main__":
    sys.exit(main())
