"""The "tiled" matmul calling cuBLAS behind the tiled kernel's back: cuBLAS is allowed in the cuBLAS variant only."""

from gpt2kit.kernels.matmul_cublas import matmul_forward  # noqa: F401

VARIANT = "matmul_tiled"
