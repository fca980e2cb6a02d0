"""Encoder: token embedding plus position embedding.

    out[b, t, :] = wte[inp[b, t], :] + wpe[t, :]

inp (B, T) int32 token ids, wte (V, C) token embeddings, wpe (max_T, C) position
embeddings, out (B, T, C).

One block per (b, t) row: the block reads the token id once, then its threads walk
the C channels, consecutive threads on consecutive channels, so every load of the
wte and wpe rows is coalesced. When C is a multiple of 4 (GPT-2's always is) and the
arrays are 16-byte aligned, each thread moves 4 channels per 16-byte access. The
kernel is pure data movement (two reads, one write per element), so its speed is
measured in GB/s against the card's copy bandwidth.

A token id outside [0, V) would read another row or unmapped memory; instead its
row is filled with NaN, which any later check sees.
"""

import numpy as np

from gpt2kit.kernel_runtime import CudaKernel, KernelArgumentError, ceil_div, check_array, check_dims, check_rows

ENCODER_SOURCE = r"""
extern "C" __global__ void encoder_forward_kernel(float* out, const int* inp, const float* wte,
                                                  const float* wpe, int T, int C, int V) {
    // BEGIN SOLUTION
    long long bt = blockIdx.x;
    int token = inp[bt];
    float* y = out + bt * C;
    if (token < 0 || token >= V) {  // NaN: a bad token id must not pass silently
        for (int c = threadIdx.x; c < C; c += blockDim.x) y[c] = __int_as_float(0x7fffffff);
        return;
    }
    const float* token_row = wte + (long long)token * C;
    const float* position_row = wpe + (long long)(bt % T) * C;
    bool aligned = C % 4 == 0 && (((size_t)out | (size_t)wte | (size_t)wpe) % 16) == 0;
    if (aligned) {
        for (int c = 4 * threadIdx.x; c < C; c += 4 * blockDim.x) {
            float4 a = *(const float4*)(token_row + c), b = *(const float4*)(position_row + c);
            *(float4*)(y + c) = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
        }
    } else {
        for (int c = threadIdx.x; c < C; c += blockDim.x) y[c] = token_row[c] + position_row[c];
    }
    // END SOLUTION
}
"""

encoder_forward_kernel = CudaKernel(ENCODER_SOURCE, "encoder_forward_kernel")

MAX_BLOCK_SIZE = 256


def encoder_forward(out, inp, wte, wpe, B, T, C):
    check_dims("encoder_forward", B=B, T=T, C=C)
    check_array("encoder_forward", "inp", inp, B * T, np.int32)
    V = check_rows("encoder_forward", "wte", wte, C)
    max_T = check_rows("encoder_forward", "wpe", wpe, C)
    if T > max_T:
        raise KernelArgumentError(f"encoder_forward: T={T} exceeds the {max_T} positions wpe holds")
    check_array("encoder_forward", "out", out, B * T * C)
    threads = min(MAX_BLOCK_SIZE, 32 * ceil_div(ceil_div(C, 4), 32))  # a warp multiple covering C/4
    encoder_forward_kernel((B * T,), (threads,), (out, inp, wte, wpe, np.int32(T), np.int32(C), np.int32(V)))
