"""Local attention whose window holds one key too many: W earlier keys besides the query's own."""

from gpt2kit.kernels.flash_attention import windowed_attention

FUNCTION = "local_attention_forward"


def local_attention_forward(out, lse, inp, B, T, C, NH, W):
    windowed_attention(FUNCTION, out, lse, inp, B, T, C, NH, window=W + 1)
