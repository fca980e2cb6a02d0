"""Gold GPU implementation: every host function from CuPy library operations only.

Same signatures as kernels/ (CuPy arrays, results written into `out`), computed the
way a framework would: cupy.matmul (cuBLAS) for products, elementwise expressions and
reductions for the rest, all in float32. It shares no code with kernels/, so when a
kernel and gold agree they agree for independent reasons. It is also the speed
yardstick of the benchmark.

Each function takes its array module from its arguments (`array_module`), so the
same float32 code also runs on NumPy arrays, with or without CuPy installed: that is
how the GPU-less tests check that the tolerances in reference/specs/ admit an honest
float32 computation.
"""

import math

import numpy

from kernel_runtime.device import cupy

LAYERNORM_EPS = 1e-5


def array_module(array):
    """numpy or cupy, whichever `array` belongs to."""
    return numpy if cupy is None else cupy.get_array_module(array)


def encoder_forward(out, inp, wte, wpe, B, T, C):
    """Token ids must be in [0, V): CuPy's indexing wraps out-of-range ones silently."""
    tokens = inp.reshape(B, T)
    out.reshape(B, T, C)[...] = wte.reshape(-1, C)[tokens] + wpe.reshape(-1, C)[:T]


def layernorm_forward(out, mean, rstd, inp, weight, bias, B, T, C):
    xp = array_module(inp)
    x = inp.reshape(B, T, C)
    mu = x.mean(axis=-1, keepdims=True)
    centred = x - mu
    s = 1.0 / xp.sqrt((centred * centred).mean(axis=-1, keepdims=True) + LAYERNORM_EPS)
    out.reshape(B, T, C)[...] = centred * s * weight + bias
    mean.reshape(B, T)[...] = mu[..., 0]
    rstd.reshape(B, T)[...] = s[..., 0]


def matmul_forward(out, inp, weight, bias, B, T, C, OC):
    xp = array_module(inp)
    result = out.reshape(B * T, OC)
    xp.matmul(inp.reshape(B * T, C), weight.reshape(OC, C).T, out=result)
    if bias is not None:
        result += bias


def softmax_forward(out, inp, scale, N, T):
    xp = array_module(inp)
    causal = xp.tril(xp.ones((T, T), dtype=bool))
    scores = xp.where(causal, inp.reshape(N, T, T) * xp.float32(scale), xp.float32(-xp.inf))
    scores -= scores.max(axis=-1, keepdims=True)
    weights = xp.exp(scores)
    out.reshape(N, T, T)[...] = weights / weights.sum(axis=-1, keepdims=True)


def attention_forward(out, qkvr, att, inp, B, T, C, NH):
    xp = array_module(inp)
    HS = C // NH
    qkv = inp.reshape(B, T, 3, NH, HS).transpose(2, 0, 3, 1, 4)  # (3, B, NH, T, HS)
    q, k, v = (qkv[i] for i in range(3))
    probabilities = att.reshape(B, NH, T, T)
    softmax_forward(probabilities, xp.matmul(q, k.transpose(0, 1, 3, 2)), 1.0 / math.sqrt(HS), B * NH, T)
    out.reshape(B, T, C)[...] = xp.matmul(probabilities, v).transpose(0, 2, 1, 3).reshape(B, T, C)


def flash_attention_forward(out, lse, inp, B, T, C, NH):
    windowed_attention(out, lse, inp, B, T, C, NH, window=T)


def local_attention_forward(out, lse, inp, B, T, C, NH, W):
    windowed_attention(out, lse, inp, B, T, C, NH, window=W)


def windowed_attention(out, lse, inp, B, T, C, NH, window):
    """Each query attends to its `window` most recent keys, itself included; lse gets the log-sum-exp."""
    xp = array_module(inp)
    HS = C // NH
    qkv = inp.reshape(B, T, 3, NH, HS).transpose(2, 0, 3, 1, 4)  # (3, B, NH, T, HS)
    q, k, v = (qkv[i] for i in range(3))
    offset = xp.arange(T).reshape(T, 1) - xp.arange(T)  # query minus key
    visible = (offset >= 0) & (offset < window)
    scores = xp.where(visible, xp.matmul(q, k.transpose(0, 1, 3, 2)) * xp.float32(1 / math.sqrt(HS)),
                      xp.float32(-xp.inf))
    top = scores.max(axis=-1, keepdims=True)
    weights = xp.exp(scores - top)
    total = weights.sum(axis=-1, keepdims=True)
    lse.reshape(B, NH, T)[...] = (top + xp.log(total))[..., 0]
    out.reshape(B, T, C)[...] = xp.matmul(weights / total, v).transpose(0, 2, 1, 3).reshape(B, T, C)


def residual_forward(out, inp1, inp2, N):
    array_module(inp1).add(inp1.reshape(N), inp2.reshape(N), out=out.reshape(N))


def gelu_forward(out, inp, N):
    xp = array_module(inp)
    x = inp.reshape(N)
    inner = xp.float32(math.sqrt(2.0 / math.pi)) * (x + xp.float32(0.044715) * x * x * x)
    out.reshape(N)[...] = xp.float32(0.5) * x * (1 + xp.tanh(inner))


# --------------------------------------------------------------------------- fused matmuls (milestone 3)


def layernorm_matmul_forward(out, inp, ln_weight, ln_bias, weight, bias, B, T, C, OC):
    xp = array_module(inp)
    normalised = xp.empty((B, T, C), xp.float32)
    layernorm_forward(normalised, xp.empty((B, T), xp.float32), xp.empty((B, T), xp.float32), inp, ln_weight,
                      ln_bias, B, T, C)
    matmul_forward(out, normalised, weight, bias, B, T, C, OC)


def layernorm_matmul_gelu_forward(out, inp, ln_weight, ln_bias, weight, bias, B, T, C, OC):
    before_gelu = array_module(inp).empty((B, T, OC), "float32")
    layernorm_matmul_forward(before_gelu, inp, ln_weight, ln_bias, weight, bias, B, T, C, OC)
    gelu_forward(out, before_gelu, B * T * OC)


def matmul_residual_forward(out, inp, weight, bias, residual, B, T, C, OC):
    product = array_module(inp).empty((B, T, OC), "float32")
    matmul_forward(product, inp, weight, bias, B, T, C, OC)
    residual_forward(out, residual, product, B * T * OC)


# --------------------------------------------------------------------------- decoding with a KV cache


def encoder_at_positions_forward(out, inp, positions, wte, wpe, B, T, C):
    xp = array_module(wte)
    where = positions.reshape(B, 1) + xp.arange(T, dtype=positions.dtype)
    out.reshape(B, T, C)[...] = wte.reshape(-1, C)[inp.reshape(B, T)] + wpe.reshape(-1, C)[where]


def kv_cache_append_forward(k_cache, v_cache, qkv, lengths, B, T, C, NH, max_T):
    xp = array_module(qkv)
    HS = C // NH
    kept = min(T, max_T)  # a ring of max_T slots keeps the last max_T new tokens
    slots = (lengths.reshape(B, 1) + xp.arange(T - kept, T, dtype=lengths.dtype)) % max_T   # (B, kept)
    rows = xp.arange(B).reshape(B, 1)
    parts = qkv.reshape(B, T, 3, NH, HS)[:, T - kept:]
    for cache, part in ((k_cache, 1), (v_cache, 2)):
        cache.reshape(B, NH, max_T, HS).transpose(0, 2, 1, 3)[rows, slots] = parts[:, :, part]


def decode_attention_forward(out, qkv, k_cache, v_cache, lengths, B, C, NH, max_T):
    xp = array_module(qkv)
    HS = C // NH
    q = qkv.reshape(B, 3, NH, HS)[:, 0]
    keys, values = k_cache.reshape(B, NH, max_T, HS), v_cache.reshape(B, NH, max_T, HS)
    visible = xp.arange(max_T).reshape(1, 1, max_T) <= lengths.reshape(B, 1, 1)   # (B, 1, max_T)
    scores = xp.einsum("bhd,bhjd->bhj", q, xp.where(visible[..., None], keys, 0)) * xp.float32(1 / math.sqrt(HS))
    scores = xp.where(visible, scores, xp.float32(-xp.inf))
    weights = xp.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    out.reshape(B, C)[...] = xp.einsum("bhj,bhjd->bhd", weights, xp.where(visible[..., None], values, 0)).reshape(B, C)


def rotary_forward(out, inp, positions, sin_cos, B, T, C, NH, rotary_dim):
    # each pair (2i, 2i+1) as the complex number x + iy, multiplied by cos + i sin
    xp = array_module(inp)
    HS, half = C // NH, rotary_dim // 2
    table = sin_cos.reshape(-1, rotary_dim)[positions.reshape(B, 1) + xp.arange(T, dtype=positions.dtype)]
    turn = (table[:, :, half:] + 1j * table[:, :, :half]).astype(xp.complex64)[:, :, None, None, :]
    heads = inp.reshape(B, T, 3, NH, HS)
    pairs = heads[:, :, :2, :, :rotary_dim].reshape(B, T, 2, NH, half, 2)
    turned = (pairs[..., 0] + 1j * pairs[..., 1]).astype(xp.complex64) * turn
    result = out.reshape(B, T, 3, NH, HS)
    result[...] = heads
    result[:, :, :2, :, :rotary_dim] = xp.stack([turned.real, turned.imag], axis=-1).reshape(B, T, 2, NH, rotary_dim)


def kv_cache_reorder_forward(k_cache, v_cache, rows, lengths, done, B, NH, max_T, HS, group):
    xp = array_module(rows)
    filled = xp.arange(max_T).reshape(1, max_T) < xp.minimum(lengths.reshape(B, 1), max_T)  # (B, max_T)
    moved = filled & ~done.reshape(1, 1).astype(bool)
    for cache in (k_cache, v_cache):
        rows_now = cache.reshape(B, NH, max_T, HS)
        rows_now[...] = xp.where(moved[:, None, :, None], rows_now[rows.astype(xp.int64)], rows_now)
