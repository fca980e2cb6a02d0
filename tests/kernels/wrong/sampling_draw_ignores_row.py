"""Sampling whose random number leaves the row out of its counter: rows at one position draw the same number."""

from kernel_runtime import CudaKernel
from kernels import sampling
from tests.kernels.wrong import mutate

FUNCTION = "sample_forward"

kernel = CudaKernel(mutate(sampling.SAMPLING_SOURCE, "splitmix64(((u64)row << 32) | (unsigned)position)",
                           "splitmix64((unsigned)position)"), "sample_kernel", options=sampling.OPTIONS)


def sample_forward(tokens, sequences, logits, lengths, B, V, stride, max_T, temperature, top_k, top_p, seed):
    sampling.launch(kernel, tokens, sequences, logits, lengths, B, V, stride, max_T, temperature, top_k, top_p,
                    seed)
