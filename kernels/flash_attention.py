"""Flash attention: causal self-attention without the T x T matrix.

    q, k, v = inp[b, t, 0:C], inp[b, t, C:2C], inp[b, t, 2C:3C], each split into NH heads of HS = C/NH
    s[t, t2] = q[b,t,h] . k[b,t2,h] / sqrt(HS) for the keys t2 a query sees (t2 <= t)
    out[b, t, h*HS:(h+1)*HS] = sum over t2 of softmax(s[t])[t2] * v[b, t2, h]
    lse[b, h, t] = log(sum over t2 of exp(s[t, t2]))   (the softmax's log-sum-exp)

inp (B, T, 3C); out (B, T, C) and lse (B, NH, T) are written. HS at most 64.

kernels/attention.py writes every probability to memory and reads it back: at T =
1024 that is 4 MB per head, more traffic than q, k and v together. Flash attention
never stores them. It walks the keys in tiles and keeps, for each query, three things:
the largest score so far m, the sum l of exp(s - m) so far, and the output so far
o = sum of exp(s - m) * v. When a new tile raises the maximum from m to m', the old
terms were scaled by exp(-m) and must be scaled by exp(-m') instead: multiply l and
o by exp(m - m') (an "online" softmax). After the last key, out = o / l and
lse = m + log(l). Each score lives in a register for a moment and is gone.

This kernel (FlashAttention-2's loop order, on CUDA cores, in float32):
* A block takes QUERY_ROWS consecutive queries of one (b, h), a thread per query.
  The block stages its queries through shared memory (coalesced loads), and each
  thread keeps its query row, scaled, in registers.
* Then, tile by tile, the block copies KEY_TILE keys and their values into shared
  memory with cp.async, two tiles in flight: the next tile's copy runs while this
  one is used. Every thread reads the same key at the same moment: one broadcast
  per float4, and 4 multiply-adds per float4 loaded.
* Each thread goes through the tile in chunks of CHUNK keys: CHUNK dot products
  (independent, so they overlap in the pipeline), one rescale of l and o when the
  maximum grows, then CHUNK multiply-adds of v into o.
* Causality: tiles past the block's last query are never loaded, and a thread skips
  the chunks past its own query. `window` limits each query to its `window` most
  recent keys (its own included); causal attention is window = T.
* Scores are kept in base 2: q is scaled by log2(e) / sqrt(HS) once, so each
  probability is one exp2f.
* Blocks start in reverse order: the last queries see the most keys, so they go first
  and the short blocks fill in at the end.
"""

import math

import numpy as np

from kernel_runtime import CudaKernel, KernelArgumentError, ceil_div, check_array, check_dims

# Chosen by timing B8 T1024 C768 NH12 on an H200 (ms): these 0.82; 32 queries per block 0.93;
# CHUNK 16 0.96 (more registers, fewer blocks per SM), CHUNK 4 1.03; KEY_TILE 16 with 32 queries 1.20.
QUERY_ROWS = 64   # queries per block, a thread each
KEY_TILE = 32     # keys (and values) per shared-memory tile; two tiles in flight
CHUNK = 8         # keys scored together between rescales
MAX_HEAD = 64     # the largest head size: a thread keeps q and o, 2 * MAX_HEAD floats, in registers

FLASH_ATTENTION_SOURCE = r"""
#define NEG_INFINITY __int_as_float(0xff800000)
#define LN2 0.6931471805599453f
#define STAGE_STRIDE (MAX_HEAD + 1)  // a staged query row: one float more, so rows start in different banks
#define TILE_FLOATS (KEY_TILE * MAX_HEAD)
static_assert(QUERY_ROWS * STAGE_STRIDE <= 4 * TILE_FLOATS, "the staged queries must fit in the key tiles' memory");
static_assert(TILE_FLOATS % QUERY_ROWS == 0, "every thread copies the same number of a tile's floats");

// Start copying 4 bytes from global src to the shared address dst; with valid false nothing is read
// and dst gets 0. The copy runs while the thread goes on (cp.async, sm_80 and later).
__device__ __forceinline__ void copy_async(float* dst, const float* src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;"
                 :: "r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src), "r"(valid ? 4 : 0) : "memory");
}
__device__ __forceinline__ void copy_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// Wait until at most `pending` of this thread's committed groups are still in flight.
template <int pending> __device__ __forceinline__ void copy_async_wait() {
    asm volatile("cp.async.wait_group %0;" :: "n"(pending) : "memory");
}

// Start copying keys k0 .. k0 + KEY_TILE - 1 of one head (their k and v) into k_tile and v_tile,
// zeros past T and past HS. Consecutive threads copy consecutive d of a row: coalesced.
__device__ void copy_key_tile(float* k_tile, float* v_tile, const float* head, int k0, int T, int C, int HS) {
    #pragma unroll 8
    for (int i = 0; i < TILE_FLOATS / QUERY_ROWS; i++) {
        int e = threadIdx.x + QUERY_ROWS * i, r = e / MAX_HEAD, d = e % MAX_HEAD;
        bool valid = k0 + r < T && d < HS;
        const float* k = valid ? head + (long long)(k0 + r) * 3 * C + C + d : head;  // a readable address
        copy_async(k_tile + e, k, valid);
        copy_async(v_tile + e, valid ? k + C : head, valid);
    }
    copy_async_commit();
}

// grid (query tiles, B * NH), QUERY_ROWS threads
extern "C" __global__ void __launch_bounds__(QUERY_ROWS)
flash_attention_kernel(float* out, float* lse, const float* qkv, int T, int C, int NH, int window,
                       float score_scale) {
    // BEGIN SOLUTION
    __shared__ __align__(16) float tiles[2][2][TILE_FLOATS];  // [buffer][k or v]: two key tiles in flight
    float* stage = &tiles[0][0][0];  // queries on the way in, outputs on the way out (QUERY_ROWS * STAGE_STRIDE fit)

    const int row0 = (gridDim.x - 1 - blockIdx.x) * QUERY_ROWS;  // the longest rows first
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH, HS = C / NH;
    const int t = row0 + threadIdx.x;
    const bool active = t < T;
    const float* head = qkv + (long long)b * T * 3 * C + h * HS;  // q at column 0, k at C, v at 2C

    #pragma unroll 8
    for (int i = 0; i < MAX_HEAD; i++) {  // the block's queries, staged: coalesced, and all loads in flight
        int e = threadIdx.x + QUERY_ROWS * i, r = e / MAX_HEAD, d = e % MAX_HEAD;
        stage[r * STAGE_STRIDE + d] = (row0 + r < T && d < HS) ? head[(long long)(row0 + r) * 3 * C + d] : 0.0f;
    }
    __syncthreads();
    float q[MAX_HEAD];  // this query, times score_scale = log2(e) / sqrt(HS): scores come out in base 2
    #pragma unroll
    for (int d = 0; d < MAX_HEAD; d++) q[d] = stage[threadIdx.x * STAGE_STRIDE + d] * score_scale;
    __syncthreads();  // before the first key tile overwrites the stage

    float o[MAX_HEAD];
    #pragma unroll
    for (int d = 0; d < MAX_HEAD; d++) o[d] = 0.0f;
    float m = NEG_INFINITY, l = 0.0f;

    const int last_key = min(T - 1, row0 + QUERY_ROWS - 1);  // the block's last query sees no further
    const int first_tile = max(0, row0 - window + 1) / KEY_TILE;  // nor its first query any earlier
    const int tiles_seen = last_key / KEY_TILE + 1 - first_tile;
    copy_key_tile(tiles[0][0], tiles[0][1], head, first_tile * KEY_TILE, T, C, HS);
    for (int n = 0; n < tiles_seen; n++) {
        const int k0 = (first_tile + n) * KEY_TILE;
        if (n + 1 < tiles_seen) {  // the next tile's copy runs while this one is used
            copy_key_tile(tiles[(n + 1) % 2][0], tiles[(n + 1) % 2][1], head, k0 + KEY_TILE, T, C, HS);
            copy_async_wait<1>();
        } else {
            copy_async_wait<0>();
        }
        __syncthreads();  // every thread's part of this tile has landed
        const float* k_tile = tiles[n % 2][0];
        const float* v_tile = tiles[n % 2][1];
        for (int c = 0; active && c < KEY_TILE; c += CHUNK) {
            int key0 = k0 + c;
            if (key0 > t || key0 + CHUNK - 1 <= t - window) continue;  // no key of this chunk in the window
            float s[CHUNK], chunk_max = NEG_INFINITY;
            #pragma unroll
            for (int j = 0; j < CHUNK; j++) {
                const float4* key = (const float4*)(k_tile + (c + j) * MAX_HEAD);
                float dot = 0.0f;
                #pragma unroll
                for (int d = 0; d < MAX_HEAD / 4; d++) {
                    float4 kv = key[d];  // the same address in every thread: a broadcast
                    dot += q[4 * d] * kv.x + q[4 * d + 1] * kv.y + q[4 * d + 2] * kv.z + q[4 * d + 3] * kv.w;
                }
                int key_index = key0 + j;
                s[j] = (key_index <= t && key_index > t - window) ? dot : NEG_INFINITY;
                chunk_max = fmaxf(chunk_max, s[j]);
            }
            if (chunk_max > m) {  // the maximum grew: rescale what was summed against the old one
                float correction = exp2f(m - chunk_max);  // exp2(-inf) = 0 on the first chunk
                l *= correction;
                #pragma unroll
                for (int d = 0; d < MAX_HEAD; d++) o[d] *= correction;
                m = chunk_max;
            }
            #pragma unroll
            for (int j = 0; j < CHUNK; j++) {
                float p = exp2f(s[j] - m);  // 0 for keys outside the window
                l += p;
                const float4* value = (const float4*)(v_tile + (c + j) * MAX_HEAD);
                #pragma unroll
                for (int d = 0; d < MAX_HEAD / 4; d++) {
                    float4 vv = value[d];
                    o[4 * d] += p * vv.x;
                    o[4 * d + 1] += p * vv.y;
                    o[4 * d + 2] += p * vv.z;
                    o[4 * d + 3] += p * vv.w;
                }
            }
        }
        __syncthreads();  // before the copy after next overwrites this buffer
    }

    // out through the stage, so that the stores are coalesced like the loads
    float inverse_l = 1.0f / l;
    #pragma unroll
    for (int d = 0; d < MAX_HEAD; d++) stage[threadIdx.x * STAGE_STRIDE + d] = o[d] * inverse_l;
    if (active) lse[(long long)bh * T + t] = (m + log2f(l)) * LN2;
    __syncthreads();
    for (int e = threadIdx.x; e < QUERY_ROWS * MAX_HEAD; e += QUERY_ROWS) {
        int r = e / MAX_HEAD, d = e % MAX_HEAD;
        if (row0 + r < T && d < HS) out[((long long)b * T + row0 + r) * C + h * HS + d] = stage[r * STAGE_STRIDE + d];
    }
    // END SOLUTION
}
"""

flash_attention_kernel = CudaKernel(FLASH_ATTENTION_SOURCE, "flash_attention_kernel",
                                    defines=dict(QUERY_ROWS=QUERY_ROWS, KEY_TILE=KEY_TILE, CHUNK=CHUNK,
                                                 MAX_HEAD=MAX_HEAD))


def flash_attention_forward(out, lse, inp, B, T, C, NH):
    """Causal multi-head attention of packed q|k|v; lse (B, NH, T) gets each softmax's log-sum-exp."""
    windowed_attention("flash_attention_forward", out, lse, inp, B, T, C, NH, window=T)


def windowed_attention(function, out, lse, inp, B, T, C, NH, window):
    """Attention of each query to its `window` most recent keys, itself included."""
    check_dims(function, B=B, T=T, C=C, NH=NH)
    if C % NH:
        raise KernelArgumentError(f"{function}: C={C} is not a multiple of NH={NH}")
    if C // NH > MAX_HEAD:
        raise KernelArgumentError(f"{function}: head size C/NH = {C // NH} exceeds this kernel's {MAX_HEAD}")
    check_array(function, "out", out, B * T * C)
    check_array(function, "lse", lse, B * NH * T)
    check_array(function, "inp", inp, B * T * 3 * C)
    score_scale = math.log2(math.e) / math.sqrt(C // NH)
    flash_attention_kernel((ceil_div(T, QUERY_ROWS), B * NH), (QUERY_ROWS,),
                           (out, lse, inp, np.int32(T), np.int32(C), np.int32(NH), np.int32(window),
                            np.float32(score_scale)))
