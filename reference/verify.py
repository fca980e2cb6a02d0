"""Quick check: run each kernel once on fresh random inputs and print PASS/FAIL.

    python -m reference.verify                  # this repo's kernels/
    python -m reference.verify --kernels DIR    # another kernels/ directory
    python -m reference.verify --seed 1234      # repeat a run exactly

Each kernel gets one GPT-2-sized case, compared with the float64 NumPy reference
under the same tolerances as the tests (reference/checks.py). For the full set of
odd sizes and extreme values run `pytest tests/kernels`.
"""

import argparse
import random
import sys

from gpt2.cuda import gpu_unavailable_reason, load_kernel_package
from reference.checks import FUNCTIONS, case, run_case

QUICK_CASES = {
    "encoder": dict(B=4, T=64, C=768, V=50257, maxT=1024),
    "layernorm": dict(B=4, T=64, C=768),
    "matmul": dict(B=4, T=64, C=768, OC=2304),
    "attention": dict(B=2, T=128, C=768, NH=12),
    "softmax": dict(N=24, T=128),
    "residual": dict(N=4 * 64 * 768),
    "gelu": dict(N=4 * 64 * 3072),
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reference.verify", description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", help="kernels/ directory to check (default: this repo's)")
    parser.add_argument("--seed", type=int, help="base seed (default: a fresh one, printed)")
    args = parser.parse_args(argv)

    reason = gpu_unavailable_reason()
    if reason is not None:
        print(f"reference.verify: cannot run kernels: {reason}", file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else random.randrange(1_000_000)
    try:
        package = load_kernel_package(args.kernels)
    except (FileNotFoundError, AttributeError, SyntaxError, ImportError) as err:
        print(f"reference.verify: cannot load kernels: {err}", file=sys.stderr)
        return 2

    print(f"checking {args.kernels or 'kernels/'} with seed {seed} (--seed {seed} repeats this run)")
    print(f"{'kernel':10s} {'case':32s} {'result':6s} {'max abs err':>11s} {'max rel err':>11s} {'err/allowed':>11s}")
    failures = 0
    for kernel, sizes in QUICK_CASES.items():
        c = case(kernel, base_seed=seed, **sizes)
        result = run_case(getattr(package, FUNCTIONS[kernel]), c)
        failures += not result.passed
        print(f"{kernel:10s} {c.id.rsplit('-seed', 1)[0]:32s} {'PASS' if result.passed else 'FAIL':6s} "
              f"{result.max_abs_error:11.2e} {result.max_rel_error:11.2e} {result.worst_ratio:11.3f}")
        if not result.passed:
            print(f"           {result.message}")
    print(f"{len(QUICK_CASES) - failures} of {len(QUICK_CASES)} kernels pass")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
