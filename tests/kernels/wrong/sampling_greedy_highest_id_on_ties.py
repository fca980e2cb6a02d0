"""Greedy choosing that breaks ties at the largest logit towards the highest id, not the lowest."""

from gpt2kit.kernels import sampling
from tests.kernels.wrong import mutate

FUNCTION = "sample_forward"

kernels = sampling.sampling_kernels(mutate(sampling.SAMPLING_SOURCE, "return 0xffffffffu - index;", "return index;"))


def sample_forward(tokens, sequences, logits, lengths, B, V, stride, max_T, temperature, top_k, top_p, seed):
    sampling.launch(kernels, tokens, sequences, logits, lengths, B, V, stride, max_T, temperature, top_k, top_p,
                    seed)
