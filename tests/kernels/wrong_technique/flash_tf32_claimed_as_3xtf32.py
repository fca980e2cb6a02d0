"""A "3xTF32" flash attention whose kernel is compiled with one TF32 pass: its tensor-core instructions do
every product once, on operands rounded to TF32, so the fp32 profile, which the variant is judged under,
fails its cases."""

from gpt2kit.kernels.flash_attention_3xtf32 import flash_attention_3xtf32_kernel, launch_flash_on_tensor_cores

VARIANT = "attention_flash_3xtf32"

one_pass_kernel = flash_attention_3xtf32_kernel.with_defines(PASSES=1)


def flash_attention_forward(out, lse, inp, B, T, C, NH):
    launch_flash_on_tensor_cores(one_pass_kernel, out, lse, inp, B, T, C, NH)
