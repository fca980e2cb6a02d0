"""Attention's backward pass that forgets the forward pass's 1/sqrt(HS) on the scores: dq and dk sqrt(HS) times
too large."""

from gpt2kit.kernels.attention_backward import ATTENTION_BACKWARD_SOURCE, backward_kernels, launch
from tests.kernels.wrong import mutate

FUNCTION = "attention_backward"

kernels = backward_kernels(mutate(ATTENTION_BACKWARD_SOURCE, "g[i] = scale * p[i] * (g[i] - row_sum);",
                                  "g[i] = p[i] * (g[i] - row_sum);"))


def attention_backward(dinp, dscores, dout, inp, att, B, T, C, NH):
    launch(kernels, dinp, dscores, dout, inp, att, B, T, C, NH)
