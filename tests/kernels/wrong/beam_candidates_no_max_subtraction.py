"""Beam candidates whose log_softmax is x - log(sum exp(x)), without the row's max subtracted: right for small
logits, but exp overflows to infinity for logits past 88, and every score is -inf."""

from kernels import beam_search
from tests.kernels.wrong import mutate

FUNCTION = "beam_candidates_forward"

source = mutate(beam_search.BEAM_SOURCE, "expf(value - largest)", "expf(value)")
source = mutate(source, "exp((double)maxima[c] - (double)largest)", "1.0")  # the chunks' sums, as they are
kernels = beam_search.candidate_kernels(mutate(source, "((value - largest) - log_sum)", "(value - log_sum)"))


def beam_candidates_forward(candidate_scores, candidate_tokens, logits, beam_scores, done, rows, V, stride, count):
    beam_search.launch_candidates(kernels, candidate_scores, candidate_tokens, logits, beam_scores, done, rows, V,
                                  stride, count)
