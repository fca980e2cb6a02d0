"""Kernels for generating one token at a time against a KV cache.

After the prompt has been processed once (the prefill), each new token only needs
its own query against the keys and values of every earlier token. Those are kept,
per layer, in a cache of shape (B, NH, max_T, HS), filled as tokens arrive.

Positions and cache lengths are read from device memory (`lengths`, int32 (B,)),
never passed as launch arguments. The launches of a decode step are therefore the
same at every step, and the step can be captured once as a CUDA graph and replayed
for every length.

* encoder_at_positions_forward(out, inp, positions, wte, wpe, B, T, C):
      out[b, t] = wte[inp[b, t]] + wpe[positions[b] + t]
* kv_cache_append_forward(k_cache, v_cache, qkv, lengths, B, T, C, NH, max_T):
      k_cache[b, h, (lengths[b] + t) % max_T] = k of qkv[b, t] for head h (v likewise)
* decode_attention_forward(out, qkv, k_cache, v_cache, lengths, B, C, NH, max_T):
      one query per row (qkv is (B, 1, 3C)) attends to cache slots
      0..min(lengths[b], max_T - 1), among them its own key, just appended; out (B, 1, C).

A model's cache has a slot per position (max_T = its context), and lengths[b] + t
never reaches max_T. A local model's cache (attention over a window of W) has W
slots, used as a ring: token p lives in slot p % W, so the cache holds exactly the
keys of the newest window; when more than W tokens arrive at once, only the last W
are kept.

decode_attention is one block per (b, h): each warp takes every 8th key, its lanes
share the HS-long dot product (coalesced loads of the key row) and combine it with
shuffles; the scores wait in shared memory for the block-wide max and sum; then the
warps again split the keys to accumulate p * v, lanes over HS, and add their parts.
"""

import math

import numpy as np

from kernel_runtime import CudaKernel, KernelArgumentError, ceil_div, check_array, check_dims, check_rows

WARPS = 32  # per decode_attention block: each takes every WARPS-th key (more warps: more loads in flight)

DECODE_SOURCE = r"""
#define NAN_FLOAT __int_as_float(0x7fffffff)

extern "C" __global__ void encoder_at_positions_kernel(float* out, const int* inp, const int* positions,
                                                       const float* wte, const float* wpe,
                                                       int T, int C, int V, int max_T) {
    int bt = blockIdx.x, b = bt / T, t = bt % T;
    int token = inp[bt], position = positions[b] + t;
    float* y = out + (long long)bt * C;
    bool valid = token >= 0 && token < V && position >= 0 && position < max_T;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        y[c] = valid ? wte[(long long)token * C + c] + wpe[(long long)position * C + c] : NAN_FLOAT;
    }
}

// grid (B * T, NH), threads over the head's HS values
extern "C" __global__ void kv_cache_append_kernel(float* k_cache, float* v_cache, const float* qkv,
                                                  const int* lengths, int T, int C, int NH, int max_T) {
    int bt = blockIdx.x, b = bt / T, t = bt % T, h = blockIdx.y, HS = C / NH;
    if (t < T - max_T) return;  // a ring of max_T slots keeps only the last max_T new tokens
    int slot = (lengths[b] + t) % max_T;
    const float* k = qkv + (long long)bt * 3 * C + C + h * HS;
    long long row = (((long long)b * NH + h) * max_T + slot) * HS;
    for (int d = threadIdx.x; d < HS; d += blockDim.x) {
        k_cache[row + d] = k[d];
        v_cache[row + d] = k[C + d];
    }
}

__device__ float warp_sum(float value) {
    for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffff, value, offset);
    return value;
}

__device__ float warp_max(float value) {
    for (int offset = 16; offset > 0; offset /= 2) value = fmaxf(value, __shfl_xor_sync(0xffffffff, value, offset));
    return value;
}

// grid (B, NH), WARPS * 32 threads; dynamic shared memory: max_T scores + WARPS * HS partial sums
extern "C" __global__ void decode_attention_kernel(float* out, const float* qkv, const float* k_cache,
                                                   const float* v_cache, const int* lengths,
                                                   int C, int NH, int max_T, float scale) {
    extern __shared__ float shared[];
    float* scores = shared;               // [max_T]
    float* partial = shared + max_T;      // [WARPS][HS]
    __shared__ float reduce[WARPS];
    int b = blockIdx.x, h = blockIdx.y, HS = C / NH;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int keys = min(lengths[b] + 1, max_T);
    const float* q = qkv + (long long)b * 3 * C + h * HS;
    const float* k_rows = k_cache + ((long long)b * NH + h) * max_T * HS;
    const float* v_rows = v_cache + ((long long)b * NH + h) * max_T * HS;

    float local_max = __int_as_float(0xff800000);  // -infinity
    for (int j = warp; j < keys; j += WARPS) {
        float dot = 0.0f;
        for (int d = lane; d < HS; d += 32) dot += q[d] * k_rows[(long long)j * HS + d];
        dot = warp_sum(dot) * scale;
        if (lane == 0) scores[j] = dot;
        local_max = fmaxf(local_max, dot);
    }
    if (lane == 0) reduce[warp] = local_max;
    __syncthreads();
    float row_max = reduce[0];
    for (int w = 1; w < WARPS; w++) row_max = fmaxf(row_max, reduce[w]);
    __syncthreads();

    float local_sum = 0.0f;
    for (int j = threadIdx.x; j < keys; j += blockDim.x) {
        float e = expf(scores[j] - row_max);
        scores[j] = e;
        local_sum += e;
    }
    local_sum = warp_sum(local_sum);
    if (lane == 0) reduce[warp] = local_sum;
    __syncthreads();
    float row_sum = 0.0f;
    for (int w = 0; w < WARPS; w++) row_sum += reduce[w];

    for (int d = lane; d < HS; d += 32) {
        float acc = 0.0f;
        for (int j = warp; j < keys; j += WARPS) acc += scores[j] * v_rows[(long long)j * HS + d];
        partial[warp * HS + d] = acc;
    }
    __syncthreads();
    for (int d = threadIdx.x; d < HS; d += blockDim.x) {
        float acc = 0.0f;
        for (int w = 0; w < WARPS; w++) acc += partial[w * HS + d];
        out[(long long)b * C + h * HS + d] = acc / row_sum;
    }
}
"""

DECODE_DEFINES = dict(WARPS=WARPS)
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
    HS = C // NH
    shared_bytes = 4 * (max_T + WARPS * HS)
    decode_attention_kernel((B, NH), (32 * WARPS,),
                            (out, qkv, k_cache, v_cache, lengths, np.int32(C), np.int32(NH), np.int32(max_T),
                             np.float32(1.0 / math.sqrt(HS))), shared_mem=shared_bytes)
