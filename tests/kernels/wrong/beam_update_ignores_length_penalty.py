"""Beam search's bookkeeping that files a hypothesis under its summed log-probability, not divided by its length
to the power length_penalty: once hypotheses are longer than one token, they rank and compare wrongly."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels import beam_search
from tests.kernels.wrong import mutate

FUNCTION = "beam_update_forward"

PENALTY = "float penalty = (float)pow((double)(step + 1), length_penalty);"
kernel = CudaKernel(mutate(beam_search.BEAM_SOURCE, PENALTY, "float penalty = 1.0f;"), "beam_update_kernel",
                    defines=beam_search.DEFINES, options=beam_search.OPTIONS)


def beam_update_forward(candidate_scores, candidate_tokens, beam_scores, finished_scores, finished_step,
                        finished_beam, finished_token, is_finished, improvable, parents, chosen, tokens, rows, done,
                        lengths, P, K, V, prompt_length, max_length, length_penalty, early_stopping, end_of_text):
    beam_search.launch_update(kernel, candidate_scores, candidate_tokens, beam_scores, finished_scores, finished_step,
                              finished_beam, finished_token, is_finished, improvable, parents, chosen, tokens, rows,
                              done, lengths, P, K, V, prompt_length, max_length, length_penalty, early_stopping,
                              end_of_text)
