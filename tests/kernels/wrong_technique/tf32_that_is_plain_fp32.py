"""A "TF32 tensor-core" matmul that is the float32 tiled one: right under tf32 (and fp32), no mma instruction."""

from gpt2kit.kernels.matmul import matmul_few_rows_kernel, matmul_forward, matmul_forward_kernel  # noqa: F401

VARIANT = "matmul_tf32"
