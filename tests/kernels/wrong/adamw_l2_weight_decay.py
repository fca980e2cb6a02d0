"""Adam with an L2 penalty instead of AdamW: weight_decay * params is added to the gradient, so the decay
goes through m and v (and is divided by sqrt(v_hat)), where AdamW applies it to the parameter directly."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels import adamw
from tests.kernels.wrong import mutate

FUNCTION = "adamw_update"

source = mutate(adamw.ADAMW_SOURCE, "float g = grads[i];", "float g = grads[i] + weight_decay * params[i];")
kernel = CudaKernel(mutate(source, "learning_rate * (weight_decay * p + m_hat", "learning_rate * (m_hat"),
                    "adamw_kernel")


def adamw_update(params, grads, m, v, N, learning_rate, beta1, beta2, eps, weight_decay, step):
    adamw.launch(kernel, params, grads, m, v, N, learning_rate, beta1, beta2, eps, weight_decay, step)
