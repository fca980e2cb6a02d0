"""Known-wrong variants (milestones 2 and 3): each passes its cases, or would, without the technique
its variant must show, or with cuBLAS where cuBLAS is not allowed.

One file per way a variant can claim a technique it does not use. Each sets VARIANT
(reference.variants) and defines that variant's host function. The kernel tests
(test_wrong_techniques.py) and the grader of its milestone must give each no credit for
its variant, with the reason; the milestone-1 checks alone would pass most of them.
"""

import importlib
import pkgutil


def names() -> list[str]:
    """The module name of every known-wrong variant here, without importing any."""
    return sorted(info.name for info in pkgutil.iter_modules(__path__))


def load(name: str):
    return importlib.import_module(f"{__name__}.{name}")


# What the "TF32" variants that compute in plain float32 share: warp-wide TF32 products of zeros (m16n8k8),
# tensor-core instructions whose results mean nothing, and one output element of the product in float32.
FP32_WITH_IDLE_TENSOR_CORES = r"""
__device__ __forceinline__ float tf32_products_of_zeros(int times) {
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    unsigned a[4] = {0u, 0u, 0u, 0u}, b[2] = {0u, 0u};
    for (int t = 0; t < times; t++)
        asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    return d[0];
}

__device__ __forceinline__ void fp32_output(float* out, const float* inp, const float* weight, const float* bias,
                                            int M, int K, int N, long long i) {
    if (i >= (long long)M * N) return;
    int m = i / N, n = i % N;
    float acc = bias != nullptr ? bias[n] : 0.0f;
    for (int k = 0; k < K; k++) acc += inp[(long long)m * K + k] * weight[(long long)n * K + k];
    out[i] = acc;
}
"""
