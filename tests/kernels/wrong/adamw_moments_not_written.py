"""AdamW that updates m and v in registers only: the parameters move right this step, but m and v keep their
old values, so the next step's moments forget this gradient."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels import adamw
from tests.kernels.wrong import mutate

FUNCTION = "adamw_update"

kernel = CudaKernel(mutate(adamw.ADAMW_SOURCE, "    m[i] = m_new;\n    v[i] = v_new;\n", ""), "adamw_kernel")


def adamw_update(params, grads, m, v, N, learning_rate, beta1, beta2, eps, weight_decay, step):
    adamw.launch(kernel, params, grads, m, v, N, learning_rate, beta1, beta2, eps, weight_decay, step)
