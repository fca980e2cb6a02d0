"""CTC's gradient at the log-probabilities handed back as the logits' gradient: the softmax term of the
log-softmax's Jacobian is left out, and only the occupancies' minus remains."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels import ctc_loss
from gpt2kit.kernels.ctc_loss import CTC_LOSS_SOURCE, DEFINES, KERNELS
from tests.kernels.wrong import mutate

FUNCTION = "ctc_loss_forward_backward"

log_softmax = CudaKernel(mutate(CTC_LOSS_SOURCE, "d[v] = expf(value);", "d[v] = 0.0f;"), "ctc_log_softmax_kernel",
                         defines=DEFINES)


def ctc_loss_forward_backward(dlogits, losses, logits, targets, input_lengths, target_lengths, B, T, V, S):
    _, alpha_beta, gradient = KERNELS
    ctc_loss.launch((log_softmax, alpha_beta, gradient), dlogits, losses, logits, targets, input_lengths,
                    target_lengths, B, T, V, S)
