"""Sampling whose random number leaves the row out of its counter: rows at one position draw the same number."""

import numpy as np

from kernel_runtime import CudaKernel
from kernels import sampling
from tests.kernels.wrong import mutate

FUNCTION = "sample_forward"

kernel = CudaKernel(mutate(sampling.SAMPLING_SOURCE, "splitmix64(((u64)row << 32) | (unsigned)position)",
                           "splitmix64((unsigned)position)"), "sample_kernel", options=sampling.OPTIONS)


def sample_forward(tokens, sequences, logits, lengths, B, V, stride, max_T, temperature, top_k, top_p, seed):
    kernel((B,), (sampling.THREADS,), (tokens, sequences, logits, lengths, np.int32(V), np.int32(stride),
                                       np.int32(max_T), np.float32(temperature), np.int32(min(top_k or V, V)),
                                       np.float32(1.0 if top_p is None else top_p), seed))
