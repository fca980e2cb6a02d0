"""GPT-2 on the kit's hand-written CUDA kernels."""
