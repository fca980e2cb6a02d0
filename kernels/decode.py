"""Kernels for generating one token at a time against a KV cache.

After the prompt has been processed once (the prefill), each new token only needs
its own query against the keys and values of every earlier token. Those are kept,
per layer, in a cache of shape (B, NH, max_T, HS), filled as tokens arrive.

Every kernel here waits for the previous kernel first thing, so that on sm_90 and later
its launch overlaps the end of the kernel before it (gpt2kit/kernel_runtime/overlap.py).

Positions and cache lengths are read from device memory (`lengths`, int32 (B,)),
never passed as launch arguments. The launches of a decode step are therefore the
same at every step, and the step can be captured once as a CUDA graph and replayed
for every length.

* encoder_at_positions_forward(out, inp, positions, wte, wpe, B, T, C):
      out[b, t] = wte[inp[b, t]] + wpe[positions[b] + t]
* kv_cache_append_forward(k_cache, v_cache, qkv, lengths, B, T, C, NH, max_T):
      k_cache[b, h, (lengths[b] + t) % max_T] = k of qkv[b, t] for head h (v likewise)
* decode_attention_forward(out, qkv, k_cache, v_cache, lengths, B, C, NH, max_T):
      the row's key and value (qkv is (B, 1, 3C)) go to cache slot lengths[b] % max_T,
      as kv_cache_append_forward puts them, then its query attends to cache slots
      0..min(lengths[b], max_T - 1), its own key among them; out (B, 1, C).

A model's cache has a slot per position (max_T = its context), and lengths[b] + t
never reaches max_T. A local model's cache (attention over a window of W) has W
slots, used as a ring: token p lives in slot p % W, so the cache holds exactly the
keys of the newest window; when more than W tokens arrive at once, only the last W
are kept.

A decode step's attention appends its own key and value: kv_cache_append_forward is
for the prompt's tokens (T of them at once), and a decode step saves its launch, one
kernel a layer: 12 of the 135 calls of GPT-2 124M's step (of 74 on the fused matmuls),
a microsecond or two each.

decode_attention is one block per (b, h). It first copies its head's key and value of
the new token into their slot, and reads them back from there after a barrier (a
block's writes to global memory are visible to its own threads past __syncthreads).
Its time is memory latency: one token's scores and output are a few thousand flops,
over keys and values spread through the cache. So the block is as large as still
leaves every block resident at once (1,024 threads for a batch of a few rows), and its
threads put every load in flight together: a few threads per key compute its score,
each a slice of the row, meeting by shuffles; the scores wait in shared memory for the
block's max and sum; then the threads split the value rows into groups of keys, each
thread one float4 of the head, and the groups' partial sums meet pairwise in shared
memory.
"""

import math

import numpy as np

from gpt2kit.kernel_runtime import (CudaKernel, KernelArgumentError, ceil_div, check_array, check_dims, check_rows,
                                    multiprocessor_count, power_of_two_at_least)

MAX_THREADS = 1024  # per decode_attention block

DECODE_SOURCE = r"""
#define NAN_FLOAT __int_as_float(0x7fffffff)

extern "C" __global__ void encoder_at_positions_kernel(float* out, const int* inp, const int* positions,
                                                       const float* wte, const float* wpe,
                                                       int T, int C, int V, int max_T) {
    let_next_kernel_start();
    wait_for_previous_kernel();  // on sm_90, the block may have started before the previous kernel finished
    // BEGIN SOLUTION
    int bt = blockIdx.x, b = bt / T, t = bt % T;
    int token = inp[bt], position = positions[b] + t;
    float* y = out + (long long)bt * C;
    bool valid = token >= 0 && token < V && position >= 0 && position < max_T;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        y[c] = valid ? wte[(long long)token * C + c] + wpe[(long long)position * C + c] : NAN_FLOAT;
    }
    // END SOLUTION
}

// grid (B * T, NH), threads over the head's HS values
extern "C" __global__ void kv_cache_append_kernel(float* k_cache, float* v_cache, const float* qkv,
                                                  const int* lengths, int T, int C, int NH, int max_T) {
    let_next_kernel_start();
    wait_for_previous_kernel();
    // BEGIN SOLUTION
    int bt = blockIdx.x, b = bt / T, t = bt % T, h = blockIdx.y, HS = C / NH;
    if (t < T - max_T) return;  // a ring of max_T slots keeps only the last max_T new tokens
    int slot = (lengths[b] + t) % max_T;
    const float* k = qkv + (long long)bt * 3 * C + C + h * HS;
    long long row = (((long long)b * NH + h) * max_T + slot) * HS;
    for (int d = threadIdx.x; d < HS; d += blockDim.x) {
        k_cache[row + d] = k[d];
        v_cache[row + d] = k[C + d];
    }
    // END SOLUTION
}

// The block's max (is_max) or sum of `value`, returned to every thread; reduce: blockDim.x / 32 floats of
// shared memory.
__device__ float block_reduce(float value, bool is_max, float* reduce) {
    // BEGIN SOLUTION
    for (int offset = 16; offset > 0; offset /= 2) {
        float other = __shfl_xor_sync(0xffffffff, value, offset);
        value = is_max ? fmaxf(value, other) : value + other;
    }
    if (threadIdx.x % 32 == 0) reduce[threadIdx.x / 32] = value;
    __syncthreads();
    value = reduce[0];
    for (int w = 1; w < blockDim.x / 32; w++) value = is_max ? fmaxf(value, reduce[w]) : value + reduce[w];
    __syncthreads();  // reduce is reused by the next call
    // END SOLUTION
    return value;
}

// grid (B, NH), a multiple of 32 threads up to MAX_THREADS; dynamic shared memory: groups * HS partial sums,
// then max_T scores. vector: the cache rows and q start 16-byte aligned and HS % 4 == 0 (float4 loads).
// key_threads (a power of two up to 32) share a key's score; groups (a power of two) split the value rows.
extern "C" __global__ void __launch_bounds__(MAX_THREADS)
decode_attention_kernel(float* out, const float* qkv, float* k_cache, float* v_cache, const int* lengths,
                        int C, int NH, int max_T, float scale, int vector, int key_threads, int groups) {
    let_next_kernel_start();
    wait_for_previous_kernel();
    // BEGIN SOLUTION
    int b = blockIdx.x, h = blockIdx.y, HS = C / NH;
    long long slot = (((long long)b * NH + h) * max_T + lengths[b] % max_T) * HS;  // the new token's
    const float* k_new = qkv + (long long)b * 3 * C + C + h * HS;
    for (int d = threadIdx.x; d < HS; d += blockDim.x) {
        k_cache[slot + d] = k_new[d];
        v_cache[slot + d] = k_new[C + d];
    }
    __syncthreads();  // the block reads them back with the other keys and values
    extern __shared__ __align__(16) float shared[];
    float* partial = shared;              // [groups][HS], float4-aligned rows when vector
    float* scores = shared + groups * HS; // [max_T]
    __shared__ float reduce[MAX_THREADS / 32];
    int keys = min(lengths[b] + 1, max_T);
    const float* q = qkv + (long long)b * 3 * C + h * HS;
    const float* k_rows = k_cache + ((long long)b * NH + h) * max_T * HS;
    const float* v_rows = v_cache + ((long long)b * NH + h) * max_T * HS;
    int units = vector ? HS / 4 : HS;  // float4s or floats per row

    // Scores: key_threads threads per key, each a slice of the row, so that every load of a few hundred
    // keys is in flight at once; the slices meet by shuffles within the warp.
    float local_max = __int_as_float(0xff800000);  // -infinity
    int part = threadIdx.x % key_threads;
    for (int first = 0; first < keys; first += blockDim.x / key_threads) {  // the same trips for the whole block
        int j = first + threadIdx.x / key_threads;
        float dot = 0.0f;
        if (j < keys) {
            const float* k = k_rows + (long long)j * HS;
            #pragma unroll 4
            for (int u = part; u < units; u += key_threads) {
                if (vector) {
                    float4 kd = *(const float4*)(k + 4 * u), qd = *(const float4*)(q + 4 * u);
                    dot += qd.x * kd.x + qd.y * kd.y + qd.z * kd.z + qd.w * kd.w;
                } else {
                    dot += q[u] * k[u];
                }
            }
        }
        for (int offset = key_threads / 2; offset > 0; offset /= 2) dot += __shfl_xor_sync(0xffffffff, dot, offset);
        if (j < keys && part == 0) {
            scores[j] = dot * scale;
            local_max = fmaxf(local_max, dot * scale);
        }
    }
    float row_max = block_reduce(local_max, true, reduce);  // its barrier also publishes the scores
    float local_sum = 0.0f;
    for (int j = threadIdx.x; j < keys; j += blockDim.x) {
        float e = expf(scores[j] - row_max);
        scores[j] = e;
        local_sum += e;
    }
    float row_sum = block_reduce(local_sum, false, reduce);

    // p @ V: a thread per (group of keys, float4 or float of the head), keys j = group, group + groups, ...
    for (int unit = threadIdx.x; unit < groups * units; unit += blockDim.x) {
        int group = unit / units, u = unit % units;
        if (vector) {
            float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            #pragma unroll 4
            for (int j = group; j < keys; j += groups) {
                float p = scores[j];
                float4 v = *(const float4*)(v_rows + (long long)j * HS + 4 * u);
                acc.x += p * v.x; acc.y += p * v.y; acc.z += p * v.z; acc.w += p * v.w;
            }
            *(float4*)(partial + group * HS + 4 * u) = acc;
        } else {
            float acc = 0.0f;
            for (int j = group; j < keys; j += groups) acc += scores[j] * v_rows[(long long)j * HS + u];
            partial[group * HS + u] = acc;
        }
    }
    // the groups' sums added pairwise: log2(groups) rounds
    for (int half = groups / 2; half > 0; half /= 2) {
        __syncthreads();
        for (int i = threadIdx.x; i < half * HS; i += blockDim.x) partial[i] += partial[i + half * HS];
    }
    __syncthreads();
    for (int d = threadIdx.x; d < HS; d += blockDim.x) out[(long long)b * C + h * HS + d] = partial[d] / row_sum;
    // END SOLUTION
}
"""

DECODE_DEFINES = dict(MAX_THREADS=MAX_THREADS)
encoder_at_positions_kernel = CudaKernel(DECODE_SOURCE, "encoder_at_positions_kernel", defines=DECODE_DEFINES)
kv_cache_append_kernel = CudaKernel(DECODE_SOURCE, "kv_cache_append_kernel", defines=DECODE_DEFINES)
decode_attention_kernel = CudaKernel(DECODE_SOURCE, "decode_attention_kernel", defines=DECODE_DEFINES)


def encoder_at_positions_forward(out, inp, positions, wte, wpe, B, T, C):
    check_dims("encoder_at_positions_forward", B=B, T=T, C=C)
    check_array("encoder_at_positions_forward", "inp", inp, B * T, np.int32)
    check_array("encoder_at_positions_forward", "positions", positions, B, np.int32)
    V = check_rows("encoder_at_positions_forward", "wte", wte, C)
    max_T = check_rows("encoder_at_positions_forward", "wpe", wpe, C)
    check_array("encoder_at_positions_forward", "out", out, B * T * C)
    encoder_at_positions_kernel((B * T,), (min(256, 32 * ceil_div(C, 32)),),
                                (out, inp, positions, wte, wpe, np.int32(T), np.int32(C), np.int32(V),
                                 np.int32(max_T)))


def _check_cache(function, k_cache, v_cache, lengths, B, C, NH, max_T):
    if C % NH:
        raise KernelArgumentError(f"{function}: C={C} is not a multiple of NH={NH}")
    check_array(function, "k_cache", k_cache, B * max_T * C)
    check_array(function, "v_cache", v_cache, B * max_T * C)
    check_array(function, "lengths", lengths, B, np.int32)


def kv_cache_append_forward(k_cache, v_cache, qkv, lengths, B, T, C, NH, max_T):
    check_dims("kv_cache_append_forward", B=B, T=T, C=C, NH=NH, max_T=max_T)
    _check_cache("kv_cache_append_forward", k_cache, v_cache, lengths, B, C, NH, max_T)
    check_array("kv_cache_append_forward", "qkv", qkv, B * T * 3 * C)
    kv_cache_append_kernel((B * T, NH), (min(128, 32 * ceil_div(C // NH, 32)),),
                           (k_cache, v_cache, qkv, lengths, np.int32(T), np.int32(C), np.int32(NH),
                            np.int32(max_T)))


def decode_attention_forward(out, qkv, k_cache, v_cache, lengths, B, C, NH, max_T):
    check_dims("decode_attention_forward", B=B, C=C, NH=NH, max_T=max_T)
    _check_cache("decode_attention_forward", k_cache, v_cache, lengths, B, C, NH, max_T)
    check_array("decode_attention_forward", "qkv", qkv, B * 3 * C)
    check_array("decode_attention_forward", "out", out, B * C)
    launch_decode_attention(decode_attention_kernel, out, qkv, k_cache, v_cache, lengths, B, C, NH, max_T)


def launch_decode_attention(kernel, out, qkv, k_cache, v_cache, lengths, B, C, NH, max_T):
    """`kernel` (decode_attention_kernel, or one with its parameters) on checked arguments: a block per (b, h)."""
    HS = C // NH
    vector = HS % 4 == 0 and all(array.data.ptr % 16 == 0 for array in (k_cache, v_cache, qkv))
    units = HS // 4 if vector else HS  # per row
    threads = _threads_per_head(B * NH)
    key_threads = min(32, power_of_two_at_least(ceil_div(units, 4)))  # at most 4 loads each
    groups = 1 << (threads // units).bit_length() - 1 if units <= threads else 1  # a power of two
    kernel((B, NH), (threads,),
           (out, qkv, k_cache, v_cache, lengths, np.int32(C), np.int32(NH), np.int32(max_T),
            np.float32(1.0 / math.sqrt(HS)), np.int32(vector), np.int32(key_threads), np.int32(groups)),
           shared_mem=4 * (max_T + groups * HS))


def _threads_per_head(blocks: int) -> int:
    """The most threads per block that still lets every (b, h) block be resident at once (a 1024-thread block
    fills an SM's registers): 1024 for the few heads of small batches, down to 256."""
    threads = MAX_THREADS
    while threads > 256 and blocks > multiprocessor_count() * (MAX_THREADS // threads):
        threads //= 2
    return threads
