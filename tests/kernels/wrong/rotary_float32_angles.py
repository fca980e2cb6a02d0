"""Rotary embedding that computes its own angles in float32 (sincosf of position * theta) instead of
reading the model's table: an angle near 2,000 radians is off by its rounding, ~1e-4, past any bound."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels import rotary
from tests.kernels.wrong import mutate

FUNCTION = "rotary_forward"

SOURCE = mutate(rotary.ROTARY_SOURCE, """    float sin_p = sin_cos[(long long)position * rotary_dim + i];
    float cos_p = sin_cos[(long long)position * rotary_dim + rotary_dim / 2 + i];""",
                """    float sin_p, cos_p;
    sincosf(position * powf(10000.0f, -2.0f * i / rotary_dim), &sin_p, &cos_p);""")
kernel = CudaKernel(SOURCE, "rotary_forward_kernel")


def rotary_forward(out, inp, positions, sin_cos, B, T, C, NH, rotary_dim):
    rotary.launch(kernel, out, inp, positions, sin_cos, B, T, C, NH, rotary_dim, sin_cos.size // rotary_dim)
