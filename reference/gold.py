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

from gpt2kit.kernel_runtime.device import cupy
from gpt2kit.reference.numerics import draw_fractions

LAYERNORM_EPS = 1e-5
GROUP_NORM_EPS = 1e-5  # torch.nn.GroupNorm's default, which Wav2Vec2 keeps


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
    kv_cache_append_forward(k_cache, v_cache, qkv, lengths, B, 1, C, NH, max_T)
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


def kv_cache_lineage_forward(shared, starts, rows, lengths, done, B, group):
    xp = array_module(rows)
    if int(done.reshape(-1)[0]):
        return
    counts = shared.reshape(B // group, group, group)
    parents = rows.reshape(B // group, group) - xp.arange(0, B, group).reshape(-1, 1)  # within the group
    filled = lengths.reshape(B // group, group)
    inside = (parents >= 0) & (parents < group)
    clipped = xp.clip(parents, 0, group - 1)  # an index for every row; `inside` drops the outside ones
    held = xp.take_along_axis(counts, clipped[:, :, None], axis=2)[:, :, 0]
    own = parents == xp.arange(group)
    starts[...] = xp.where(own, filled, xp.where(inside, held, 0)).reshape(B)
    # what each two rows' parents held in common
    between = counts[xp.arange(B // group)[:, None, None], clipped[:, :, None], clipped[:, None, :]]
    one_parent = parents[:, :, None] == parents[:, None, :]
    both = inside[:, :, None] & inside[:, None, :]
    counts[...] = xp.where(both, xp.where(one_parent, xp.minimum(filled[:, :, None], filled[:, None, :]), between), 0)


def kv_cache_reorder_forward(k_cache, v_cache, rows, starts, lengths, done, layers, B, NH, max_T, HS, group):
    xp = array_module(rows)
    slot = xp.arange(max_T).reshape(1, max_T)
    filled = lengths.reshape(B, 1)
    latest = slot + (filled - 1 - slot) // max_T * max_T  # the position each slot holds
    moved = (slot < xp.minimum(filled, max_T)) & (latest >= starts.reshape(B, 1))  # (B, max_T)
    moved &= ~done.reshape(1, 1).astype(bool)
    for cache in (k_cache, v_cache):
        rows_now = cache.reshape(layers, B, NH, max_T, HS)
        rows_now[...] = xp.where(moved[None, :, None, :, None], rows_now[:, rows.astype(xp.int64)], rows_now)


# --------------------------------------------------------------------------- choosing the next token


def sample_forward(tokens, sequences, logits, lengths, B, V, stride, max_T, temperature, top_k, top_p, seed):
    xp = array_module(logits)
    rows = logits.reshape(B, stride)[:, :V]
    if temperature == 0:
        chosen = xp.argmax(rows, axis=1)  # the first of equal largest
    else:
        # running weights in float64: float32 sums over 50,000 tokens err by more than a small token's weight
        running = xp.cumsum(sampling_weights(rows, temperature, top_k, top_p), axis=1, dtype=xp.float64)
        counters = (xp.arange(B, dtype=xp.uint64) << xp.uint64(32)) | lengths.astype(xp.uint64)
        fractions = draw_fractions(seed, counters)
        chosen = (running <= (fractions * running[:, -1])[:, None]).sum(axis=1)  # the first whose running is past
    tokens[...] = chosen
    so_far = sequences.reshape(B, max_T)
    at = (xp.arange(B), xp.minimum(lengths, max_T - 1))  # a full row's last element: written back as it was
    so_far[at] = xp.where(lengths < max_T, chosen, so_far[at])


def sampling_weights(rows, temperature, top_k, top_p):
    """exp(z - max z) of each row (B, V) of z = logits / temperature (float32), zero where top-k or top-p cuts."""
    xp = array_module(rows)
    V = rows.shape[1]
    z = rows / xp.float32(temperature)
    k = min(top_k or V, V)
    kept = z >= xp.sort(z, axis=1)[:, V - k:V - k + 1]  # the k-th largest of each row and its ties
    weights = xp.where(kept, xp.exp(z - z.max(axis=1, keepdims=True)), xp.float32(0))
    if top_p is not None and numpy.float32(top_p) < 1:
        descending = xp.sort(weights, axis=1)[:, ::-1]
        cumulative = xp.cumsum(descending, axis=1, dtype=xp.float64)
        reached = (cumulative < float(numpy.float32(top_p)) * cumulative[:, -1:]).sum(axis=1, keepdims=True)
        weights = xp.where(weights >= xp.take_along_axis(descending, reached, axis=1), weights, xp.float32(0))
    return weights


# --------------------------------------------------------------------------- beam search


def beam_candidates_forward(candidate_scores, candidate_tokens, logits, beam_scores, done, rows, V, stride, count):
    xp = array_module(logits)
    x = logits.reshape(rows, stride)[:, :V]
    shifted = x - x.max(axis=1, keepdims=True)
    log_sum = xp.log(xp.exp(shifted).sum(axis=1, keepdims=True, dtype=xp.float64)).astype(xp.float32)
    scores = (shifted - log_sum) + beam_scores.reshape(rows, 1)
    best = xp.argsort(-scores, axis=1, kind="stable")[:, :count]  # ties: the lower token first
    kept = done.reshape(1, 1) != 0  # the search is over: nothing changes
    for out, new in ((candidate_scores, xp.take_along_axis(scores, best, axis=1)), (candidate_tokens, best)):
        out.reshape(rows, count)[...] = xp.where(kept, out.reshape(rows, count), new)


def beam_update_forward(candidate_scores, candidate_tokens, beam_scores, finished_scores, finished_step, finished_beam,
                        finished_token, is_finished, improvable, parents, chosen, tokens, rows, done, lengths, P, K, V,
                        prompt_length, max_length, length_penalty, early_stopping, end_of_text):
    """All prompts at once, in the float32 operations the host makes (decisions: they must compare alike); the step
    stays on the device (lengths), so nothing waits for the host."""
    xp = array_module(candidate_scores)
    negative, zero = xp.float32(-1e9), xp.float32(0)
    power = float(length_penalty)
    length = lengths.reshape(1, 1).astype(xp.int64)
    step = length - prompt_length
    # the 2K best (beam, token) of each prompt: ordered by beam * V + token, then stably by score
    scores = candidate_scores.reshape(P, 2 * K * K)
    beams = xp.broadcast_to(xp.arange(2 * K * K) // (2 * K), (P, 2 * K * K))
    flat = beams * V + candidate_tokens.reshape(P, 2 * K * K)
    by_flat = xp.argsort(flat, axis=1)
    top = xp.take_along_axis(by_flat, xp.argsort(-xp.take_along_axis(scores, by_flat, axis=1), axis=1,
                                                 kind="stable"), axis=1)[:, :2 * K]
    top_scores, top_beams = xp.take_along_axis(scores, top, axis=1), xp.take_along_axis(beams, top, axis=1)
    top_tokens = xp.take_along_axis(flat, top, axis=1) - top_beams * V
    ends = (top_tokens == end_of_text) | (length + 1 >= max_length)
    going = top_scores + xp.where(ends, negative, zero)
    going_on = xp.argsort(-going, axis=1, kind="stable")[:, :K]
    new_scores = xp.take_along_axis(going, going_on, axis=1)
    new_beams, new_tokens = xp.take_along_axis(top_beams, going_on, axis=1), xp.take_along_axis(top_tokens, going_on,
                                                                                                axis=1)
    # hypotheses: the best K that end, unless the prompt is closed; merged with the kept ones, which win ties
    finished_before = is_finished.reshape(P, K) != 0
    closed = (finished_before.all(axis=1, keepdims=True) & (early_stopping is True)) | (improvable.reshape(P, 1) == 0)
    penalty = xp.power((step + 1).astype(xp.float64), power).astype(xp.float32)
    just_finished = ends & (xp.arange(2 * K) < K)
    hypotheses = top_scores / penalty + xp.where(closed, negative, zero)
    hypotheses = hypotheses + xp.where(just_finished, zero, negative)
    merged = xp.argsort(-xp.concatenate([finished_scores.reshape(P, K), hypotheses], axis=1), axis=1,
                        kind="stable")[:, :K]

    def kept(old, candidates):
        return xp.take_along_axis(xp.concatenate([old.reshape(P, K), candidates], axis=1), merged, axis=1)

    new_finished, new_finished_scores = kept(finished_before, just_finished), kept(finished_scores, hypotheses)
    # can each prompt's best beam still beat its worst hypothesis (at its best length)?
    if early_stopping == "never" and power > 0:
        best_length = xp.full((1, 1), max_length - prompt_length, xp.int64)
    else:
        best_length = step + 1
    best_running = new_scores[:, :1] / xp.power(best_length.astype(xp.float64), power).astype(xp.float32)
    every_finished = new_finished.all(axis=1, keepdims=True)
    worst = xp.where(every_finished, new_finished_scores.min(axis=1, keepdims=True), negative)
    new_improvable = (improvable.reshape(P, 1) != 0) & (best_running > worst)
    open_beam = ~(every_finished.all() & (early_stopping is True))
    stop = ~(new_improvable.any() & open_beam & ~ends.all())

    over = done.reshape(1, 1) != 0  # the search was over before this step: nothing changes
    updates = ((beam_scores, new_scores), (tokens, new_tokens), (rows, new_beams + xp.arange(P).reshape(P, 1) * K),
               (improvable, new_improvable), (finished_scores, new_finished_scores), (is_finished, new_finished),
               (finished_step, kept(finished_step, xp.broadcast_to(step, (P, 2 * K)))),
               (finished_beam, kept(finished_beam, top_beams)), (finished_token, kept(finished_token, top_tokens)))
    for out, new in updates:
        out[...] = xp.where(over, out.reshape(P, -1), new).reshape(out.shape)
    for history, new in ((parents, new_beams), (chosen, new_tokens)):
        by_step = history.reshape(-1, P * K)
        now = (xp.arange(by_step.shape[0]).reshape(-1, 1) == step) & ~over
        by_step[...] = xp.where(now, new.reshape(1, P * K), by_step)
    done[...] = xp.where(stop & ~over, length + 1, done.reshape(1, 1)).reshape(done.shape)


# --------------------------------------------------------------------------- training: the backward passes
# reference/cpu.py's conventions: a parameter's gradient is added to, an activation's written (layernorm's dinp adds).


def layernorm_backward(dinp, dweight, dbias, scratch, dout, inp, weight, mean, rstd, B, T, C):
    grads = dout.reshape(B, T, C)
    s = rstd.reshape(B, T, 1)
    normalized = (inp.reshape(B, T, C) - mean.reshape(B, T, 1)) * s
    dbias.reshape(C)[...] += grads.sum(axis=(0, 1))
    dweight.reshape(C)[...] += (grads * normalized).sum(axis=(0, 1))
    dnormalized = grads * weight.reshape(C)
    dinp.reshape(B, T, C)[...] += s * (dnormalized - dnormalized.mean(axis=-1, keepdims=True)
                                       - normalized * (dnormalized * normalized).mean(axis=-1, keepdims=True))


def residual_backward(dinp1, dinp2, dout, N):
    xp = array_module(dout)
    grads = dout.reshape(N)
    xp.add(dinp1.reshape(N), grads, out=dinp1.reshape(N))
    xp.add(dinp2.reshape(N), grads, out=dinp2.reshape(N))


def gelu_backward(dinp, inp, dout, N):
    xp = array_module(inp)
    x = inp.reshape(N)
    scale = xp.float32(math.sqrt(2.0 / math.pi))
    t = xp.tanh(scale * (x + xp.float32(0.044715) * x * x * x))
    slope = (xp.float32(0.5) * (1 + t)
             + xp.float32(0.5) * x * (1 - t * t) * scale * (1 + xp.float32(3 * 0.044715) * x * x))
    dinp.reshape(N)[...] = slope * dout.reshape(N)


def matmul_backward(dinp, dweight, dbias, dout, inp, weight, B, T, C, OC):
    xp = array_module(dout)
    grads = dout.reshape(B * T, OC)
    xp.matmul(grads, weight.reshape(OC, C), out=dinp.reshape(B * T, C))
    gathered = dweight.reshape(OC, C)
    xp.add(gathered, xp.matmul(grads.T, inp.reshape(B * T, C)), out=gathered)
    if dbias is not None:
        xp.add(dbias.reshape(OC), grads.sum(axis=0), out=dbias.reshape(OC))


def cross_entropy_forward_backward(dlogits, losses, logits, targets, B, T, V, Vp):
    """Targets must be in [0, V): take_along_axis on CuPy wraps out-of-range ones silently. Everything is computed
    before dlogits is written, which may be logits."""
    xp = array_module(logits)
    scores = logits.reshape(B, T, Vp)[..., :V]
    chosen = targets.reshape(B, T, 1)
    largest = xp.max(scores, axis=-1, keepdims=True)
    weights = xp.exp(scores - largest)
    total = xp.sum(weights, axis=-1, keepdims=True)
    log_sum = xp.log(total) + largest
    loss = (log_sum - xp.take_along_axis(scores, chosen, axis=-1))[..., 0]
    one_hot = xp.arange(V).reshape(1, 1, V) == chosen
    grads = (weights / total - one_hot) / xp.float32(B * T)
    losses.reshape(B, T)[...] = loss
    dlogits.reshape(B, T, Vp)[..., :V] = grads
    dlogits.reshape(B, T, Vp)[..., V:] = 0


def attention_backward(dinp, dscores, dout, inp, att, B, T, C, NH):
    """att's entries above the diagonal are never read (they may be NaN): where() takes 0 there instead."""
    xp = array_module(inp)
    HS = C // NH
    qkv = inp.reshape(B, T, 3, NH, HS).transpose(2, 0, 3, 1, 4)  # (3, B, NH, T, HS)
    q, k, v = (qkv[i] for i in range(3))
    dy = dout.reshape(B, T, NH, HS).transpose(0, 2, 1, 3)
    causal = xp.tril(xp.ones((T, T), dtype=bool))
    probabilities = xp.where(causal, att.reshape(B, NH, T, T), xp.float32(0))
    dprobabilities = xp.matmul(dy, v.transpose(0, 1, 3, 2))
    row_sums = (probabilities * dprobabilities).sum(axis=-1, keepdims=True)
    score_grads = probabilities * (dprobabilities - row_sums) * xp.float32(1 / math.sqrt(HS))
    grads = (xp.matmul(score_grads, k), xp.matmul(score_grads.transpose(0, 1, 3, 2), q),
             xp.matmul(probabilities.transpose(0, 1, 3, 2), dy))
    dinp.reshape(B, T, 3, NH, HS)[...] = xp.stack(grads).transpose(1, 3, 0, 2, 4)


def encoder_backward(dwte, dwpe, dout, inp, B, T, C):
    """Token ids must be in [0, V), as for encoder_forward."""
    xp = array_module(dout)
    grads = dout.reshape(B, T, C)
    xp.add.at(dwte.reshape(-1, C), inp.reshape(B, T), grads)
    dwpe.reshape(-1, C)[:T] += grads.sum(axis=0)


def adamw_update(params, grads, m, v, N, learning_rate, beta1, beta2, eps, weight_decay, step):
    """In torch.optim.AdamW's own order: the decay first, m by lerp, the bias corrections folded into a step size
    and the denominator."""
    xp = array_module(grads)
    f32 = xp.float32
    g, p, m_, v_ = grads.reshape(N), params.reshape(N), m.reshape(N), v.reshape(N)
    p *= f32(1 - learning_rate * weight_decay)
    m_ += f32(1 - beta1) * (g - m_)
    v_ *= f32(beta2)
    v_ += f32(1 - beta2) * g * g
    denominator = xp.sqrt(v_) / f32(math.sqrt(1 - beta2**step)) + f32(eps)
    p -= f32(learning_rate / (1 - beta1**step)) * (m_ / denominator)


# --------------------------------------------------------------------------- Wav2Vec2's layers
# reference/cpu.py's conventions: channel-last (B, T, C) activations; parameters' gradients added to, activations'
# written.


def conv1d_columns(inp, B, T, C, K, stride, padding, groups, T_out):
    """im2col: (groups, B*T_out, K * C // groups), row (b, t) holding the window of output frame t, tap-major
    (k * C // groups + c), zeros where it reaches past inp's frames."""
    xp = array_module(inp)
    padded = xp.zeros((B, T + 2 * padding, C), dtype=inp.dtype)
    padded[:, padding:padding + T] = inp.reshape(B, T, C)
    taps = xp.arange(T_out).reshape(T_out, 1) * stride + xp.arange(K)
    windows = padded[:, taps].reshape(B * T_out, K, groups, C // groups)
    return windows.transpose(2, 0, 1, 3).reshape(groups, B * T_out, K * (C // groups))


def conv1d_filters(weight, C, OC, K, groups):
    """(groups, K * C // groups, OC // groups): weight (OC, C // groups, K) as the columns' matrix multiplier."""
    return weight.reshape(groups, OC // groups, C // groups, K).transpose(0, 3, 2, 1).reshape(groups, -1, OC // groups)


def conv1d_forward(out, inp, weight, bias, B, T, C, OC, K, stride, padding, groups, T_out):
    xp = array_module(inp)
    columns = conv1d_columns(inp, B, T, C, K, stride, padding, groups, T_out)
    product = xp.matmul(columns, conv1d_filters(weight, C, OC, K, groups))  # (groups, B*T_out, OC // groups)
    result = product.transpose(1, 0, 2).reshape(B, T_out, OC)
    if bias is not None:
        result += bias.reshape(OC)
    out.reshape(B, T_out, OC)[...] = result


def conv1d_backward(dinp, dweight, dbias, dout, inp, weight, B, T, C, OC, K, stride, padding, groups, T_out):
    xp = array_module(dout)
    G, Cg, OCg = groups, C // groups, OC // groups
    grads = dout.reshape(B * T_out, G, OCg).transpose(1, 0, 2)  # (G, B*T_out, OCg)
    columns = conv1d_columns(inp, B, T, C, K, stride, padding, G, T_out)
    gathered = dweight.reshape(G, OCg, Cg, K)
    product = xp.matmul(grads.transpose(0, 2, 1), columns).reshape(G, OCg, K, Cg).transpose(0, 1, 3, 2)
    xp.add(gathered, product, out=gathered)
    if dbias is not None:
        xp.add(dbias.reshape(OC), dout.reshape(B * T_out, OC).sum(axis=0), out=dbias.reshape(OC))
    if dinp is not None:
        dcolumns = xp.matmul(grads, conv1d_filters(weight, C, OC, K, G).transpose(0, 2, 1))  # (G, B*T_out, K*Cg)
        dwindows = dcolumns.reshape(G, B, T_out, K, Cg).transpose(1, 2, 3, 0, 4).reshape(B, T_out, K, C)
        dpadded = xp.zeros((B, T + 2 * padding, C), dtype=dout.dtype)
        for k in range(K):  # tap k of output frame t reads padded frame t * stride + k
            dpadded[:, k:k + stride * (T_out - 1) + 1:stride] += dwindows[:, :, k]
        dinp.reshape(B, T, C)[...] = dpadded[:, padding:padding + T]


def erfc(x):
    """erfc of a float32 array, in float32: CuPy's (cupyx.scipy.special, erfcf); NumPy has none, so there math's,
    correctly rounded to float32."""
    if array_module(x) is numpy:
        return numpy.frompyfunc(math.erfc, 1, 1)(x).astype(numpy.float32)
    from cupyx.scipy.special import erfc as cupy_erfc  # here: the CPU tests run where CuPy is not installed
    return cupy_erfc(x)


def normal_cdf(x):
    return array_module(x).float32(0.5) * erfc(x * numpy.float32(-1 / math.sqrt(2)))


def gelu_erf_forward(out, inp, N):
    x = inp.reshape(N)
    out.reshape(N)[...] = x * normal_cdf(x)


def gelu_erf_backward(dinp, inp, dout, N):
    xp = array_module(inp)
    x = inp.reshape(N)
    density = xp.float32(1 / math.sqrt(2 * math.pi)) * xp.exp(xp.float32(-0.5) * x * x)
    dinp.reshape(N)[...] = (normal_cdf(x) + x * density) * dout.reshape(N)


def _counted(xp, frames, B, T, C, G):
    """(B, T, 1, 1) whether each frame is among its utterance's counted ones, and (B, 1, 1, 1) each group's count
    of counted values."""
    counted = (xp.arange(T) < frames.reshape(B, 1)).reshape(B, T, 1, 1)
    return counted, (xp.minimum(frames, T) * (C // G)).astype(xp.float32).reshape(B, 1, 1, 1)


def group_norm_forward(out, mean, rstd, inp, weight, bias, frames, B, T, C, G):
    xp = array_module(inp)
    x = inp.reshape(B, T, G, C // G)
    counted, count = _counted(xp, frames, B, T, C, G)
    mu = xp.where(counted, x, xp.float32(0)).sum(axis=(1, 3), keepdims=True) / count
    centred = x - mu
    s = 1.0 / xp.sqrt(xp.where(counted, centred * centred, xp.float32(0)).sum(axis=(1, 3), keepdims=True) / count
                      + GROUP_NORM_EPS)
    out.reshape(B, T, C)[...] = (centred * s).reshape(B, T, C) * weight + bias
    mean.reshape(B, G)[...] = mu.reshape(B, G)
    rstd.reshape(B, G)[...] = s.reshape(B, G)


def group_norm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, frames, B, T, C, G):
    xp = array_module(inp)
    grads = dout.reshape(B, T, C)
    s = rstd.reshape(B, 1, G, 1)
    counted, count = _counted(xp, frames, B, T, C, G)
    normalised = (inp.reshape(B, T, G, C // G) - mean.reshape(B, 1, G, 1)) * s
    dbias.reshape(C)[...] += grads.sum(axis=(0, 1))
    dweight.reshape(C)[...] += (grads * normalised.reshape(B, T, C)).sum(axis=(0, 1))
    dnormalised = (grads * weight.reshape(C)).reshape(B, T, G, C // G)
    statistics_terms = (dnormalised.sum(axis=(1, 3), keepdims=True)
                        + normalised * (dnormalised * normalised).sum(axis=(1, 3), keepdims=True)) / count
    dinp.reshape(B, T, C)[...] = (s * (dnormalised - xp.where(counted, statistics_terms, xp.float32(0)))).reshape(
        B, T, C)


def weight_norm_forward(weight, g, v, OC, C, K):
    xp = array_module(v)
    directions = v.reshape(OC * C, K)
    norms = xp.sqrt((directions * directions).sum(axis=0))
    weight.reshape(OC * C, K)[...] = directions * (g.reshape(K) / norms)


def weight_norm_backward(dg, dv, dweight, g, v, OC, C, K):
    xp = array_module(v)
    directions, grads = v.reshape(OC * C, K), dweight.reshape(OC * C, K)
    norms = xp.sqrt((directions * directions).sum(axis=0))
    along = (grads * directions).sum(axis=0) / norms
    dg.reshape(K)[...] += along
    dv.reshape(OC * C, K)[...] += (g.reshape(K) / norms) * (grads - directions * (along / norms))


def bidirectional_attention_forward(out, att, inp, lengths, B, T, C, NH):
    xp = array_module(inp)
    HS = C // NH
    q, k, v = inp.reshape(B, T, 3, NH, HS).transpose(2, 0, 3, 1, 4)
    scores = (q @ k.transpose(0, 1, 3, 2)) * xp.float32(1 / math.sqrt(HS))
    real = xp.arange(T) < lengths.reshape(B, 1, 1, 1)
    scores = xp.where(real, scores, xp.float32(-xp.inf))
    exponents = xp.exp(scores - scores.max(axis=-1, keepdims=True))
    probabilities = exponents / exponents.sum(axis=-1, keepdims=True)
    att.reshape(B, NH, T, T)[...] = probabilities
    out.reshape(B, T, C)[...] = (probabilities @ v).transpose(0, 2, 1, 3).reshape(B, T, C)


def bidirectional_attention_backward(dinp, dout, inp, att, lengths, B, T, C, NH):
    HS = C // NH
    q, k, v = inp.reshape(B, T, 3, NH, HS).transpose(2, 0, 3, 1, 4)
    dy = dout.reshape(B, T, NH, HS).transpose(0, 2, 1, 3)
    p = att.reshape(B, NH, T, T)
    dp = dy @ v.transpose(0, 1, 3, 2)
    ds = p * (dp - (p * dp).sum(axis=-1, keepdims=True)) * numpy.float32(1 / math.sqrt(HS))  # 0 where p is, at padding
    grads = (ds @ k, ds.transpose(0, 1, 3, 2) @ q, p.transpose(0, 1, 3, 2) @ dy)  # each (B, NH, T, HS)
    dinp.reshape(B, T, 3, NH, HS)[...] = array_module(inp).stack(grads).transpose(1, 3, 0, 2, 4)


def _log_add(xp, *terms):
    """log(sum of exp(terms)) elementwise, -inf where every term is."""
    largest = terms[0]
    for term in terms[1:]:
        largest = xp.maximum(largest, term)
    finite = xp.where(xp.isfinite(largest), largest, xp.float32(0))
    total = sum(xp.exp(term - finite) for term in terms)
    with numpy.errstate(divide="ignore"):
        return xp.where(xp.isfinite(largest), finite + xp.log(total), largest)


def ctc_loss_forward_backward(dlogits, losses, logits, targets, input_lengths, target_lengths, B, T, V, S):
    """Every utterance at once, frame by frame; the states past an utterance's 2U + 1, and its frames past its
    length, are -inf."""
    xp = array_module(logits)
    neg_inf = xp.float32(-xp.inf)
    frames, counts = input_lengths.reshape(B, 1).astype(xp.int64), target_lengths.reshape(B, 1).astype(xp.int64)
    x = logits.reshape(B, T, V)
    real = (xp.arange(T) < frames)[..., None]                                   # (B, T, 1)
    x = xp.where(real, x, xp.float32(0))  # padded frames' logits are never used
    shifted = x - x.max(axis=-1, keepdims=True)
    lp = shifted - xp.log(xp.exp(shifted).sum(axis=-1, keepdims=True))        # (B, T, V)
    L = 2 * S + 1
    extended = xp.zeros((B, L), dtype=xp.int64)
    extended[:, 1::2] = targets.reshape(B, S)
    states = xp.arange(L)
    reachable = states < 2 * counts + 1                                         # (B, L)
    skips = xp.zeros((B, L), dtype=bool)
    skips[:, 2:] = (extended[:, 2:] != 0) & (extended[:, 2:] != extended[:, :-2])
    emissions = xp.take_along_axis(lp, xp.broadcast_to(extended[:, None, :], (B, T, L)), axis=2)  # (B, T, L)

    def shifted(row, n, outside=neg_inf):
        """row[:, s - n] at state s (n > 0: from earlier states; n < 0: from later ones), `outside` past either end."""
        fill = xp.full((B, abs(n)), outside)
        return xp.concatenate([fill, row[:, :-n]] if n > 0 else [row[:, -n:], fill], axis=1)

    alpha = xp.full((B, T, L), neg_inf, dtype=xp.float32)
    alpha[:, 0] = xp.where(reachable & (states <= 1), emissions[:, 0], neg_inf)
    for t in range(1, T):
        row = alpha[:, t - 1]
        alpha[:, t] = xp.where(reachable, _log_add(xp, row, shifted(row, 1), xp.where(skips, shifted(row, 2),
                                                                                      neg_inf))
                               + emissions[:, t], neg_inf)
    skips_back = shifted(skips, -2, outside=False)  # from s to s + 2
    beta = xp.full((B, T, L), neg_inf, dtype=xp.float32)
    start = xp.where(reachable & (states >= 2 * counts - 1), xp.float32(0), neg_inf)  # the last label, the last blank
    for t in reversed(range(T)):
        later = beta[:, t + 1] if t + 1 < T else xp.full((B, L), neg_inf, dtype=xp.float32)
        carried = _log_add(xp, later, shifted(later, -1), xp.where(skips_back, shifted(later, -2), neg_inf))
        value = xp.where((t == frames - 1), start, xp.where(t < frames - 1, carried, neg_inf)) + emissions[:, t]
        beta[:, t] = xp.where(reachable & (t < frames), value, neg_inf)

    last = xp.take_along_axis(alpha, xp.broadcast_to((frames - 1)[..., None], (B, 1, L)), axis=1)[:, 0]  # (B, L)
    log_likelihood = _log_add(xp, *(xp.where(states == 2 * counts - k, last, neg_inf).max(axis=1) for k in (0, 1)))
    with numpy.errstate(invalid="ignore"):  # an utterance no alignment fits: -inf - -inf, NaN as torch's
        occupancy = xp.exp(alpha + beta - emissions - log_likelihood[:, None, None])
    occupancy = xp.where(reachable[:, None, :] & real, occupancy, xp.float32(0))
    one_hot = (extended[..., None] == xp.arange(V)).astype(xp.float32)        # (B, L, V)
    dlogits.reshape(B, T, V)[...] = xp.where(real, xp.exp(lp) - occupancy @ one_hot, xp.float32(0))
    losses.reshape(B)[...] = -log_likelihood
