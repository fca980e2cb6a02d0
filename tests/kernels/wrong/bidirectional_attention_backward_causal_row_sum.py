"""Bidirectional attention's backward pass with GPT-2's habit in the softmax's row sum: only the keys up to the query
count, so every query but the last real one gets its ds shifted."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels import bidirectional_attention
from gpt2kit.kernels.bidirectional_attention import BACKWARD_KERNELS, BIDIRECTIONAL_ATTENTION_SOURCE, DEFINES
from tests.kernels.wrong import mutate

FUNCTION = "bidirectional_attention_backward"

softmax_backward = CudaKernel(mutate(BIDIRECTIONAL_ATTENTION_SOURCE,
                                     "for (int s = lane; s < keys; s += 32) weighted += p[s] * g[s];",
                                     "for (int s = lane; s < min(keys, (int)(row % T) + 1); s += 32) "
                                     "weighted += p[s] * g[s];"),
                              "bidirectional_softmax_backward_kernel", defines=DEFINES)


def bidirectional_attention_backward(dinp, dout, inp, att, lengths, B, T, C, NH):
    dprobabilities, _, dquery, dkey_dvalue = BACKWARD_KERNELS
    bidirectional_attention.backward((dprobabilities, softmax_backward, dquery, dkey_dvalue), dinp, dout, inp, att,
                                     lengths, B, T, C, NH)
