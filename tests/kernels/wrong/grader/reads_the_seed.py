"""Cheat: reads the seed from the worker's command line, draws the very inputs it is called on
(reference.registry builds them for anyone), computes GELU in NumPy, and copies the answer to the GPU
(a host-to-device copy is allowed), launching one kernel that does nothing."""

import sys

import numpy as np

from gpt2kit.reference.registry import build, cases
from tests.kernels.wrong import launch_nothing

FUNCTION = "gelu_forward"


def seed_of_the_worker() -> int:
    return int(sys.argv[sys.argv.index("--seed") + 1]) if "--seed" in sys.argv else 0


def gelu_forward(out, inp, N):
    case = next(c for c in cases(FUNCTION, seed_of_the_worker()) if c.size["N"] == N)
    x = build(case).args["inp"].astype(np.float64)
    answer = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    launch_nothing()
    out.set(answer.astype(np.float32).reshape(out.shape))
