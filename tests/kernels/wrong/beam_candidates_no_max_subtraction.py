"""Beam candidates whose log_softmax is x - log(sum exp(x)), without the row's max subtracted: right for small
logits, but exp(x) is no longer at most 1, so a chunk's fixed-point sum (1 is 2^63 / CHUNK) overflows 64 bits once
its exps add up past CHUNK, and exp itself overflows to infinity for logits past 88: the scores are garbage."""

from gpt2kit.kernels import beam_search
from tests.kernels.wrong import mutate

FUNCTION = "beam_candidates_forward"

source = mutate(beam_search.BEAM_SOURCE, "expf(value - largest)", "expf(value)")
source = mutate(source, "exp((double)chunk_largest - (double)largest)", "1.0")  # the chunks' sums, as they are
kernels = beam_search.candidate_kernels(mutate(source, "((value - largest) - log_sum)", "(value - log_sum)"))


def beam_candidates_forward(candidate_scores, candidate_tokens, logits, beam_scores, done, rows, V, stride, count):
    beam_search.launch_candidates(kernels, candidate_scores, candidate_tokens, logits, beam_scores, done, rows, V,
                                  stride, count)
