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
block only, in a fixed order, with no atomics on floats.

A token's row belongs to the block of the token's first position in the batch (b * T + t
order). Two launches:

1. token_positions_kernel, a thread per position: each token's first and last position,
   by atomicMin and atomicMax on integers (whichever thread comes first, the result is the
   same), into a scratch of two ints per token of the vocabulary;
2. encoder_backward_kernel, one block per position t, for the B rows (0, t), (1, t), ...
   that share wpe[t]. dout is the big array; the block reads each of its rows once and
   sends it both ways: into dwpe[t] (a thread sums its channels over b, in order) and into
   the dwte row of its token, where the row is the token's first position. A thread takes
   a float4 of channels (when C % 4 == 0) and has ROWS_PER_LOAD rows of dout and of dwte on
   their way at once: the kernel streams, and waits on nothing but its loads.
   A repeated token's block then walks on from its first position to its last,
   WALK_ROUNDS * BLOCK_SIZE positions at a time: each thread looks at WALK_ROUNDS ids at
   once, warp votes (__ballot_sync) and their counts list the tile's positions holding
   the token in order, and the block adds those rows of dout to the row as it added its
   own, many rows on their way at once. A token seen once, most of them, needs no walk.

A token id outside [0, V) has no row to add to and is skipped: the forward pass already
turned its output into NaN (kernels/encoder.py), which the loss shows.
"""

import numpy as np

from gpt2kit.kernel_runtime import CudaKernel, KernelArgumentError, ceil_div, check_array, check_dims, check_rows

BLOCK_SIZE = 128
POSITIONS_THREADS = 256

ENCODER_BACKWARD_SOURCE = r"""
#define WARPS (BLOCK_SIZE / 32)
#define ROWS_AT_ONCE 32     // rows (b, t) a block takes at a time
#define ROWS_PER_LOAD 2     // rows of dout (and of dwte) a thread loads before adding, a float4 of each
#define MIN_BLOCKS 12       // the launch bounds' blocks an SM, which caps the registers those loads take
#define WALK_ROUNDS 8       // a walk's tile: WALK_ROUNDS ids a thread, looked at together

// each valid token's first and last position in the batch; first starts at B * T, last at -1
extern "C" __global__ void token_positions_kernel(int* __restrict__ first, int* __restrict__ last,
                                                  const int* __restrict__ inp, int BT, int V) {
    // BEGIN SOLUTION
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= BT) return;
    const int token = inp[j];
    if (token >= 0 && token < V) {
        atomicMin(first + token, j);
        atomicMax(last + token, j);
    }
    // END SOLUTION
}

// BEGIN SOLUTION
__device__ __forceinline__ float4& operator+=(float4& a, float4 b) {
    a.x += b.x; a.y += b.y; a.z += b.z; a.w += b.w;
    return a;
}
__device__ __forceinline__ float4 operator+(float4 a, float4 b) { return a += b; }
template <typename Vector> __device__ __forceinline__ Vector zero();
template <> __device__ __forceinline__ float zero<float>() { return 0.0f; }
template <> __device__ __forceinline__ float4 zero<float4>() { return make_float4(0.0f, 0.0f, 0.0f, 0.0f); }

// The block's rows b0 .. b0 + rows - 1 at position t into dwpe[t] and into the dwte rows in adds_to (-1: none),
// `Vector`s of channels a thread: every load of a group of rows before its stores.
template <typename Vector>
__device__ __forceinline__ void add_rows(float* dwte, float* pe_row, const float* dout, const int* adds_to,
                                         int b0, int rows, int t, int T, int C) {
    constexpr int width = sizeof(Vector) / sizeof(float);
    for (int c = width * threadIdx.x; c < C; c += width * BLOCK_SIZE) {
        Vector pe = *(const Vector*)(pe_row + c);
        for (int k0 = 0; k0 < rows; k0 += ROWS_PER_LOAD) {
            Vector grad[ROWS_PER_LOAD], te[ROWS_PER_LOAD];
            int token[ROWS_PER_LOAD];
            #pragma unroll
            for (int i = 0; i < ROWS_PER_LOAD; i++) {
                int k = k0 + i;
                token[i] = k < rows ? adds_to[k] : -1;
                grad[i] = k < rows ? *(const Vector*)(dout + ((long long)(b0 + k) * T + t) * C + c) : zero<Vector>();
                te[i] = token[i] >= 0 ? *(const Vector*)(dwte + (long long)token[i] * C + c) : zero<Vector>();
            }
            #pragma unroll
            for (int i = 0; i < ROWS_PER_LOAD; i++) {
                pe += grad[i];  // 0 past the last row: pe unchanged
                if (token[i] >= 0) *(Vector*)(dwte + (long long)token[i] * C + c) = te[i] + grad[i];
            }
        }
        *(Vector*)(pe_row + c) = pe;
    }
}

// te_row += the dout rows at positions[0 .. count - 1], in that order, `Vector`s of channels a thread,
// ROWS_PER_LOAD rows on their way at once
template <typename Vector>
__device__ __forceinline__ void add_listed_rows(float* te_row, const float* dout, const int* positions, int count,
                                                int C) {
    constexpr int width = sizeof(Vector) / sizeof(float);
    for (int c = width * threadIdx.x; c < C; c += width * BLOCK_SIZE) {
        Vector sum = *(const Vector*)(te_row + c);
        for (int k0 = 0; k0 < count; k0 += ROWS_PER_LOAD) {
            Vector grad[ROWS_PER_LOAD];
            #pragma unroll
            for (int i = 0; i < ROWS_PER_LOAD; i++) {
                grad[i] = k0 + i < count ? *(const Vector*)(dout + (long long)positions[k0 + i] * C + c) : zero<Vector>();
            }
            #pragma unroll
            for (int i = 0; i < ROWS_PER_LOAD; i++) {
                if (k0 + i < count) sum += grad[i];
            }
        }
        *(Vector*)(te_row + c) = sum;
    }
}
// END SOLUTION

// 12 blocks an SM (an A40's 1536 threads) put a GPT-2 batch's T = 1024 blocks in one wave on 86 SMs or more
extern "C" __global__ void __launch_bounds__(BLOCK_SIZE, MIN_BLOCKS) encoder_backward_kernel(
        float* __restrict__ dwte, float* __restrict__ dwpe, const float* __restrict__ dout,
        const int* __restrict__ inp, const int* __restrict__ first, const int* __restrict__ last,
        int B, int T, int C, int V) {
    // BEGIN SOLUTION
    __shared__ int adds_to[ROWS_AT_ONCE];     // the dwte row row k adds to, -1 where another block adds it
    __shared__ int walks_to[ROWS_AT_ONCE];    // the last position holding that token, where it repeats; else -1
    __shared__ int round_counts[WALK_ROUNDS * WARPS];    // a walk's tile: the matches of each round and warp
    __shared__ int walk_rows[WALK_ROUNDS * BLOCK_SIZE];  // its positions holding the token, in order
    const int t = blockIdx.x;
    float* pe_row = dwpe + (long long)t * C;
    const bool vector = C % 4 == 0 && ((size_t)dwte | (size_t)dwpe | (size_t)dout) % 16 == 0;
    for (int b0 = 0; b0 < B; b0 += ROWS_AT_ONCE) {
        const int rows = min(ROWS_AT_ONCE, B - b0);
        __syncthreads();  // the previous rows' walks are done with adds_to
        if (threadIdx.x < rows) {
            const int j = (b0 + threadIdx.x) * T + t, token = inp[j];
            const bool owns = token >= 0 && token < V && first[token] == j;
            adds_to[threadIdx.x] = owns ? token : -1;
            walks_to[threadIdx.x] = owns && last[token] > j ? last[token] : -1;
        }
        __syncthreads();
        if (vector) add_rows<float4>(dwte, pe_row, dout, adds_to, b0, rows, t, T, C);
        else add_rows<float>(dwte, pe_row, dout, adds_to, b0, rows, t, T, C);
        for (int k = 0; k < rows; k++) {  // the repeated tokens first seen here: their later rows
            const int token = adds_to[k], last_position = walks_to[k];
            if (last_position < 0) continue;
            float* te_row = dwte + (long long)token * C;
            __syncthreads();  // the row's first addition (by other threads' channels) is written
            const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
            for (int tile = (b0 + k) * T + t + 1; tile <= last_position; tile += WALK_ROUNDS * BLOCK_SIZE) {
                // position tile + r * BLOCK_SIZE + threadIdx.x for each round r: its id, all loads in flight
                bool match[WALK_ROUNDS];
                #pragma unroll
                for (int r = 0; r < WALK_ROUNDS; r++) {
                    const int j = tile + r * BLOCK_SIZE + threadIdx.x;
                    match[r] = j <= last_position && inp[j] == token;
                }
                unsigned bits[WALK_ROUNDS];
                #pragma unroll
                for (int r = 0; r < WALK_ROUNDS; r++) {
                    bits[r] = __ballot_sync(0xffffffffu, match[r]);
                    if (lane == 0) round_counts[r * WARPS + warp] = __popc(bits[r]);
                }
                __syncthreads();
                // the matching positions listed in order: (round, warp, lane) is position order
                int listed = 0;
                #pragma unroll
                for (int e = 0; e < WALK_ROUNDS * WARPS; e++) {
                    if (e % WARPS == warp && match[e / WARPS]) {
                        walk_rows[listed + __popc(bits[e / WARPS] & ((1u << lane) - 1))] =
                            tile + e / WARPS * BLOCK_SIZE + threadIdx.x;
                    }
                    listed += round_counts[e];
                }
                __syncthreads();
                if (vector) add_listed_rows<float4>(te_row, dout, walk_rows, listed, C);
                else add_listed_rows<float>(te_row, dout, walk_rows, listed, C);
                __syncthreads();  // walk_rows and round_counts are rewritten by the next tile
            }
        }
    }
    // END SOLUTION
}
"""

token_positions_kernel = CudaKernel(ENCODER_BACKWARD_SOURCE, "token_positions_kernel",
                                    defines=dict(BLOCK_SIZE=BLOCK_SIZE))
encoder_backward_kernel = CudaKernel(ENCODER_BACKWARD_SOURCE, "encoder_backward_kernel",
                                     defines=dict(BLOCK_SIZE=BLOCK_SIZE))


def encoder_backward(dwte, dwpe, dout, inp, B, T, C):
    check_dims("encoder_backward", B=B, T=T, C=C)
    check_rows("encoder_backward", "dwte", dwte, C)  # V = its rows
    max_T = check_rows("encoder_backward", "dwpe", dwpe, C)
    if T > max_T:
        raise KernelArgumentError(f"encoder_backward: T={T} exceeds the {max_T} positions dwpe holds")
    check_array("encoder_backward", "dout", dout, B * T * C)
    check_array("encoder_backward", "inp", inp, B * T, np.int32)
    launch(encoder_backward_kernel, dwte, dwpe, dout, inp, B, T, C)


def launch(kernel, dwte, dwpe, dout, inp, B, T, C):
    """`kernel` (encoder_backward_kernel, or one with its parameters): a block per position t, after
    token_positions_kernel has found each token's first and last position (a scratch of 2 V ints from CuPy's
    memory pool: a captured graph's own)."""
    import cupy

    V = dwte.size // C
    positions = cupy.empty((2, V), np.int32)
    first, last = positions
    first.fill(B * T)
    last.fill(-1)
    token_positions_kernel((ceil_div(B * T, POSITIONS_THREADS),), (POSITIONS_THREADS,),
                           (first, last, inp, np.int32(B * T), np.int32(V)))
    kernel((T,), (BLOCK_SIZE,), (dwte, dwpe, dout, inp, first, last, np.int32(B), np.int32(T), np.int32(C),
                                 np.int32(V)))
