"""Attention's backward pass whose dk sums ds[t, s] q[t] over every query t, those before key s included: it
reads ds above the diagonal, which was never written (no query sees a later key)."""

from gpt2kit.kernels.attention_backward import ATTENTION_BACKWARD_SOURCE, backward_kernels, launch
from tests.kernels.wrong import mutate

FUNCTION = "attention_backward"

every_query = mutate(ATTENTION_BACKWARD_SOURCE, "for (int t0 = key0; t0 < T; t0 += TILE_K)",
                     "for (int t0 = 0; t0 < T; t0 += TILE_K)")
kernels = backward_kernels(mutate(every_query, "(ds_slice, dscores + probabilities, T, t0, key0, T, T, true)",
                                  "(ds_slice, dscores + probabilities, T, t0, key0, T, T, false)"))


def attention_backward(dinp, dscores, dout, inp, att, B, T, C, NH):
    launch(kernels, dinp, dscores, dout, inp, att, B, T, C, NH)
