"""AdamW without the bias corrections: m and v, which start at 0, are used as they are, so the early steps
are too small (at step 1, m by a factor 1 - beta1 = 0.1 and sqrt(v) by sqrt(1 - beta2) = 0.03)."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels import adamw
from tests.kernels.wrong import mutate

FUNCTION = "adamw_update"

kernel = CudaKernel(mutate(adamw.ADAMW_SOURCE, "m_new / bias_correction1;\n    float v_hat = v_new / bias_correction2;",
                           "m_new;\n    float v_hat = v_new;"), "adamw_kernel")


def adamw_update(params, grads, m, v, N, learning_rate, beta1, beta2, eps, weight_decay, step):
    adamw.launch(kernel, params, grads, m, v, N, learning_rate, beta1, beta2, eps, weight_decay, step)
