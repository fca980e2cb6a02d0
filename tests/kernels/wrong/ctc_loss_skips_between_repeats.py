"""CTC with the blank skippable between any two labels, repeats too: "aa" then also aligns as a single "a" held
over two frames, so the loss counts alignments of another label sequence."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels import ctc_loss
from gpt2kit.kernels.ctc_loss import CTC_LOSS_SOURCE, DEFINES, KERNELS
from tests.kernels.wrong import mutate

FUNCTION = "ctc_loss_forward_backward"

alpha_beta = CudaKernel(mutate(CTC_LOSS_SOURCE, "labels[far / 2] != labels[far / 2 - 1]", "true"),
                        "ctc_alpha_beta_kernel", defines=DEFINES)


def ctc_loss_forward_backward(dlogits, losses, logits, targets, input_lengths, target_lengths, B, T, V, S):
    log_softmax, _, gradient = KERNELS
    ctc_loss.launch((log_softmax, alpha_beta, gradient), dlogits, losses, logits, targets, input_lengths,
                    target_lengths, B, T, V, S)
