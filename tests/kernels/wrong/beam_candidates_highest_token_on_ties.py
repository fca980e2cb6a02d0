"""Beam candidates that rank equal scores by the highest token first, not the lowest (the host's stable order):
every candidate of a beam at -1e9 ties, and so do equal logits."""

from gpt2kit.kernels import beam_search
from tests.kernels.wrong import mutate

FUNCTION = "beam_candidates_forward"

kernels = beam_search.candidate_kernels(mutate(beam_search.BEAM_SOURCE, "return 0xffffffffu - index;", "return index;"))


def beam_candidates_forward(candidate_scores, candidate_tokens, logits, beam_scores, done, rows, V, stride, count):
    beam_search.launch_candidates(kernels, candidate_scores, candidate_tokens, logits, beam_scores, done, rows, V,
                                  stride, count)
