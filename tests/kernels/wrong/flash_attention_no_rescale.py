"""Flash attention that forgets to rescale its output when a tile raises a row's maximum: the
terms summed against the old maximum stay too large (l is rescaled, o is not)."""

from gpt2kit.kernels import flash_attention as flash
from tests.kernels.wrong import mutate

FUNCTION = "flash_attention_forward"

RESCALE = "for (int c = 0; c < CHUNKS; c++) o[c][i][j] *= correction;"
no_rescale_kernels = flash.compile_for_head_sizes(mutate(flash.FLASH_ATTENTION_SOURCE, RESCALE, ""))


def flash_attention_forward(out, lse, inp, B, T, C, NH):
    kernels, flash.flash_attention_kernels = flash.flash_attention_kernels, no_rescale_kernels
    try:
        flash.flash_attention_forward(out, lse, inp, B, T, C, NH)
    finally:
        flash.flash_attention_kernels = kernels
