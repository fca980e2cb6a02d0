"""Flash attention that forgets to rescale its output when a tile raises a row's maximum: the
terms summed against the old maximum stay too large (l is rescaled, o is not)."""

from kernel_runtime import CudaKernel
from kernels import flash_attention as flash

FUNCTION = "flash_attention_forward"

RESCALE = "o[i][j] *= correction;"
assert RESCALE in flash.FLASH_ATTENTION_SOURCE
no_rescale_kernel = CudaKernel(flash.FLASH_ATTENTION_SOURCE.replace(RESCALE, ""), "flash_attention_kernel",
                               defines=dict(QUERY_ROWS=flash.QUERY_ROWS, KEY_TILE=flash.KEY_TILE,
                                            MAX_HEAD=flash.MAX_HEAD, THREADS=flash.THREADS))


def flash_attention_forward(out, lse, inp, B, T, C, NH):
    kernel, flash.flash_attention_kernel = flash.flash_attention_kernel, no_rescale_kernel
    try:
        flash.flash_attention_forward(out, lse, inp, B, T, C, NH)
    finally:
        flash.flash_attention_kernel = kernel
