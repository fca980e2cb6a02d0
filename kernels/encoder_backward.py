"""The encoder's backward pass: each (b, t) row of dout goes to the two rows the forward pass read.

    dwte[inp[b, t], :] += dout[b, t, :]          (a token repeated in the batch gathers all its rows)
    dwpe[t, :]         += sum over b of dout[b, t, :]

inp (B, T) int32 token ids, dout (B, T, C), dwte (V, C) and dwpe (max_T, C): both
parameters' gradients, added to; dwpe's rows from T on are left as they are.

Repeated tokens are what make this kernel harder than it looks. One thread per (b, t, c)
doing dwte[token][c] += dout[b][t][c] races: two positions holding the same token read
the same old value and one of the two additions is lost. atomicAdd would fix the race,
but the order of the additions would then change from run to run, and with it the last
bits of the sums. Here the sums are deterministic: every row of dwte is added to by one
block only, in position order, with no atomics on floats.

dwte, one block per position i: the block scans every id of the batch. If its token
occurs at an earlier position, it stops there: that position's block does the work.
Otherwise i is the token's first position, and the block walks the positions from i to
the token's last, BLOCK_SIZE at a time; a warp vote (__ballot_sync) marks which
positions of a tile hold the token, and each thread adds those rows of dout, in order,
to its channels of the dwte row. A token seen once (most of them) takes one tile.
The scans compare (B*T)^2 ids in all; the ids are few (32 KB at B*T = 8192) and are read
from cache, not memory, but the count grows with the square of the batch: a batch of far
more positions would first sort its positions by token.

dwpe, one thread per (t, c): the sum over b, in order, of B coalesced reads.

A token id outside [0, V) has no row to add to and is skipped: the forward pass already
turned its output into NaN (kernels/encoder.py), which the loss shows.
"""

import numpy as np

from gpt2kit.kernel_runtime import CudaKernel, KernelArgumentError, ceil_div, check_array, check_dims, check_rows

BLOCK_SIZE = 256

ENCODER_BACKWARD_SOURCE = r"""
#define WARPS (BLOCK_SIZE / 32)

extern "C" __global__ void __launch_bounds__(BLOCK_SIZE) encoder_backward_wte_kernel(
        float* dwte, const float* dout, const int* inp, int BT, int C, int V) {
    // BEGIN SOLUTION
    __shared__ int last;                      // the last position holding this block's token
    __shared__ unsigned tile_matches[WARPS];  // bit k of word w: position tile + 32 w + k holds the token
    int first = blockIdx.x;
    int token = inp[first];
    if (token < 0 || token >= V) return;
    if (threadIdx.x == 0) last = first;
    __syncthreads();
    bool earlier = false;
    int thread_last = first;
    for (int j = threadIdx.x; j < BT; j += BLOCK_SIZE) {
        if (inp[j] == token) {
            earlier |= j < first;
            thread_last = j;
        }
    }
    atomicMax(&last, thread_last);
    if (__syncthreads_or(earlier)) return;  // the block of the token's first position adds its rows
    float* row = dwte + (long long)token * C;
    for (int tile = first; tile <= last; tile += BLOCK_SIZE) {
        int j = tile + threadIdx.x;
        bool match = j <= last && inp[j] == token;
        unsigned bits = __ballot_sync(0xffffffffu, match);
        if (threadIdx.x % 32 == 0) tile_matches[threadIdx.x / 32] = bits;
        if (!__syncthreads_or(match)) continue;  // no position of this tile holds the token
        for (int c = threadIdx.x; c < C; c += BLOCK_SIZE) {
            float sum = row[c];
            for (int w = 0; w < WARPS; w++) {
                for (unsigned rest = tile_matches[w]; rest != 0; rest &= rest - 1) {  // its set bits, lowest first
                    sum += dout[(long long)(tile + 32 * w + __ffs(rest) - 1) * C + c];
                }
            }
            row[c] = sum;
        }
        __syncthreads();  // every thread has read tile_matches before the next tile rewrites it
    }
    // END SOLUTION
}

extern "C" __global__ void __launch_bounds__(BLOCK_SIZE) encoder_backward_wpe_kernel(
        float* dwpe, const float* dout, int B, int T, int C) {
    // BEGIN SOLUTION
    long long tc = (long long)blockIdx.x * BLOCK_SIZE + threadIdx.x;  // t * C + c
    long long TC = (long long)T * C;
    if (tc >= TC) return;
    float sum = dwpe[tc];
    for (int b = 0; b < B; b++) sum += dout[b * TC + tc];
    dwpe[tc] = sum;
    // END SOLUTION
}
"""

DEFINES = dict(BLOCK_SIZE=BLOCK_SIZE)
encoder_backward_wte_kernel = CudaKernel(ENCODER_BACKWARD_SOURCE, "encoder_backward_wte_kernel", defines=DEFINES)
encoder_backward_wpe_kernel = CudaKernel(ENCODER_BACKWARD_SOURCE, "encoder_backward_wpe_kernel", defines=DEFINES)


def encoder_backward(dwte, dwpe, dout, inp, B, T, C):
    check_dims("encoder_backward", B=B, T=T, C=C)
    check_rows("encoder_backward", "dwte", dwte, C)  # V = its rows
    max_T = check_rows("encoder_backward", "dwpe", dwpe, C)
    if T > max_T:
        raise KernelArgumentError(f"encoder_backward: T={T} exceeds the {max_T} positions dwpe holds")
    check_array("encoder_backward", "dout", dout, B * T * C)
    check_array("encoder_backward", "inp", inp, B * T, np.int32)
    launch_wte(encoder_backward_wte_kernel, dwte, dout, inp, B, T, C)
    launch_wpe(encoder_backward_wpe_kernel, dwpe, dout, B, T, C)


def launch_wte(kernel, dwte, dout, inp, B, T, C):
    """`kernel` (encoder_backward_wte_kernel, or one with its parameters): a block per position."""
    kernel((B * T,), (BLOCK_SIZE,), (dwte, dout, inp, np.int32(B * T), np.int32(C), np.int32(dwte.size // C)))


def launch_wpe(kernel, dwpe, dout, B, T, C):
    """`kernel` (encoder_backward_wpe_kernel, or one with its parameters): a thread per (t, c)."""
    kernel((ceil_div(T * C, BLOCK_SIZE),), (BLOCK_SIZE,), (dwpe, dout, np.int32(B), np.int32(T), np.int32(C)))
