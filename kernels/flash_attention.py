"""Flash attention: causal (and local) self-attention without the T x T matrix.

    q, k, v = inp[b, t, 0:C], inp[b, t, C:2C], inp[b, t, 2C:3C], each split into NH heads of HS = C/NH
    s[t, t2] = q[b,t,h] . k[b,t2,h] / sqrt(HS) for the keys t2 a query sees (t2 <= t)
    out[b, t, h*HS:(h+1)*HS] = sum over t2 of softmax(s[t])[t2] * v[b, t2, h]
    lse[b, h, t] = log(sum over t2 of exp(s[t, t2]))   (the softmax's log-sum-exp)

inp (B, T, 3C); out (B, T, C) and lse (B, NH, T) are written. HS at most 256.
local_attention_forward(out, lse, inp, B, T, C, NH, W) is the same with a window:
query t sees only keys t - W + 1 .. t (W >= T: causal attention).

kernels/attention.py writes every probability to memory and reads it back: at T =
1024 that is 4 MB per head, more traffic than q, k and v together. Flash attention
never stores them. It walks the keys in tiles and keeps, for each query, three things:
the largest score so far m, the sum l of exp(s - m) so far, and the output so far
o = sum of exp(s - m) * v. When a new tile raises the maximum from m to m', the old
terms were scaled by exp(-m) and must be scaled by exp(-m') instead: multiply l and
o by exp(m - m') (an "online" softmax). After the last key, out = o / l and
lse = m + log(l). Each score lives in a register for a moment and is gone.

This kernel (FlashAttention-2's loop order, on CUDA cores, in float32):
* A block takes QUERY_ROWS = 32 consecutive queries of one (b, h); its 128 threads
  form 8 x 16. The queries, scaled, wait in shared memory for the whole block.
* A head is handled in chunks of CHUNK = 64 dims (GPT-2: one; GPT-J's 256: four),
  each program compiled for its number of chunks. With more than one, the scores
  add up chunk by chunk (queries and keys loaded a chunk at a time), and the output
  is kept in registers for every chunk: 48 KB of shared memory holds one chunk of
  queries, keys and values, not four.
* Tile by tile, the block computes the tile's scores S = Q K^T for KEY_TILE = 64
  keys as a small matmul: each thread a 4 x 4 part of S (its 4 queries, keys
  tx + 16 j), from float4 loads, 16 multiply-adds per two loads.
* The online softmax of each query's row: the 16 threads holding the row find the
  tile's maximum with shuffles, rescale their part of l and o if it grew, and turn
  their scores into p = exp2(s - m). Each thread keeps its own part of l; the parts
  are added once, at the end.
* P goes to shared memory, over the keys (done with by then), and O += P V is the
  second small matmul: each thread a 4 x 4 part of O (its 4 queries, 4 consecutive
  head dims).
* Keys and values arrive by cp.async; other blocks on the multiprocessor compute
  while one waits for its tile. (Copying the next tile while this one is used needs
  more than the 48 KB of shared memory a block may have without asking.)
* Causality: tiles past the block's last query are never loaded, and a score past
  its query is -inf. `window` limits each query to its `window` most recent keys
  (its own included); causal attention is window = T.
* Scores are kept in base 2: q is scaled by log2(e) / sqrt(HS) once, so each
  probability is one exp2f.
* Blocks start in reverse order: the last queries see the most keys, so they go first
  and the short blocks fill in at the end.
"""

import math

import numpy as np

from gpt2kit.kernel_runtime import CudaKernel, KernelArgumentError, ceil_div, check_array, check_dims

QUERY_ROWS = 32   # queries per block
KEY_TILE = 64     # keys (and values) per shared-memory tile
CHUNK = 64        # head dims per shared-memory tile (a head is padded with zeros to whole chunks)
HEAD_CHUNKS = (1, 2, 4)  # the kernels compiled: head sizes up to 64, 128 and 256
THREADS = 128     # 8 x 16: each thread 4 queries x (4 keys, then 4 head dims)

FLASH_ATTENTION_SOURCE = r"""
#define NEG_INFINITY __int_as_float(0xff800000)
#define LN2 0.6931471805599453f
#define ROW (CHUNK + 4)  // a shared row of q or k: 4 floats more, so the rows a warp reads start in different banks
static_assert(THREADS == 128 && QUERY_ROWS == 8 * 4 && KEY_TILE == 16 * 4 && CHUNK == 16 * 4,
              "each of the 8 x 16 threads owns 4 x 4 of S and of each chunk of O");

// Start copying 16 (or 4) bytes from global src to the shared address dst; with valid false nothing is
// read and dst gets zeros. The copy runs while the thread goes on (cp.async, sm_80 and later).
__device__ __forceinline__ void copy_async16(float* dst, const float* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                 :: "r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void copy_async4(float* dst, const float* src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;"
                 :: "r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src), "r"(valid ? 4 : 0) : "memory");
}
__device__ __forceinline__ void copy_async_wait_all() {
    asm volatile("cp.async.commit_group;\n\tcp.async.wait_group 0;" ::: "memory");
}

// Start copying head dims d0 .. d0 + CHUNK - 1 of rows k0 .. k0 + KEY_TILE - 1 of one head's keys (column C)
// or values (2C) into shared memory, zeros past T and HS; with `values` given too, the same rows of the
// values into it in the same loop. Consecutive threads copy consecutive columns of a row: coalesced. With
// `vectors` (HS a multiple of 4, qkv 16-byte aligned) each copy moves a float4.
template <int STRIDE>
__device__ void copy_tile(float (*tile)[STRIDE], const float* column, int k0, int d0, int T, int C, int HS,
                          bool vectors, float (*values)[CHUNK] = nullptr) {
    const int width = vectors ? 4 : 1;
    for (int e = threadIdx.x; e < KEY_TILE * CHUNK / width; e += THREADS) {
        int r = e / (CHUNK / width), d = e % (CHUNK / width) * width;
        bool valid = k0 + r < T && d0 + d < HS;
        const float* src = valid ? column + (long long)(k0 + r) * 3 * C + d0 + d : column;  // a readable address
        if (vectors) copy_async16(&tile[r][d], src, valid);
        else copy_async4(&tile[r][d], src, valid);
        if (values == nullptr) continue;
        if (vectors) copy_async16(&values[r][d], valid ? src + C : column, valid);
        else copy_async4(&values[r][d], valid ? src + C : column, valid);
    }
}

// Queries row0 .. row0 + QUERY_ROWS - 1, head dims d0 .. d0 + CHUNK - 1, times score_scale, into shared memory.
__device__ void load_queries(float (*q_tile)[ROW], const float* head, int row0, int d0, int T, int C, int HS,
                             float score_scale) {
    for (int e = threadIdx.x; e < QUERY_ROWS * CHUNK; e += THREADS) {
        int r = e / CHUNK, d = e % CHUNK;  // consecutive threads, consecutive d: coalesced
        q_tile[r][d] = (row0 + r < T && d0 + d < HS) ? head[(long long)(row0 + r) * 3 * C + d0 + d] * score_scale
                                                     : 0.0f;
    }
}

// The largest of `value`, and the sum, over the 16 threads of a half-warp (those holding one row of S).
__device__ __forceinline__ float row_max(float value) {
    for (int offset = 8; offset > 0; offset /= 2) value = fmaxf(value, __shfl_xor_sync(0xffffffff, value, offset));
    return value;
}
__device__ __forceinline__ float row_sum(float value) {
    for (int offset = 8; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffff, value, offset);
    return value;
}

// grid (query tiles, B * NH), THREADS threads; head size up to CHUNKS * CHUNK
extern "C" __global__ void __launch_bounds__(THREADS)
flash_attention_kernel(float* out, float* lse, const float* qkv, int T, int C, int NH, int window,
                       float score_scale, int vectors) {
    // BEGIN SOLUTION
    __shared__ __align__(16) float q_tile[QUERY_ROWS][ROW];
    __shared__ __align__(16) float k_or_p[KEY_TILE][ROW];  // the keys, then (QUERY_ROWS x KEY_TILE) the tile's P
    __shared__ __align__(16) float v_tile[KEY_TILE][CHUNK];

    const int row0 = (gridDim.x - 1 - blockIdx.x) * QUERY_ROWS;  // the longest rows first
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH, HS = C / NH;
    const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
    const float* head = qkv + (long long)b * T * 3 * C + h * HS;  // q at column 0, k at C, v at 2C

    if (CHUNKS == 1) load_queries(q_tile, head, row0, 0, T, C, HS, score_scale);  // kept for every tile

    float o[CHUNKS][4][4] = {}, m[4], l[4] = {};  // queries ty*4 + i: o over dims c*CHUNK + tx*4 + j; l its keys' part
    #pragma unroll
    for (int i = 0; i < 4; i++) m[i] = NEG_INFINITY;

    const int last_key = min(T - 1, row0 + QUERY_ROWS - 1);       // the block's last query sees no further
    const int first_key = max(0, row0 - window + 1);              // its first query sees no earlier
    for (int k0 = first_key / KEY_TILE * KEY_TILE; k0 <= last_key; k0 += KEY_TILE) {
        float s[4][4] = {};  // s[i][j]: query ty*4 + i, key k0 + tx + 16 j, summed over the head's chunks
        #pragma unroll 1
        for (int c = 0; c < CHUNKS; c++) {
            if (CHUNKS > 1) load_queries(q_tile, head, row0, c * CHUNK, T, C, HS, score_scale);
            // one chunk: the values come in the same loop as the keys, in flight together
            copy_tile(k_or_p, head + C, k0, c * CHUNK, T, C, HS, vectors, CHUNKS == 1 ? v_tile : nullptr);
            copy_async_wait_all();
            __syncthreads();  // the keys (and the queries) are in shared memory
            #pragma unroll 2
            for (int d = 0; d < CHUNK; d += 4) {
                float4 q4[4], k4[4];
                #pragma unroll
                for (int i = 0; i < 4; i++) q4[i] = *(const float4*)&q_tile[ty * 4 + i][d];
                #pragma unroll
                for (int j = 0; j < 4; j++) k4[j] = *(const float4*)&k_or_p[tx + 16 * j][d];
                #pragma unroll
                for (int i = 0; i < 4; i++) {
                    #pragma unroll
                    for (int j = 0; j < 4; j++) {
                        s[i][j] += q4[i].x * k4[j].x + q4[i].y * k4[j].y + q4[i].z * k4[j].z + q4[i].w * k4[j].w;
                    }
                }
            }
            __syncthreads();  // every thread is done with this chunk of keys (and of queries)
        }

        float p[4][4];
        #pragma unroll
        for (int i = 0; i < 4; i++) {
            const int t = row0 + ty * 4 + i;
            float tile_max = NEG_INFINITY;
            #pragma unroll
            for (int j = 0; j < 4; j++) {
                int key = k0 + tx + 16 * j;
                if (key > t || key <= t - window || key >= T) s[i][j] = NEG_INFINITY;  // not seen by this query
                tile_max = fmaxf(tile_max, s[i][j]);
            }
            float new_max = fmaxf(m[i], row_max(tile_max));
            // a row that has seen no key yet keeps everything at 0 (and no -inf - -inf = NaN)
            float base = new_max == NEG_INFINITY ? 0.0f : new_max;
            float correction = exp2f(m[i] - base);  // the old terms' rescale: 0 the first time
            m[i] = new_max;
            l[i] *= correction;
            #pragma unroll
            for (int j = 0; j < 4; j++) {
                #pragma unroll
                for (int c = 0; c < CHUNKS; c++) o[c][i][j] *= correction;
                p[i][j] = exp2f(s[i][j] - base);
                l[i] += p[i][j];
            }
        }
        #pragma unroll
        for (int i = 0; i < 4; i++) {  // P takes the keys' place (the syncthreads above: they are done with)
            #pragma unroll
            for (int j = 0; j < 4; j++) k_or_p[ty * 4 + i][tx + 16 * j] = p[i][j];
        }

        #pragma unroll
        for (int c = 0; c < CHUNKS; c++) {
            if (CHUNKS > 1) {
                copy_tile(v_tile, head + 2 * C, k0, c * CHUNK, T, C, HS, vectors);
                copy_async_wait_all();
            }
            __syncthreads();  // P, and this chunk of the values, are in shared memory
            #pragma unroll 2
            for (int kk = 0; kk < KEY_TILE; kk += 4) {  // o[c][i][j] += P[ty*4 + i][kk..kk+3] . V[kk..kk+3][tx*4 + j]
                float4 p4[4], v4[4];
                #pragma unroll
                for (int i = 0; i < 4; i++) p4[i] = *(const float4*)&k_or_p[ty * 4 + i][kk];
                #pragma unroll
                for (int r = 0; r < 4; r++) v4[r] = *(const float4*)&v_tile[kk + r][tx * 4];
                #pragma unroll
                for (int i = 0; i < 4; i++) {
                    o[c][i][0] += p4[i].x * v4[0].x + p4[i].y * v4[1].x + p4[i].z * v4[2].x + p4[i].w * v4[3].x;
                    o[c][i][1] += p4[i].x * v4[0].y + p4[i].y * v4[1].y + p4[i].z * v4[2].y + p4[i].w * v4[3].y;
                    o[c][i][2] += p4[i].x * v4[0].z + p4[i].y * v4[1].z + p4[i].z * v4[2].z + p4[i].w * v4[3].z;
                    o[c][i][3] += p4[i].x * v4[0].w + p4[i].y * v4[1].w + p4[i].z * v4[2].w + p4[i].w * v4[3].w;
                }
            }
            __syncthreads();  // before the next chunk (or tile) overwrites the values (or P)
        }
    }

    #pragma unroll
    for (int i = 0; i < 4; i++) {
        const int t = row0 + ty * 4 + i;
        float total = row_sum(l[i]);
        if (t >= T) continue;
        #pragma unroll
        for (int c = 0; c < CHUNKS; c++) {
            #pragma unroll
            for (int j = 0; j < 4; j++) {
                int d = c * CHUNK + tx * 4 + j;
                if (d < HS) out[((long long)b * T + t) * C + h * HS + d] = o[c][i][j] / total;
            }
        }
        if (tx == 0) lse[(long long)bh * T + t] = (m[i] + log2f(total)) * LN2;
    }
    // END SOLUTION
}
"""

def compile_for_head_sizes(source: str) -> dict:
    """A program of `source` for each head-size class: CHUNKS chunks of CHUNK head dims (GPT-2's 64: one;
    GPT-J's 256: four), so that o stays in registers of a size known when compiling."""
    return {chunks: CudaKernel(source, "flash_attention_kernel",
                               defines=dict(QUERY_ROWS=QUERY_ROWS, KEY_TILE=KEY_TILE, CHUNK=CHUNK, CHUNKS=chunks,
                                            THREADS=THREADS))
            for chunks in HEAD_CHUNKS}


flash_attention_kernels = compile_for_head_sizes(FLASH_ATTENTION_SOURCE)


def flash_attention_forward(out, lse, inp, B, T, C, NH):
    """Causal multi-head attention of packed q|k|v; lse (B, NH, T) gets each softmax's log-sum-exp."""
    windowed_attention("flash_attention_forward", out, lse, inp, B, T, C, NH, window=T)


def local_attention_forward(out, lse, inp, B, T, C, NH, W):
    """Each query attends to its W most recent keys, itself included (W >= T: causal attention)."""
    windowed_attention("local_attention_forward", out, lse, inp, B, T, C, NH, window=W)


def windowed_attention(function, out, lse, inp, B, T, C, NH, window):
    """Attention of each query to its `window` most recent keys, itself included."""
    check_attention_arguments(function, out, lse, inp, B, T, C, NH, window)
    chunks = next((n for n in HEAD_CHUNKS if C // NH <= n * CHUNK), None)
    if chunks is None:
        raise KernelArgumentError(f"{function}: head size C/NH = {C // NH} exceeds this kernel's "
                                  f"{HEAD_CHUNKS[-1] * CHUNK}")
    score_scale = math.log2(math.e) / math.sqrt(C // NH)
    vectors = (C // NH) % 4 == 0 and inp.data.ptr % 16 == 0  # keys and values copied as float4s
    flash_attention_kernels[chunks]((ceil_div(T, QUERY_ROWS), B * NH), (THREADS,),
                           (out, lse, inp, np.int32(T), np.int32(C), np.int32(NH), np.int32(min(window, T)),
                            np.float32(score_scale), np.int32(vectors)))


def check_attention_arguments(function, out, lse, inp, B, T, C, NH, window):
    """One clear error line for sizes, or arrays, that do not fit flash attention's contract."""
    check_dims(function, B=B, T=T, C=C, NH=NH, W=window)
    if C % NH:
        raise KernelArgumentError(f"{function}: C={C} is not a multiple of NH={NH}")
    check_array(function, "out", out, B * T * C)
    check_array(function, "lse", lse, B * NH * T)
    check_array(function, "inp", inp, B * T * 3 * C)
