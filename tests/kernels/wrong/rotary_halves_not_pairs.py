"""Rotary embedding that pairs value i with value i + rotary_dim/2 (GPT-NeoX's and Llama's "rotate half")
instead of GPT-J's neighbours 2i and 2i+1: right for another model, wrong for this one."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels import rotary
from tests.kernels.wrong import mutate

FUNCTION = "rotary_forward"

SOURCE = mutate(mutate(mutate(
    rotary.ROTARY_SOURCE,
    "i = d / 2;", "i = d % (rotary_dim / 2);"),
    "float x = inp[e - (d & 1)], y = inp[e - (d & 1) + 1];",
    "bool second = d >= rotary_dim / 2; float x = inp[second ? e - rotary_dim / 2 : e], "
    "y = inp[second ? e : e + rotary_dim / 2];"),
    "out[e] = (d & 1) ?", "out[e] = second ?")
kernel = CudaKernel(SOURCE, "rotary_forward_kernel")


def rotary_forward(out, inp, positions, sin_cos, B, T, C, NH, rotary_dim):
    rotary.launch(kernel, out, inp, positions, sin_cos, B, T, C, NH, rotary_dim, sin_cos.size // rotary_dim)
