"""Bidirectional attention whose softmax runs over all T keys, the padded frames' too (their scores never computed):
a batch of utterances of one length passes, a padded one does not."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels import bidirectional_attention
from gpt2kit.kernels.bidirectional_attention import BIDIRECTIONAL_ATTENTION_SOURCE, DEFINES
from tests.kernels.wrong import mutate

FUNCTION = "bidirectional_attention_forward"

softmax = CudaKernel(mutate(BIDIRECTIONAL_ATTENTION_SOURCE, "const int keys = min(lengths[row / ((long long)NH * T)], T);",
                            "const int keys = T;"), "bidirectional_softmax_kernel", defines=DEFINES)


def bidirectional_attention_forward(out, att, inp, lengths, B, T, C, NH):
    kernels = (bidirectional_attention.bidirectional_scores_kernel, softmax,
               bidirectional_attention.bidirectional_values_kernel)
    bidirectional_attention.forward(kernels, out, att, inp, lengths, B, T, C, NH)
