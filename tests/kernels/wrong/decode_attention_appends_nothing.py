"""Decode attention that attends to the cache as it finds it, without first storing the step's own key and value
in slot lengths[b] % max_T: it attends to whatever that slot held (an earlier token's key, or an older one's in a
full ring), and the next step's cache lacks this token."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels import decode
from tests.kernels.wrong import mutate

FUNCTION = "decode_attention_forward"

kernel = CudaKernel(mutate(decode.DECODE_SOURCE, """        k_cache[slot + d] = k_new[d];
        v_cache[slot + d] = k_new[C + d];
""", ""), "decode_attention_kernel", defines=decode.DECODE_DEFINES)


def decode_attention_forward(out, qkv, k_cache, v_cache, lengths, B, C, NH, max_T):
    decode.launch_decode_attention(kernel, out, qkv, k_cache, v_cache, lengths, B, C, NH, max_T)
