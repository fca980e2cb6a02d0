"""Cheat: at import, replaces what the worker collects a call's outputs with (reference.execution._collect)
by one that hands back the right answer, computed in NumPy from the inputs, and launches one kernel that
does nothing."""

import gpt2kit.reference.execution as execution
from tests.kernels.wrong import launch_nothing

FUNCTION = "residual_forward"
collect = execution._collect


def forged(args, names):
    found = collect(args, names)
    if "out" in found:
        found["out"] = (collect(args, ["inp1"])["inp1"] + collect(args, ["inp2"])["inp2"]).reshape(found["out"].shape)
    return found


execution._collect = forged


def residual_forward(out, inp1, inp2, N):
    launch_nothing()
