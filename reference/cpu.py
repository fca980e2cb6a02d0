"""NumPy reference for every kernel: the definition the kernels are checked against.

Same argument order as kernels/, with NumPy arrays. Every function computes in
float64 and writes into `out` (and the other output arrays) in whatever dtype they
have: pass float64 outputs to see the exact answer, float32 ones to get what a
float32 kernel should produce.
"""

import numpy as np

from gpt2kit.reference.numerics import draw_fractions, normal_cdf, softmax_rows, window_mask

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
    """The row's key and value appended to the cache (kv_cache_append_forward's T = 1), then one query per row
    attends to cache slots 0..min(lengths[b], max_T - 1), its own key included."""
    kv_cache_append_forward(k_cache, v_cache, qkv, lengths, B, 1, C, NH, max_T)
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


def kv_cache_lineage_forward(shared, starts, rows, lengths, done, B, group):
    """starts[b]: the leading positions row b holds in common with its parent rows[b] (shared (B, group), row b
    against each row of its group; lengths[b] when b is its own parent, 0 when the parent is in another group);
    then shared becomes the counts once every row is a copy of its parent. Nothing changes once done[0] is set."""
    if np.asarray(done).reshape(-1)[0]:
        return
    counts, parents, filled = shared.reshape(B, group), np.asarray(rows).reshape(B), np.asarray(lengths).reshape(B)
    before = counts.copy()
    for b in range(B):
        first = b // group * group
        a = int(parents[b]) - first
        inside = 0 <= a < group
        starts.reshape(B)[b] = filled[b] if a == b - first else before[b, a] if inside else 0
        for j in range(group):
            c = int(parents[first + j]) - first
            if not (inside and 0 <= c < group):
                counts[b, j] = 0
            elif a == c:  # one parent: both rows are its copy, every position it holds
                counts[b, j] = min(filled[b], filled[first + j])
            else:  # two parents: what they held in common
                counts[b, j] = before[first + a, c]


def kv_cache_reorder_forward(k_cache, v_cache, rows, starts, lengths, done, layers, B, NH, max_T, HS, group):
    """Row b of each cache (layers, B, NH, max_T, HS) becomes row rows[b] as it was before the call, in the slots
    that hold its positions from starts[b] below lengths[b] (position p in slot p % max_T, the last max_T of a
    longer row); nothing changes once done[0] is set."""
    if np.asarray(done).reshape(-1)[0]:
        return
    parents, firsts, filled = (np.asarray(a).reshape(B) for a in (rows, starts, lengths))
    for cache in (k_cache, v_cache):
        now = cache.reshape(layers, B, NH, max_T, HS)
        before = now.copy()
        for b in range(B):
            if parents[b] == b:
                continue
            for slot in range(min(int(filled[b]), max_T)):
                position = slot + (int(filled[b]) - 1 - slot) // max_T * max_T  # the latest token in the slot
                if position >= firsts[b]:
                    now[:, b, :, slot] = before[:, parents[b], :, slot]


# --------------------------------------------------------------------------- choosing the next token

def sample_forward(tokens, sequences, logits, lengths, B, V, stride, max_T, temperature, top_k, top_p, seed):
    """Each row's next token, from the first V of its logits (B, stride), into tokens[b] and, when lengths[b] <
    max_T, into sequences (B, max_T) at [b, lengths[b]].

    temperature 0: the largest logit, the lowest id on ties. Otherwise the kept tokens' weights (sampling_weights)
    and the row's random fraction f (reference.numerics.draw_fractions) pick the first kept token, in id order, whose running weight
    exceeds f times the kept weight.

    This is the definition in float64; the kernel computes each weight with float32 arithmetic (z - max z, expf)
    and counts them in 64-bit fixed point (2^-40 of the largest token's weight its unit). The two agree on every
    token except where f times the kept weight (or top-p's target) lands within ~1e-6 (relative) of a boundary
    between two tokens: about one draw in 10^4 where thousands of tokens share the weight, far fewer where a few
    dozen hold nearly all of it, as a language model's rows do (reference/specs/sampling.py estimates it for its
    cases)."""
    rows = np.asarray(logits).reshape(B, stride)[:, :V]
    positions = np.asarray(lengths).reshape(B)
    counters = (np.arange(B, dtype=np.uint64) << np.uint64(32)) | positions.astype(np.uint64)
    fractions = draw_fractions(np.asarray(seed, np.uint64).reshape(-1)[0], counters)
    for b in range(B):
        if temperature == 0:
            token = int(np.argmax(rows[b]))  # the first of equal largest
        else:
            running = np.cumsum(sampling_weights(rows[b], temperature, top_k, top_p))
            threshold = fractions[b] * running[-1]
            token = int(np.searchsorted(running, threshold, side="right"))  # the first whose running weight is past
        tokens.reshape(B)[b] = token
        if positions[b] < max_T:
            sequences.reshape(B, max_T)[b, positions[b]] = token


def sampling_weights(row, temperature, top_k, top_p) -> np.ndarray:
    """A row's unnormalised probabilities exp(z - max z) (float64), zero for the tokens top-k and top-p cut.

    z = logit / temperature is the float32 quotient: the kernel's own, where two logits may meet. top_k 0 (or None)
    or >= V, and top_p None or >= 1 (in float32, as the kernel gets it) cut nothing; ties at either cut are kept."""
    z = (np.asarray(row, np.float32) / np.float32(temperature)).astype(np.float64)
    k = min(top_k or z.size, z.size)
    kept = z >= np.sort(z)[z.size - k]  # the k-th largest z and every z equal to it
    weights = np.where(kept, np.exp(z - z.max()), 0.0)
    if top_p is not None and np.float32(top_p) < 1:
        # the cut: the weight of the likeliest token at which the weights so far reach top_p of the kept weight
        descending = np.sort(weights)[::-1]
        cumulative = np.cumsum(descending)
        cut = descending[np.searchsorted(cumulative, float(np.float32(top_p)) * cumulative[-1])]
        weights = np.where(weights >= cut, weights, 0.0)
    return weights


# --------------------------------------------------------------------------- beam search


def beam_candidates_forward(candidate_scores, candidate_tokens, logits, beam_scores, done, rows, V, stride, count):
    """Each beam's `count` best log_softmax(logits[row, :V]) + beam_scores[row], best first; nothing is written once
    done[0] is set. The exact scores are rounded to the float32 numbers the host ranks, lowest token on ties: a beam
    at -1e9 has every candidate tie there, since float32 holds no log-probability beside -1e9 (its spacing is 64)."""
    if np.asarray(done).reshape(-1)[0]:
        return
    x = exact(logits).reshape(rows, stride)[:, :V]
    shifted = x - x.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    scores = (log_probs + exact(beam_scores).reshape(rows, 1)).astype(np.float32)
    best = np.argsort(-scores, axis=1, kind="stable")[:, :count]
    candidate_scores.reshape(rows, count)[...] = np.take_along_axis(scores, best, axis=1)
    candidate_tokens.reshape(rows, count)[...] = best


def beam_update_forward(candidate_scores, candidate_tokens, beam_scores, finished_scores, finished_step, finished_beam,
                        finished_token, is_finished, improvable, parents, chosen, tokens, rows, done, lengths, P, K, V,
                        prompt_length, max_length, length_penalty, early_stopping, end_of_text):
    """One step of beam search's bookkeeping, prompt by prompt, by generation.beam_search's rules (transformers'):
    the 2K best continuations of the prompt's beams; the best K that do not end go on; those of the best K that
    end are hypotheses, scored by length penalty, and the best K of them and the kept ones are kept; a prompt
    whose best beam can no longer beat its worst hypothesis stops improving; the search is done when no prompt
    improves, when early_stopping is True and every prompt has K hypotheses, or when every candidate ends.

    Its outputs are decisions, so its scores are not float64's: every score is computed in the float32 operations
    the host (and the kernel) makes, so that every comparison comes out the same."""
    if np.asarray(done).reshape(-1)[0]:
        return
    negative, zero = np.float32(-1e9), np.float32(0)
    length = int(np.asarray(lengths).reshape(-1)[0])
    step, power = length - prompt_length, float(length_penalty)
    penalty = np.float32(float(step + 1) ** power)  # the generated length of the hypotheses that end now
    best_length = max_length - prompt_length if early_stopping == "never" and power > 0 else step + 1
    best_penalty = np.float32(float(best_length) ** power)  # the best a running beam's length can do
    scores = np.asarray(candidate_scores, np.float32).reshape(P, K, 2 * K)
    token_ids = np.asarray(candidate_tokens).reshape(P, K, 2 * K)
    parents, chosen = parents.reshape(-1, P * K), chosen.reshape(-1, P * K)
    all_end, any_improvable, all_finished = True, False, True
    for p in range(P):
        first = p * K
        # the 2K best (score, beam, token) of the prompt, best first; ties: the lower beam * V + token first
        top = sorted(((scores[p, b, c], b, int(token_ids[p, b, c])) for b in range(K) for c in range(2 * K)),
                     key=lambda candidate: (-candidate[0], candidate[1] * V + candidate[2]))[:2 * K]
        ends = [token == end_of_text or length + 1 >= max_length for _, _, token in top]
        going = [score + (negative if end else zero) for (score, _, _), end in zip(top, ends)]
        going_on = sorted(range(2 * K), key=lambda c: -going[c])[:K]  # stable: ties in top's order
        for i, c in enumerate(going_on):
            _, beam, token = top[c]
            beam_scores[first + i], rows[first + i], tokens[first + i] = going[c], first + beam, token
            parents[step, first + i], chosen[step, first + i] = beam, token
        best_running = going[going_on[0]] / best_penalty

        # a prompt closed (early stopping with K hypotheses, or no longer improvable) takes no new hypotheses
        closed = (all(is_finished[first:first + K]) and early_stopping is True) or not improvable[p]
        kept = [(np.float32(finished_scores[first + i]), int(finished_step[first + i]), int(finished_beam[first + i]),
                 int(finished_token[first + i]), bool(is_finished[first + i])) for i in range(K)]
        new = []
        for c, ((score, beam, token), end) in enumerate(zip(top, ends)):
            just_finished = end and c < K  # only the best K may become hypotheses
            hypothesis = (score / penalty + (negative if closed else zero)) + (zero if just_finished else negative)
            new.append((hypothesis, step, beam, token, just_finished))
        best = sorted(kept + new, key=lambda h: -h[0])[:K]  # stable: on ties the kept ones first
        for i, hypothesis in enumerate(best):
            (finished_scores[first + i], finished_step[first + i], finished_beam[first + i],
             finished_token[first + i], is_finished[first + i]) = hypothesis

        every_finished = all(h[4] for h in best)
        worst = min(h[0] for h in best) if every_finished else negative
        improvable[p] = bool(improvable[p]) and best_running > worst
        all_end, any_improvable = all_end and all(ends), any_improvable or bool(improvable[p])
        all_finished = all_finished and every_finished
    open_beam = not (all_finished and early_stopping is True)
    if not (any_improvable and open_beam and not all_end):
        done.reshape(-1)[0] = length + 1


# --------------------------------------------------------------------------- training: the backward passes
# As in llm.c: a parameter's gradient is added to (a training step zeroes them first; GPT-2's tied wte gets both
# the LM head's and the encoder's share); an activation's gradient is written, except layernorm_backward's dinp,
# which adds, since the residual stream's gradient is the sum of its branches'.


def encoder_backward(dwte, dwpe, dout, inp, B, T, C):
    """dwte[inp[b, t]] += dout[b, t] (a token repeated in the batch gathers every one), dwpe[t] += sum_b dout[b, t]."""
    grads = exact(dout).reshape(B, T, C)
    np.add.at(dwte.reshape(-1, C), np.asarray(inp).reshape(B, T), grads)
    dwpe.reshape(-1, C)[:T] += grads.sum(axis=0)


def layernorm_backward(dinp, dweight, dbias, scratch, dout, inp, weight, mean, rstd, B, T, C):
    """From the forward pass's saved mean and rstd (B, T): dinp += (adds), dweight += and dbias +=; scratch is
    the kernel's (its blocks' partial sums of dweight and dbias), unused here."""
    grads = exact(dout).reshape(B, T, C)
    rstd_column = exact(rstd).reshape(B, T, 1)
    normalized = (exact(inp).reshape(B, T, C) - exact(mean).reshape(B, T, 1)) * rstd_column
    dbias.reshape(C)[...] += grads.sum(axis=(0, 1))
    dweight.reshape(C)[...] += (grads * normalized).sum(axis=(0, 1))
    dnormalized = grads * exact(weight)
    dinp.reshape(B, T, C)[...] += rstd_column * (dnormalized - dnormalized.mean(axis=-1, keepdims=True)
                                                 - normalized * (dnormalized * normalized).mean(axis=-1, keepdims=True))


def matmul_backward(dinp, dweight, dbias, dout, inp, weight, B, T, C, OC):
    """out = inp @ weight.T + bias: dinp = dout @ weight (written), dweight += dout.T @ inp, dbias += its rows' sum
    (None: no bias)."""
    grads = exact(dout).reshape(B * T, OC)
    dinp.reshape(B * T, C)[...] = grads @ exact(weight).reshape(OC, C)
    dweight.reshape(OC, C)[...] += grads.T @ exact(inp).reshape(B * T, C)
    if dbias is not None:
        dbias.reshape(OC)[...] += grads.sum(axis=0)


def attention_backward(dinp, dscores, dout, inp, att, B, T, C, NH):
    """Causal attention's dinp (B, T, 3C) for q, k and v (written), from its saved probabilities att (B, NH, T, T),
    whose entries above the diagonal are never read; dscores is scratch this version does not need."""
    probabilities = np.where(np.tril(np.ones((T, T), dtype=bool)), exact(att).reshape(B, NH, T, T), 0.0)
    _attention_input_gradients(dinp, dout, inp, probabilities, B, T, C, NH)


def _attention_input_gradients(dinp, dout, inp, probabilities, B, T, C, NH):
    """dinp (B, T, 3C) for q, k and v (written) of attention with these probabilities (B, NH, T, T), 0 where masked."""
    HS = C // NH
    qkv = exact(inp).reshape(B, T, 3, NH, HS)
    q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))          # (B, NH, T, HS)
    dy = exact(dout).reshape(B, T, NH, HS).transpose(0, 2, 1, 3)
    dprobabilities = dy @ v.transpose(0, 1, 3, 2)
    score_grads = probabilities * (dprobabilities - (dprobabilities * probabilities).sum(axis=-1, keepdims=True))
    score_grads /= np.sqrt(HS)  # masked entries have probability 0, so their gradient is 0 too
    grads = np.stack([score_grads @ k, score_grads.transpose(0, 1, 3, 2) @ q, probabilities.transpose(0, 1, 3, 2) @ dy])
    dinp.reshape(B, T, 3, NH, HS)[...] = grads.transpose(1, 3, 0, 2, 4)


def residual_backward(dinp1, dinp2, dout, N):
    """dinp1 += dout and dinp2 += dout: out = inp1 + inp2 hands its gradient to both."""
    grads = exact(dout).reshape(N)
    dinp1.reshape(N)[...] += grads
    dinp2.reshape(N)[...] += grads


def gelu_backward(dinp, inp, dout, N):
    """dinp = gelu'(inp) * dout (written), for the tanh form."""
    x, grads = exact(inp).reshape(N), exact(dout).reshape(N)
    inner = np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)
    tanh = np.tanh(inner)
    slope = 0.5 * (1.0 + tanh) + 0.5 * x * (1.0 - tanh**2) * np.sqrt(2.0 / np.pi) * (1.0 + 3 * 0.044715 * x**2)
    dinp.reshape(N)[...] = slope * grads


def cross_entropy_forward_backward(dlogits, losses, logits, targets, B, T, V, Vp):
    """losses (B, T) = -log softmax(logits[b, t, :V])[targets[b, t]], and dlogits (B, T, Vp) the gradient of their
    mean: (softmax - one_hot(target)) / (B * T), zero in the padding columns V..Vp-1 (written)."""
    scores = exact(logits).reshape(B, T, Vp)[..., :V]
    log_sum = np.log(np.exp(scores - scores.max(axis=-1, keepdims=True)).sum(axis=-1)) + scores.max(axis=-1)
    chosen = np.asarray(targets).reshape(B, T)
    losses.reshape(B, T)[...] = log_sum - np.take_along_axis(scores, chosen[..., None], axis=-1)[..., 0]
    grads = np.exp(scores - log_sum[..., None])
    np.put_along_axis(grads, chosen[..., None], np.take_along_axis(grads, chosen[..., None], axis=-1) - 1, axis=-1)
    dlogits.reshape(B, T, Vp)[...] = 0.0
    dlogits.reshape(B, T, Vp)[..., :V] = grads / (B * T)


def adamw_update(params, grads, m, v, N, learning_rate, beta1, beta2, eps, weight_decay, step):
    """One step of torch.optim.AdamW (step counts from 1): m and v updated in place, then params."""
    g = exact(grads).reshape(N)
    m.reshape(N)[...] = beta1 * exact(m).reshape(N) + (1 - beta1) * g
    v.reshape(N)[...] = beta2 * exact(v).reshape(N) + (1 - beta2) * g * g
    m_hat = exact(m).reshape(N) / (1 - beta1**step)
    v_hat = exact(v).reshape(N) / (1 - beta2**step)
    decayed = exact(params).reshape(N) * (1 - learning_rate * weight_decay)
    params.reshape(N)[...] = decayed - learning_rate * m_hat / (np.sqrt(v_hat) + eps)


# --------------------------------------------------------------------------- Wav2Vec2's layers (forward and backward)
# Activations are channel-last (B, T, C), like the transformer's, where PyTorch's convolutions and group norm hold
# (B, C, T): a frame's channels are contiguous, so the feature encoder's output feeds the transformer's matmuls as
# it is. Weights are as PyTorch stores them: a convolution's (OC, C // groups, K), weight norm's g (1, 1, K).
# Gradients follow the training section: parameters' added to, activations' written.

GROUP_NORM_EPS = 1e-5  # torch.nn.GroupNorm's default, which Wav2Vec2 keeps
CTC_BLANK = 0          # Wav2Vec2's pad_token_id, the blank of its CTC loss


def _conv_taps(T_out, K, stride):
    """(T_out, K): the frame that tap k of output frame t reads, t * stride + k, in the input padded on both sides."""
    return np.arange(T_out)[:, None] * stride + np.arange(K)


def _conv_windows(inp, B, T, C, K, stride, padding, groups, T_out):
    """(B, T_out, K, groups, C // groups): the input frame t * stride + k - padding that tap k of output frame t
    reads, zero outside [0, T)."""
    padded = np.pad(exact(inp).reshape(B, T, C), ((0, 0), (padding, padding), (0, 0)))
    return padded[:, _conv_taps(T_out, K, stride)].reshape(B, T_out, K, groups, C // groups)


def conv1d_forward(out, inp, weight, bias, B, T, C, OC, K, stride, padding, groups, T_out):
    """torch's conv1d on channel-last frames: out (B, T_out, OC)[b, t, o] = bias[o] + the sum over k and over the
    channels c of o's group of inp (B, T, C)[b, t * stride + k - padding, c] * weight (OC, C // groups, K)[o, c % (C //
    groups), k], zero padded; bias None: none. T_out at most (T + 2 padding - K) // stride + 1: fewer drop the last
    frames."""
    windows = _conv_windows(inp, B, T, C, K, stride, padding, groups, T_out)
    kernels = exact(weight).reshape(groups, OC // groups, C // groups, K)
    product = np.einsum("btkgc,gock->btgo", windows, kernels, optimize=True).reshape(B, T_out, OC)
    if bias is not None:
        product += exact(bias)
    out.reshape(B, T_out, OC)[...] = product


def conv1d_backward(dinp, dweight, dbias, dout, inp, weight, B, T, C, OC, K, stride, padding, groups, T_out):
    """conv1d_forward's gradients: dinp (written; None: not wanted, as for the audio), dweight += and dbias +=
    (None: no bias)."""
    G = groups
    grads = exact(dout).reshape(B, T_out, G, OC // G)
    windows = _conv_windows(inp, B, T, C, K, stride, padding, G, T_out)
    dweight.reshape(G, OC // G, C // G, K)[...] += np.einsum("btgo,btkgc->gock", grads, windows, optimize=True)
    if dbias is not None:
        dbias.reshape(OC)[...] += grads.sum(axis=(0, 1)).reshape(OC)
    if dinp is not None:
        kernels = exact(weight).reshape(G, OC // G, C // G, K)
        dwindows = np.einsum("btgo,gock->btkgc", grads, kernels, optimize=True).reshape(B, T_out, K, C)
        dpadded = np.zeros((B, T + 2 * padding, C))
        # a frame that several taps read (K > stride) gathers every one's gradient
        np.add.at(dpadded, (slice(None), _conv_taps(T_out, K, stride)), dwindows)
        dinp.reshape(B, T, C)[...] = dpadded[:, padding:padding + T]


def group_norm_forward(out, mean, rstd, inp, weight, bias, frames, B, T, C, G):
    """torch.nn.GroupNorm on channel-last frames, its statistics from each utterance's first frames[b] frames: each
    (b, group) of C // G channels normalised by the mean and biased variance of those frames' values, at every frame;
    out = normalised * weight + bias per channel; mean and rstd (B, G) saved. frames[b] = T is torch's GroupNorm."""
    x = exact(inp).reshape(B, T, G, C // G)
    mu, s = np.zeros((B, 1, G, 1)), np.zeros((B, 1, G, 1))
    for b, counted in enumerate(np.minimum(np.asarray(frames).reshape(B), T)):
        mu[b] = x[b, :counted].mean(axis=(0, 2), keepdims=True)
        s[b] = 1.0 / np.sqrt(((x[b, :counted] - mu[b]) ** 2).mean(axis=(0, 2), keepdims=True) + GROUP_NORM_EPS)
    out.reshape(B, T, C)[...] = ((x - mu) * s).reshape(B, T, C) * exact(weight) + exact(bias)
    mean.reshape(B, G)[...] = mu.reshape(B, G)
    rstd.reshape(B, G)[...] = s.reshape(B, G)


def group_norm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, frames, B, T, C, G):
    """From the forward pass's saved mean and rstd (B, G): dinp (written), dweight += and dbias +=. Every frame's
    output depends on the statistics, which the first frames[b] make: the statistics' share of the gradient is a sum
    over every frame, passed back to the counted ones."""
    grads = exact(dout).reshape(B, T, C)
    s = exact(rstd).reshape(B, 1, G, 1)
    normalised = (exact(inp).reshape(B, T, G, C // G) - exact(mean).reshape(B, 1, G, 1)) * s
    dbias.reshape(C)[...] += grads.sum(axis=(0, 1))
    dweight.reshape(C)[...] += (grads * normalised.reshape(B, T, C)).sum(axis=(0, 1))
    dnormalised = (grads * exact(weight)).reshape(B, T, G, C // G)
    counted = np.minimum(np.asarray(frames).reshape(B), T)
    count = (counted * (C // G)).reshape(B, 1, 1, 1)
    through_statistics = (dnormalised.sum(axis=(1, 3), keepdims=True)
                          + normalised * (dnormalised * normalised).sum(axis=(1, 3), keepdims=True)) / count
    through_statistics *= (np.arange(T) < counted[:, None]).reshape(B, T, 1, 1)
    dinp.reshape(B, T, C)[...] = (s * (dnormalised - through_statistics)).reshape(B, T, C)


def gelu_erf_forward(out, inp, N):
    """The exact GELU, x * Phi(x) (torch's default, transformers' "gelu"), where gelu_forward is the tanh form."""
    x = exact(inp).reshape(N)
    out.reshape(N)[...] = x * normal_cdf(x)


def gelu_erf_backward(dinp, inp, dout, N):
    """dinp = (Phi(x) + x * phi(x)) * dout (written), phi the standard normal density."""
    x = exact(inp).reshape(N)
    density = np.exp(-0.5 * x**2) / np.sqrt(2.0 * np.pi)
    dinp.reshape(N)[...] = (normal_cdf(x) + x * density) * exact(dout).reshape(N)


def bidirectional_attention_forward(out, att, inp, lengths, B, T, C, NH):
    """Multi-head attention of inp (B, T, 3C) (q, k, v as attention_forward's) in which every query, padded ones too,
    attends to every key at positions < lengths[b] (>= 1); att (B, NH, T, T) the probabilities, 0 at padded keys."""
    HS = C // NH
    qkv = exact(inp).reshape(B, T, 3, NH, HS)
    q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))  # (B, NH, T, HS)
    valid_keys = np.arange(T) < np.asarray(lengths).reshape(B, 1, 1, 1)
    probabilities = softmax_rows(np.where(valid_keys, q @ k.transpose(0, 1, 3, 2) / np.sqrt(HS), -np.inf))
    att.reshape(B, NH, T, T)[...] = probabilities
    out.reshape(B, T, C)[...] = (probabilities @ v).transpose(0, 2, 1, 3).reshape(B, T, C)


def bidirectional_attention_backward(dinp, dout, inp, att, lengths, B, T, C, NH):
    """dinp (B, T, 3C) for q, k and v (written), from the saved probabilities att (B, NH, T, T), whose zeros at
    padded keys already carry the mask (lengths is there for a kernel that skips them)."""
    _attention_input_gradients(dinp, dout, inp, exact(att).reshape(B, NH, T, T), B, T, C, NH)


def _log_softmax(x):
    """log softmax over the last axis, the largest value subtracted first."""
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def _ctc_log_alpha(log_probs, extended):
    """CTC's forward variables in log space (T, L): alpha[t, s], the probability of the frames 0..t under every
    alignment that starts at extended[0] or extended[1] and is at extended[s] at frame t."""
    T, L = log_probs.shape[0], extended.size
    emissions = log_probs[:, extended]
    skips = np.zeros(L, dtype=bool)  # a blank may be skipped only between two different labels
    skips[2:] = (extended[2:] != CTC_BLANK) & (extended[2:] != extended[:-2])
    alpha = np.full((T, L), -np.inf)
    alpha[0, :2] = emissions[0, :2]
    for t in range(1, T):
        before = np.concatenate([[-np.inf, -np.inf], alpha[t - 1]])  # before[s + 2] = alpha[t - 1, s]
        stay, advance, skip = before[2:], before[1:-1], np.where(skips, before[:-2], -np.inf)
        alpha[t] = np.logaddexp(np.logaddexp(stay, advance), skip) + emissions[t]
    return alpha


def _ctc_utterance(logits, labels):
    """One utterance's CTC loss -log p(labels | logits (T, V)) and its gradient with respect to the logits."""
    log_probs = _log_softmax(logits)
    extended = np.full(2 * labels.size + 1, CTC_BLANK)  # a blank before, between and after the labels
    extended[1::2] = labels
    alpha = _ctc_log_alpha(log_probs, extended)
    beta = _ctc_log_alpha(log_probs[::-1], extended[::-1])[::-1, ::-1]  # the same recursion, from the end
    log_likelihood = np.logaddexp.reduce(alpha[-1, -2:])  # ending on the last label or the blank after it
    if log_likelihood == -np.inf:  # more labels (and repeats) than frames: torch's gradient is NaN there too
        return np.inf, np.full(logits.shape, np.nan)
    # the posterior of each alignment state at each frame (alpha and beta both count the frame's emission)
    occupancy = np.exp(alpha + beta - log_probs[:, extended] - log_likelihood)
    return -log_likelihood, np.exp(log_probs) - occupancy @ np.eye(logits.shape[1])[extended]


def ctc_loss_forward_backward(dlogits, losses, logits, targets, input_lengths, target_lengths, B, T, V, S):
    """torch's ctc_loss, blank 0, with the log-softmax over V inside: losses (B,) -log p(targets[b, :target_lengths[b]]
    | logits (B, T, V)[b, :input_lengths[b]]) (+inf when no alignment fits), targets (B, S) never the blank,
    input_lengths >= 1; dlogits the gradient of their sum (written), 0 at frames t >= input_lengths[b], NaN for an
    utterance whose loss is +inf."""
    scores, labels = exact(logits).reshape(B, T, V), np.asarray(targets).reshape(B, S)
    frames, counts = np.asarray(input_lengths).reshape(B), np.asarray(target_lengths).reshape(B)
    dlogits.reshape(B, T, V)[...] = 0.0
    for b in range(B):
        loss, grads = _ctc_utterance(scores[b, :frames[b]], labels[b, :counts[b]])
        losses.reshape(B)[b] = loss
        dlogits.reshape(B, T, V)[b, :frames[b]] = grads


def weight_norm_forward(weight, g, v, OC, C, K):
    """torch's weight_norm with dim=2 (Wav2Vec2's positional convolution): weight (OC, C, K)[:, :, k] =
    g (1, 1, K)[k] * v[:, :, k] / ||v[:, :, k]||, the norm over OC and C (the convolution's channels per group)."""
    directions = exact(v).reshape(OC, C, K)
    weight.reshape(OC, C, K)[...] = exact(g).reshape(K) * directions / np.sqrt((directions**2).sum(axis=(0, 1)))


def weight_norm_backward(dg, dv, dweight, g, v, OC, C, K):
    """weight_norm_forward's gradients from dweight (OC, C, K): dg += and dv +=; a direction's gradient is dweight's
    part orthogonal to v[:, :, k], scaled by g[k] / ||v[:, :, k]||."""
    directions, grads = exact(v).reshape(OC, C, K), exact(dweight).reshape(OC, C, K)
    norms = np.sqrt((directions**2).sum(axis=(0, 1)))
    along = (grads * directions).sum(axis=(0, 1)) / norms  # dweight's component along each unit direction
    dg.reshape(K)[...] += along
    dv.reshape(OC, C, K)[...] += exact(g).reshape(K) / norms * (grads - directions * along / norms)
