"""Attention's backward pass whose softmax backward drops the row sum: ds = scale * p * dp, as if each probability
depended on its own score alone (softmax's Jacobian is p_i (delta_ij - p_j), not p_i delta_ij)."""

from gpt2kit.kernels.attention_backward import ATTENTION_BACKWARD_SOURCE, backward_kernels, launch
from tests.kernels.wrong import mutate

FUNCTION = "attention_backward"

kernels = backward_kernels(mutate(ATTENTION_BACKWARD_SOURCE, "g[i] = scale * p[i] * (g[i] - row_sum);",
                                  "g[i] = scale * p[i] * g[i];"))


def attention_backward(dinp, dscores, dout, inp, att, B, T, C, NH):
    launch(kernels, dinp, dscores, dout, inp, att, B, T, C, NH)
