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

One block per position t, for the B rows (0, t), (1, t), ... that share wpe[t], taken
POSITIONS at a time. dout is the big array; the block reads each of its rows once and
sends it both ways: into dwpe[t] (thread c sums channel c over b, in order) and into
the dwte row of its token (only a repeated token's later rows are read a second time,
by the walk below). A token's row belongs to the block of the token's first
position in the batch (b * T + t order). Before adding, the block puts its rows' tokens
in a small hash table in shared memory and looks every id of the batch up in it, once:
a hit marks the token as occurring earlier (another block adds its row) or records
where it occurs last. A token seen once, most of them, is then done by that one
addition. A repeated token's block walks on from its first position to its last,
BLOCK_SIZE positions at a time: a warp vote (__ballot_sync) marks the positions of a
tile holding the token, and each thread adds those rows of dout, in order, to its
channels of the row.

The look-ups cost T * ceil(B / POSITIONS) * B * T in all (every round of a block looks
up the whole batch), about one shared-memory read each; the ids are few
(32 KB at B*T = 8192) and are read from cache, not memory, but the count grows with
the square of the batch: a batch of far more positions would first sort its positions
by token.

A token id outside [0, V) has no row to add to and is skipped: the forward pass already
turned its output into NaN (kernels/encoder.py), which the loss shows.
"""

import numpy as np

from gpt2kit.kernel_runtime import CudaKernel, KernelArgumentError, check_array, check_dims, check_rows

BLOCK_SIZE = 128

ENCODER_BACKWARD_SOURCE = r"""
#define WARPS (BLOCK_SIZE / 32)
#define SLOT_BITS 6
#define SLOTS (1 << SLOT_BITS)  // the hash table of a block's tokens
#define POSITIONS (SLOTS / 2)   // rows a block takes at a time: the table at most half full
#define IDS_PER_LOAD 4          // ids a thread loads before looking them up: four loads in flight, not one
#define ROWS_PER_LOAD 4         // rows of dout (and of dwte) a thread loads before adding

// The slot where the search for a token starts: the top bits of a multiplicative hash.
__device__ int first_slot(int token) { return ((unsigned)token * 2654435761u) >> (32 - SLOT_BITS); }

// 12 blocks an SM (an A40's 1536 threads): a GPT-2 batch's T = 1024 blocks in one wave on 86 SMs or more
extern "C" __global__ void __launch_bounds__(BLOCK_SIZE, 12) encoder_backward_kernel(
        float* __restrict__ dwte, float* __restrict__ dwpe, const float* __restrict__ dout,
        const int* __restrict__ inp, int B, int T, int C, int V) {
    // BEGIN SOLUTION
    __shared__ int slot_token[SLOTS];         // a token of the rows, or -1: an empty slot
    __shared__ int slot_row[SLOTS];           // the first of the rows holding it
    __shared__ int slot_earlier[SLOTS];       // 1: the token occurs before that row, whose block adds it
    __shared__ int slot_last[SLOTS];          // the last position after that row holding the token, or -1
    __shared__ int row_slot[POSITIONS];       // row k's slot, -1 for an id outside [0, V)
    __shared__ int adds_to[POSITIONS];        // the dwte row row k adds to, -1 where another block adds it
    __shared__ unsigned tile_matches[WARPS];  // bit k of word w: position tile + 32 w + k holds the token
    int t = blockIdx.x;
    int BT = B * T;
    float* pe_row = dwpe + (long long)t * C;
    for (int b0 = 0; b0 < B; b0 += POSITIONS) {
        int rows = min(POSITIONS, B - b0);
        __syncthreads();  // the previous rows are done with the table
        for (int s = threadIdx.x; s < SLOTS; s += BLOCK_SIZE) {
            slot_token[s] = -1;
            slot_row[s] = POSITIONS;
            slot_earlier[s] = 0;
            slot_last[s] = -1;
        }
        __syncthreads();
        if (threadIdx.x < rows) {  // row k = threadIdx.x puts its token in the table
            int token = inp[(b0 + threadIdx.x) * T + t];
            int s = -1;
            if (token >= 0 && token < V) {
                for (s = first_slot(token);; s = (s + 1) % SLOTS) {
                    int held = atomicCAS(&slot_token[s], -1, token);
                    if (held == -1 || held == token) break;
                }
                atomicMin(&slot_row[s], threadIdx.x);  // rows sharing a token: the first one owns it
            }
            row_slot[threadIdx.x] = s;
        }
        __syncthreads();
        for (int j0 = threadIdx.x; j0 < BT; j0 += IDS_PER_LOAD * BLOCK_SIZE) {
            int ids[IDS_PER_LOAD];
            #pragma unroll
            for (int i = 0; i < IDS_PER_LOAD; i++) {
                int j = j0 + i * BLOCK_SIZE;
                ids[i] = j < BT ? inp[j] : -1;
            }
            #pragma unroll
            for (int i = 0; i < IDS_PER_LOAD; i++) {
                int j = j0 + i * BLOCK_SIZE;
                for (int s = first_slot(ids[i]); slot_token[s] != -1; s = (s + 1) % SLOTS) {
                    if (slot_token[s] != ids[i]) continue;
                    int own = (b0 + slot_row[s]) * T + t;
                    if (j < own) atomicOr(&slot_earlier[s], 1);
                    else if (j > own) atomicMax(&slot_last[s], j);
                    break;
                }
            }
        }
        __syncthreads();
        if (threadIdx.x < rows) {
            int s = row_slot[threadIdx.x];
            bool owns = s >= 0 && slot_row[s] == threadIdx.x && !slot_earlier[s];
            adds_to[threadIdx.x] = owns ? slot_token[s] : -1;
        }
        __syncthreads();
        for (int c = threadIdx.x; c < C; c += BLOCK_SIZE) {
            float pe = pe_row[c];
            for (int k0 = 0; k0 < rows; k0 += ROWS_PER_LOAD) {  // every load of a group before its stores
                float grad[ROWS_PER_LOAD], te[ROWS_PER_LOAD];
                int token[ROWS_PER_LOAD];
                #pragma unroll
                for (int i = 0; i < ROWS_PER_LOAD; i++) {
                    int k = k0 + i;
                    token[i] = k < rows ? adds_to[k] : -1;
                    grad[i] = k < rows ? dout[((long long)(b0 + k) * T + t) * C + c] : 0.0f;
                    te[i] = token[i] >= 0 ? dwte[(long long)token[i] * C + c] : 0.0f;
                }
                #pragma unroll
                for (int i = 0; i < ROWS_PER_LOAD; i++) {
                    pe += grad[i];  // 0 past the last row: pe unchanged
                    if (token[i] >= 0) dwte[(long long)token[i] * C + c] = te[i] + grad[i];
                }
            }
            pe_row[c] = pe;
        }
        for (int k = 0; k < rows; k++) {  // the repeated tokens first seen here: their later rows
            int token = adds_to[k];
            if (token < 0) continue;
            int last = slot_last[row_slot[k]];
            float* te_row = dwte + (long long)token * C;
            for (int tile = (b0 + k) * T + t + 1; tile <= last; tile += BLOCK_SIZE) {
                int j = tile + threadIdx.x;
                bool match = j <= last && inp[j] == token;
                unsigned bits = __ballot_sync(0xffffffffu, match);
                if (threadIdx.x % 32 == 0) tile_matches[threadIdx.x / 32] = bits;
                if (!__syncthreads_or(match)) continue;  // no position of this tile holds the token
                for (int c = threadIdx.x; c < C; c += BLOCK_SIZE) {
                    float sum = te_row[c];
                    for (int w = 0; w < WARPS; w++) {
                        for (unsigned rest = tile_matches[w]; rest != 0; rest &= rest - 1) {  // set bits, lowest first
                            sum += dout[(long long)(tile + 32 * w + __ffs(rest) - 1) * C + c];
                        }
                    }
                    te_row[c] = sum;
                }
                __syncthreads();  // every thread has read tile_matches before the next tile rewrites it
            }
        }
    }
    // END SOLUTION
}
"""

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
    """`kernel` (encoder_backward_kernel, or one with its parameters): a block per position t."""
    kernel((T,), (BLOCK_SIZE,), (dwte, dwpe, dout, inp, np.int32(B), np.int32(T), np.int32(C),
                                 np.int32(dwte.size // C)))
