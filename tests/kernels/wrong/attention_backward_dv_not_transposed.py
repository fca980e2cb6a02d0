"""Attention's backward pass whose dv takes p where p^T belongs: dv[s] sums p[s, t] dy[t] along key s's own row
of probabilities instead of down its column (what each query t gave key s)."""

from gpt2kit.kernels.attention_backward import ATTENTION_BACKWARD_SOURCE, backward_kernels, launch
from tests.kernels.wrong import mutate

FUNCTION = "attention_backward"

kernels = backward_kernels(mutate(ATTENTION_BACKWARD_SOURCE,
                                  "load_columns(p_slice, att + probabilities, T, t0, key0, T, T, true);",
                                  "load_rows(p_slice, att + probabilities, T, key0, t0, T, T, true);"))


def attention_backward(dinp, dscores, dout, inp, att, B, T, C, NH):
    launch(kernels, dinp, dscores, dout, inp, att, B, T, C, NH)
