"""Bidirectional attention without the 1 / sqrt(HS) scaling of its scores: its softmax far too peaked."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels import bidirectional_attention
from gpt2kit.kernels.bidirectional_attention import BIDIRECTIONAL_ATTENTION_SOURCE, DEFINES
from tests.kernels.wrong import mutate

FUNCTION = "bidirectional_attention_forward"

scores = CudaKernel(mutate(BIDIRECTIONAL_ATTENTION_SOURCE, "acc[i][j] * scale", "acc[i][j]"),
                    "bidirectional_scores_kernel", defines=DEFINES)


def bidirectional_attention_forward(out, att, inp, lengths, B, T, C, NH):
    bidirectional_attention.forward((scores, bidirectional_attention.bidirectional_softmax_kernel,
                                     bidirectional_attention.bidirectional_values_kernel), out, att, inp, lengths, B,
                                    T, C, NH)
