"""Attention whose softmax runs over every key, future ones included (no causal mask).

A naive kernel: one thread per (b, h, t) row does everything, writing att in place.
"""

import math

import numpy as np

from gpt2kit.kernel_runtime import CudaKernel, ceil_div

FUNCTION = "attention_forward"

SOURCE = r"""
extern "C" __global__ void attention_unmasked(float* out, float* att, const float* inp,
                                              int B, int T, int C, int NH, float scale) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * NH * T) return;
    int t = idx % T, h = (idx / T) % NH, b = idx / (T * NH), HS = C / NH;
    const float* q = inp + (b * T + t) * 3 * C + h * HS;
    float* row = att + (long long)idx * T;
    float max_score = -1e30f;
    for (int t2 = 0; t2 < T; t2++) {
        const float* k = inp + (b * T + t2) * 3 * C + C + h * HS;
        float s = 0.0f;
        for (int d = 0; d < HS; d++) s += q[d] * k[d];
        row[t2] = s * scale;
        max_score = fmaxf(max_score, s * scale);
    }
    float sum = 0.0f;
    for (int t2 = 0; t2 < T; t2++) {
        row[t2] = expf(row[t2] - max_score);
        sum += row[t2];
    }
    for (int d = 0; d < HS; d++) {
        float y = 0.0f;
        for (int t2 = 0; t2 < T; t2++) y += row[t2] / sum * inp[(b * T + t2) * 3 * C + 2 * C + h * HS + d];
        out[(b * T + t) * C + h * HS + d] = y;
    }
    for (int t2 = 0; t2 < T; t2++) row[t2] /= sum;
}
"""
attention_unmasked = CudaKernel(SOURCE, "attention_unmasked")


def attention_forward(out, qkvr, att, inp, B, T, C, NH):
    scale = np.float32(1.0 / math.sqrt(C // NH))
    attention_unmasked((ceil_div(B * NH * T, 128),), (128,),
                       (out, att, inp, np.int32(B), np.int32(T), np.int32(C), np.int32(NH), scale))
