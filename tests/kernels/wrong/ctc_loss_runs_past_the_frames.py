"""CTC whose recursions run over all T frames of the padded batch, not each utterance's own: beta starts at the
batch's last frame, so a shorter utterance's occupancies, and its gradient, take in the padding."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels import ctc_loss
from gpt2kit.kernels.ctc_loss import CTC_LOSS_SOURCE, DEFINES, KERNELS
from tests.kernels.wrong import mutate

FUNCTION = "ctc_loss_forward_backward"

alpha_beta = CudaKernel(mutate(CTC_LOSS_SOURCE,
                               "const int frames = input_lengths[b], L = 2 * target_lengths[b] + 1;\n"
                               "    const int* labels",
                               "const int frames = T, L = 2 * target_lengths[b] + 1;\n    const int* labels"),
                        "ctc_alpha_beta_kernel", defines=DEFINES)


def ctc_loss_forward_backward(dlogits, losses, logits, targets, input_lengths, target_lengths, B, T, V, S):
    log_softmax, _, gradient = KERNELS
    ctc_loss.launch((log_softmax, alpha_beta, gradient), dlogits, losses, logits, targets, input_lengths,
                    target_lengths, B, T, V, S)
