"""MatMul that is right for its first CALLS_RIGHT calls (the gate's, about 930, and some of the
first warm-up's), then returns without computing: its outputs keep whatever they held."""

from gpt2kit.kernels.matmul import matmul_forward as solution

FUNCTION = "matmul_forward"
CALLS_RIGHT = 1_000

calls = 0


def matmul_forward(out, inp, weight, bias, B, T, C, OC):
    global calls
    calls += 1
    if calls <= CALLS_RIGHT:
        solution(out, inp, weight, bias, B, T, C, OC)
