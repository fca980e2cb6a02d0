"""Bidirectional attention's backward pass that forgets the forward's 1 / sqrt(HS) in ds: dq and dk come out sqrt(HS)
times too large (dv, which ds does not touch, stays right)."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels import bidirectional_attention
from gpt2kit.kernels.bidirectional_attention import BACKWARD_KERNELS, BIDIRECTIONAL_ATTENTION_SOURCE, DEFINES
from tests.kernels.wrong import mutate

FUNCTION = "bidirectional_attention_backward"

softmax_backward = CudaKernel(mutate(BIDIRECTIONAL_ATTENTION_SOURCE, "scale * p[s] * (g[s] - weighted)",
                                     "p[s] * (g[s] - weighted)"),
                              "bidirectional_softmax_backward_kernel", defines=DEFINES)


def bidirectional_attention_backward(dinp, dout, inp, att, lengths, B, T, C, NH):
    dprobabilities, _, dquery, dkey_dvalue = BACKWARD_KERNELS
    bidirectional_attention.backward((dprobabilities, softmax_backward, dquery, dkey_dvalue), dinp, dout, inp, att,
                                     lengths, B, T, C, NH)
