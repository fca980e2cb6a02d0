"""Sampling whose random number leaves the row out of its counter: rows at one position draw the same number."""

from gpt2kit.kernels import sampling
from tests.kernels.wrong import mutate

FUNCTION = "sample_forward"

COUNTER = "splitmix64(((u64)row << 32) | (unsigned)position)"
kernels = sampling.sampling_kernels(mutate(sampling.SAMPLING_SOURCE, COUNTER, "splitmix64((unsigned)position)"))


def sample_forward(tokens, sequences, logits, lengths, B, V, stride, max_T, temperature, top_k, top_p, seed):
    sampling.launch(kernels, tokens, sequences, logits, lengths, B, V, stride, max_T, temperature, top_k, top_p,
                    seed)
