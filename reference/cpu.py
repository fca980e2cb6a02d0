"""NumPy reference for every kernel: the definition the kernels are checked against.

Same argument order as kernels/, with NumPy arrays. Every function computes in
float64 and writes into `out` (and the other output arrays) in whatever dtype they
have: pass float64 outputs to see the exact answer, float32 ones to get what a
float32 kernel should produce.
"""

import numpy as np

from reference.numerics import softmax_rows, window_mask

LAYERNORM_EPS = 1e-5


def exact(weights: np.ndarray) -> np.ndarray:
    """Weights in float64: float32 ones converted (exactly), float64 ones as they are. A model on the reference
    backend holds its weights in float64 (model_runtime.backends), so a call does not convert them again."""
    return np.asarray(weights, dtype=np.float64)


def encoder_forward(out, inp, wte, wpe, B, T, C):
    tokens = np.asarray(inp).reshape(B, T)
    V = wte.size // C
    bad = (tokens < 0) | (tokens >= V)
    if bad.any():
        b, t = np.argwhere(bad)[0]
        raise ValueError(f"encoder_forward: token id {tokens[b, t]} at (b={b}, t={t}) is outside [0, {V})")
    out.reshape(B, T, C)[...] = exact(wte.reshape(V, C)[tokens]) + exact(wpe.reshape(-1, C)[:T])


def layernorm_forward(out, mean, rstd, inp, weight, bias, B, T, C):
    x = inp.reshape(B, T, C).astype(np.float64)
    mu = x.mean(axis=-1, keepdims=True)
    variance = ((x - mu) ** 2).mean(axis=-1, keepdims=True)  # biased, as GPT-2
    s = 1.0 / np.sqrt(variance + LAYERNORM_EPS)
    out.reshape(B, T, C)[...] = (x - mu) * s * exact(weight) + exact(bias)
    mean.reshape(B, T)[...] = mu[..., 0]
    rstd.reshape(B, T)[...] = s[..., 0]


def matmul_forward(out, inp, weight, bias, B, T, C, OC):
    product = inp.reshape(B * T, C).astype(np.float64) @ exact(weight.reshape(OC, C)).T
    if bias is not None:
        product += exact(bias)
    out.reshape(B * T, OC)[...] = product


def softmax_forward(out, inp, scale, N, T):
    """Row (n, t) is softmax(scale * inp[n, t, :t+1]), then zeros; out may be inp."""
    scores = scale * inp.reshape(N, T, T).astype(np.float64)
    causal = np.tril(np.ones((T, T), dtype=bool))
    scores = np.where(causal, scores, -np.inf)  # entries above the diagonal are never used
    out.reshape(N, T, T)[...] = softmax_rows(scores)


def attention_forward(out, qkvr, att, inp, B, T, C, NH):
    """Causal multi-head attention; qkvr is scratch this version does not need."""
    HS = C // NH
    qkv = inp.reshape(B, T, 3, NH, HS).astype(np.float64)
    q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))  # (B, NH, T, HS)
    probabilities = np.empty((B, NH, T, T))
    softmax_forward(probabilities, q @ k.transpose(0, 1, 3, 2), 1.0 / np.sqrt(HS), B * NH, T)
    att.reshape(B, NH, T, T)[...] = probabilities
    out.reshape(B, T, C)[...] = (probabilities @ v).transpose(0, 2, 1, 3).reshape(B, T, C)


def flash_attention_forward(out, lse, inp, B, T, C, NH):
    """attention_forward's output without its probabilities; lse (B, NH, T) gets each row's log-sum-exp."""
    windowed_attention(out, lse, inp, B, T, C, NH, window=T)


def local_attention_forward(out, lse, inp, B, T, C, NH, W):
    """Each query attends to its W most recent keys, itself included (W >= T: causal attention)."""
    windowed_attention(out, lse, inp, B, T, C, NH, window=W)


def windowed_attention(out, lse, inp, B, T, C, NH, window):
    """Each query attends to its `window` most recent keys, itself included."""
    HS = C // NH
    qkv = inp.reshape(B, T, 3, NH, HS).astype(np.float64)
    q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))  # (B, NH, T, HS)
    visible = window_mask(T, window)
    scores = np.where(visible, q @ k.transpose(0, 1, 3, 2) / np.sqrt(HS), -np.inf)
    top = scores.max(axis=-1, keepdims=True)
    log_sum = top + np.log(np.exp(scores - top).sum(axis=-1, keepdims=True))
    lse.reshape(B, NH, T)[...] = log_sum[..., 0]
    out.reshape(B, T, C)[...] = (np.exp(scores - log_sum) @ v).transpose(0, 2, 1, 3).reshape(B, T, C)


def residual_forward(out, inp1, inp2, N):
    out.reshape(N)[...] = inp1.reshape(N).astype(np.float64) + inp2.reshape(N).astype(np.float64)


def gelu_forward(out, inp, N):
    x = inp.reshape(N).astype(np.float64)
    out.reshape(N)[...] = 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


# --------------------------------------------------------------------------- fused matmuls (milestone 3)


def layernorm_matmul_forward(out, inp, ln_weight, ln_bias, weight, bias, B, T, C, OC):
    normalised = np.empty((B, T, C))
    layernorm_forward(normalised, np.empty((B, T)), np.empty((B, T)), inp, ln_weight, ln_bias, B, T, C)
    matmul_forward(out, normalised, weight, bias, B, T, C, OC)


def layernorm_matmul_gelu_forward(out, inp, ln_weight, ln_bias, weight, bias, B, T, C, OC):
    before_gelu = np.empty((B, T, OC))
    layernorm_matmul_forward(before_gelu, inp, ln_weight, ln_bias, weight, bias, B, T, C, OC)
    gelu_forward(out, before_gelu, B * T * OC)


def matmul_residual_forward(out, inp, weight, bias, residual, B, T, C, OC):
    product = np.empty((B, T, OC))
    matmul_forward(product, inp, weight, bias, B, T, C, OC)
    residual_forward(out, residual, product, B * T * OC)


# --------------------------------------------------------------------------- decoding with a KV cache


def encoder_at_positions_forward(out, inp, positions, wte, wpe, B, T, C):
    """out[b, t] = wte[inp[b, t]] + wpe[positions[b] + t]."""
    tokens = np.asarray(inp).reshape(B, T)
    where = np.asarray(positions).reshape(B, 1) + np.arange(T)
    out.reshape(B, T, C)[...] = exact(wte.reshape(-1, C)[tokens]) + exact(wpe.reshape(-1, C)[where])


def kv_cache_append_forward(k_cache, v_cache, qkv, lengths, B, T, C, NH, max_T):
    """Cache (B, NH, max_T, HS) slot (lengths[b] + t) % max_T gets the keys and values of qkv[b, t]; of
    more than max_T new tokens only the last max_T are kept (the slots are a ring)."""
    HS = C // NH
    k_new, v_new = (qkv.reshape(B, T, 3, NH, HS)[:, :, i].transpose(0, 2, 1, 3) for i in (1, 2))
    kept = np.arange(max(0, T - max_T), T)
    for b, start in enumerate(np.asarray(lengths).reshape(B)):
        slots = (start + kept) % max_T
        k_cache.reshape(B, NH, max_T, HS)[b][:, slots] = k_new[b][:, kept]
        v_cache.reshape(B, NH, max_T, HS)[b][:, slots] = v_new[b][:, kept]


def decode_attention_forward(out, qkv, k_cache, v_cache, lengths, B, C, NH, max_T):
    """One query per row attends to cache slots 0..min(lengths[b], max_T - 1) (its own key included)."""
    HS = C // NH
    q = qkv.reshape(B, 3, NH, HS)[:, 0].astype(np.float64)
    keys, values = k_cache.reshape(B, NH, max_T, HS), v_cache.reshape(B, NH, max_T, HS)
    for b, length in enumerate(np.asarray(lengths).reshape(B)):
        k, v = keys[b, :, :length + 1].astype(np.float64), values[b, :, :length + 1].astype(np.float64)
        weights = softmax_rows(np.einsum("hd,hjd->hj", q[b], k) / np.sqrt(HS))
        out.reshape(B, C)[b] = np.einsum("hj,hjd->hd", weights, v).reshape(C)


def rotary_forward(out, inp, positions, sin_cos, B, T, C, NH, rotary_dim):
    """out = inp (B, T, 3C) with the first rotary_dim values of every query and key head turned pair by pair
    (2i, 2i+1) by the angle of position positions[b] + t: sin_cos[p, i] and sin_cos[p, rotary_dim/2 + i]."""
    HS, half = C // NH, rotary_dim // 2
    x = exact(inp).reshape(B, T, 3, NH, HS)
    table = exact(sin_cos).reshape(-1, rotary_dim)[np.asarray(positions).reshape(B, 1) + np.arange(T)]
    sin, cos = table[:, :, None, :half], table[:, :, None, half:]  # (B, T, 1 head, half): the same for every head
    y = x.copy()
    for part in (0, 1):  # queries, keys
        even, odd = x[:, :, part, :, 0:rotary_dim:2], x[:, :, part, :, 1:rotary_dim:2]
        y[:, :, part, :, 0:rotary_dim:2] = even * cos - odd * sin
        y[:, :, part, :, 1:rotary_dim:2] = odd * cos + even * sin
    out.reshape(B, T, 3, NH, HS)[...] = y


def kv_cache_reorder_forward(k_cache, v_cache, rows, lengths, done, B, NH, max_T, HS, group):
    """Row b of each cache (B, NH, max_T, HS) becomes row rows[b] as it was before the call, at positions below
    min(lengths[b], max_T); nothing changes once done[0] is set."""
    if np.asarray(done).reshape(-1)[0]:
        return
    for cache in (k_cache, v_cache):
        before = cache.reshape(B, NH, max_T, HS).copy()
        for b, (parent, length) in enumerate(zip(np.asarray(rows).reshape(B), np.asarray(lengths).reshape(B))):
            filled = min(int(length), max_T)
            cache.reshape(B, NH, max_T, HS)[b, :, :filled] = before[parent, :, :filled]
