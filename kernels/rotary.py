"""Rotary position embedding (GPT-J's): queries and keys turned by an angle that grows with position.

GPT-J has no table of learned positions to add to its tokens. Instead, inside every
attention layer, each query and key head has its first rotary_dim values taken as
pairs (2i, 2i+1), and each pair is turned as a point in the plane by the angle
position * theta_i, with theta_i = 10000^(-2i / rotary_dim):

    out[2i]     = x[2i] * cos - x[2i + 1] * sin
    out[2i + 1] = x[2i + 1] * cos + x[2i] * sin

A query at position p and a key at position p' then meet in a dot product that
depends on p - p' only: attention sees how far apart two tokens are, not where they
are. Values are not turned, nor a head's values past rotary_dim (GPT-J: 64 of 256).

    rotary_forward(out, inp, positions, sin_cos, B, T, C, NH, rotary_dim)

inp and out are packed q|k|v rows (B, T, 3C), as the qkv matmul writes them and the
attention kernels read them; token t of row b is at position positions[b] + t.
positions (B,) int32 is read from device memory, as the KV-cache kernels read their
lengths (kernels/decode.py): a prefill passes zeros, a decode step the cache's
lengths, and a captured step stays right at every length. sin_cos (max_T, rotary_dim)
holds each position's sines (columns 0 .. rotary_dim/2 - 1) and cosines (the rest),
computed once in float64 by the model and rounded to float32 (transformers keeps the
same table): a kernel that computed its own float32 angles would be off by about
p * 1e-7 radians, 2e-4 at position 2,000.

One thread per element of out: it reads its own value and its pair's, and the
table's two entries for its pair. Consecutive threads take consecutive elements, so
every read and write is coalesced. out must not be inp.
"""

import numpy as np

from gpt2kit.kernel_runtime import CudaKernel, KernelArgumentError, ceil_div, check_array, check_dims, check_rows

ROTARY_SOURCE = r"""
extern "C" __global__ void rotary_forward_kernel(float* out, const float* inp, const int* positions,
                                                 const float* sin_cos, int T, int C, int NH, int rotary_dim,
                                                 int max_T, long long N) {
    let_next_kernel_start();
    wait_for_previous_kernel();
    // BEGIN SOLUTION
    long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= N) return;
    int column = (int)(e % (3 * C)), head_size = C / NH;
    int d = column % C % head_size;  // the element's place in its head
    if (column >= 2 * C || d >= rotary_dim) {  // a value, or past the rotated part: copied
        out[e] = inp[e];
        return;
    }
    long long row = e / (3 * C);
    int position = positions[row / T] + (int)(row % T), i = d / 2;
    if (position < 0 || position >= max_T) {
        out[e] = __int_as_float(0x7fffffff);  // no angle for it: NaN, never a neighbour's
        return;
    }
    float sin_p = sin_cos[(long long)position * rotary_dim + i];
    float cos_p = sin_cos[(long long)position * rotary_dim + rotary_dim / 2 + i];
    float x = inp[e - (d & 1)], y = inp[e - (d & 1) + 1];  // the pair (2i, 2i + 1)
    out[e] = (d & 1) ? y * cos_p + x * sin_p : x * cos_p - y * sin_p;
    // END SOLUTION
}
"""

rotary_forward_kernel = CudaKernel(ROTARY_SOURCE, "rotary_forward_kernel")

BLOCK_SIZE = 256


def rotary_forward(out, inp, positions, sin_cos, B, T, C, NH, rotary_dim):
    check_dims("rotary_forward", B=B, T=T, C=C, NH=NH, rotary_dim=rotary_dim)
    if C % NH:
        raise KernelArgumentError(f"rotary_forward: C={C} is not a multiple of NH={NH}")
    if rotary_dim % 2 or rotary_dim > C // NH:
        raise KernelArgumentError(f"rotary_forward: rotary_dim={rotary_dim} must be even and at most the head "
                                  f"size {C // NH}")
    N = B * T * 3 * C
    check_array("rotary_forward", "inp", inp, N)
    check_array("rotary_forward", "out", out, N)
    check_array("rotary_forward", "positions", positions, B, np.int32)
    max_T = check_rows("rotary_forward", "sin_cos", sin_cos, rotary_dim)
    if out.data.ptr == inp.data.ptr:
        raise KernelArgumentError("rotary_forward: out must not be inp (each pair reads its partner)")
    launch(rotary_forward_kernel, out, inp, positions, sin_cos, B, T, C, NH, rotary_dim, max_T)


def launch(kernel, out, inp, positions, sin_cos, B, T, C, NH, rotary_dim, max_T):
    """`kernel` (rotary_forward_kernel, or one with its parameters) over every element of out."""
    N = B * T * 3 * C
    kernel((ceil_div(N, BLOCK_SIZE),), (BLOCK_SIZE,), (out, inp, positions, sin_cos, np.int32(T), np.int32(C),
                                                       np.int32(NH), np.int32(rotary_dim), np.int32(max_T),
                                                       np.int64(N)))
