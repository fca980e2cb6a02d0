"""Greedy choosing that breaks ties at the largest logit towards the highest id, not the lowest."""

from kernel_runtime import CudaKernel
from kernels import sampling
from tests.kernels.wrong import mutate

FUNCTION = "sample_forward"

kernel = CudaKernel(mutate(sampling.SAMPLING_SOURCE, "(a == b && ai < bi)", "(a == b && ai > bi)"), "sample_kernel",
                    options=sampling.OPTIONS)


def sample_forward(tokens, sequences, logits, lengths, B, V, stride, max_T, temperature, top_k, top_p, seed):
    sampling.launch(kernel, tokens, sequences, logits, lengths, B, V, stride, max_T, temperature, top_k, top_p,
                    seed)
