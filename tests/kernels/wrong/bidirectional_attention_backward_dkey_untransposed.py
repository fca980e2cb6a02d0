"""Bidirectional attention's backward pass reading ds along its rows for dk: dk[s] = sum over t of ds[s, t] q[t], the
product with ds where ds^T belongs. Causal attention hides nothing here: ds is not symmetric."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels import bidirectional_attention
from gpt2kit.kernels.bidirectional_attention import BACKWARD_KERNELS, BIDIRECTIONAL_ATTENTION_SOURCE, DEFINES
from tests.kernels.wrong import mutate

FUNCTION = "bidirectional_attention_backward"

dkey_dvalue = CudaKernel(mutate(BIDIRECTIONAL_ATTENTION_SOURCE, "tiled_product<false, false>(dk, dscores",
                                "tiled_product<true, false>(dk, dscores"),
                         "bidirectional_dkey_dvalue_kernel", defines=DEFINES)


def bidirectional_attention_backward(dinp, dout, inp, att, lengths, B, T, C, NH):
    dprobabilities, softmax_backward, dquery, _ = BACKWARD_KERNELS
    bidirectional_attention.backward((dprobabilities, softmax_backward, dquery, dkey_dvalue), dinp, dout, inp, att,
                                     lengths, B, T, C, NH)
