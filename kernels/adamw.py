"""One AdamW step (torch.optim.AdamW) over N parameters, elementwise, one thread per parameter.

    m      = beta1 * m + (1 - beta1) * g                 running mean of the gradient g
    v      = beta2 * v + (1 - beta2) * g^2               running mean of its square
    m_hat  = m / (1 - beta1^step)                        bias corrections: m and v start at 0,
    v_hat  = v / (1 - beta2^step)                        so early steps' means are scaled up
    params = params - learning_rate * (weight_decay * params + m_hat / (sqrt(v_hat) + eps))

step counts from 1. m and v are updated in place and written back (the next step starts
from them), then params. The weight decay is decoupled: it shrinks the parameter directly
and never enters m and v, where Adam's L2 penalty would add weight_decay * params to g.

The scalars reach the kernel as float32, and some are better formed on the host in double:
1 - beta2 from a float32 beta2 = 0.999 would be off by 1.3e-5 of itself (216 times
float32's unit roundoff), so the host passes 1 - beta1 and 1 - beta2, and the bias corrections
1 - beta^step, each rounded once to float32.

Bandwidth alone: 4 floats read and 3 written per parameter, no reuse. Consecutive threads
on consecutive parameters keep every access coalesced.
"""

import numpy as np

from gpt2kit.kernel_runtime import CudaKernel, KernelArgumentError, ceil_div, check_array, check_dims

ADAMW_SOURCE = r"""
extern "C" __global__ void adamw_kernel(float* params, const float* grads, float* m, float* v, long long N,
                                        float learning_rate, float beta1, float one_minus_beta1, float beta2,
                                        float one_minus_beta2, float bias_correction1, float bias_correction2,
                                        float eps, float weight_decay) {
    // BEGIN SOLUTION
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    float g = grads[i];
    float m_new = beta1 * m[i] + one_minus_beta1 * g;  // the running means, which the next step starts from
    float v_new = beta2 * v[i] + one_minus_beta2 * g * g;
    m[i] = m_new;
    v[i] = v_new;
    float m_hat = m_new / bias_correction1;
    float v_hat = v_new / bias_correction2;
    float p = params[i];
    params[i] = p - learning_rate * (weight_decay * p + m_hat / (sqrtf(v_hat) + eps));  // decay kept out of m, v
    // END SOLUTION
}
"""

adamw_kernel = CudaKernel(ADAMW_SOURCE, "adamw_kernel")

BLOCK_SIZE = 256


def adamw_update(params, grads, m, v, N, learning_rate, beta1, beta2, eps, weight_decay, step):
    check_dims("adamw_update", N=N, step=step)
    for name, array in (("params", params), ("grads", grads), ("m", m), ("v", v)):
        check_array("adamw_update", name, array, N)
    if not (0 <= beta1 < 1 and 0 <= beta2 < 1):
        raise KernelArgumentError(f"adamw_update: beta1={beta1} and beta2={beta2} must lie in [0, 1)")
    launch(adamw_kernel, params, grads, m, v, N, learning_rate, beta1, beta2, eps, weight_decay, step)


def launch(kernel, params, grads, m, v, N, learning_rate, beta1, beta2, eps, weight_decay, step):
    """`kernel` (adamw_kernel, or one with its parameters) over the N parameters, its scalars formed in double and
    each rounded once to float32."""
    beta1, beta2 = float(beta1), float(beta2)
    scalars = (learning_rate, beta1, 1 - beta1, beta2, 1 - beta2, 1 - beta1**step, 1 - beta2**step, eps, weight_decay)
    kernel((ceil_div(N, BLOCK_SIZE),), (BLOCK_SIZE,), (params, grads, m, v, np.int64(N), *map(np.float32, scalars)))
