"""Cheat: launches a kernel that does nothing, then calls the kit's gold residual (CuPy's add)."""

from tests.kernels.wrong import launch_nothing

FUNCTION = "residual_forward"


def residual_forward(out, inp1, inp2, N):
    launch_nothing()
    from gpt2kit.reference.gold import residual_forward as gold

    gold(out, inp1, inp2, N)
