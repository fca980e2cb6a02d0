"""Beam search on the GPU: each beam's best candidates, then the search's bookkeeping for a step.

Beam search keeps K hypotheses (beams) per prompt. After each step's logits it
scores every (beam, token) pair by the beam's score plus log_softmax(logits)[token],
keeps the 2K best over the prompt's beams, sends the best K that do not end into the
next step, and files the ones that end (the end-of-text token, or the last position)
among the prompt's finished hypotheses, scored by length penalty. Done on the device
(generation.grape), a whole step runs without the host: the host only reads, every
few steps, whether the search is over.

    beam_candidates_forward(candidate_scores, candidate_tokens, logits, beam_scores, done, rows, V, stride, count)
    beam_update_forward(candidate_scores, candidate_tokens, beam_scores, finished_scores, finished_step,
                        finished_beam, finished_token, is_finished, improvable, parents, chosen, tokens, rows,
                        done, lengths, P, K, V, prompt_length, max_length, length_penalty, early_stopping,
                        end_of_text)

* beam_candidates_forward: each beam's row of logits (stride apart, the first V real)
  in chunks of CHUNK (32 larger ones past 32 CHUNK), a block each, so that a row's
  passes run on many SMs (one block a beam took 117 us for GPT-2's five beams; the
  chunks' times are in benchmarks/RESULTS.md). It computes log_softmax in
  the host's order of float32 operations, ((x - max) - log(sum exp(x - max))) + beam
  score, and keeps the `count` best (score, token), best first, lowest token on ties.
  Three launches: each chunk's max and sum of exp(x - its max) (in double); then, in
  every chunk, the row's max and sum from those (each chunk's sum rescaled to the
  row's max, the same numbers in the same order in every block, so equal logits
  score equal) and the chunk's `count` best (each thread keeps a sorted list of its
  own, the warps merge their lanes' lists, then the first warp merges the warps');
  then a warp a row merges the chunks' lists. `count` is 2K: at most K of the best
  end, so K always go on.
* beam_update_forward: one thread runs the bookkeeping of all P prompts, exactly as
  generation.beam_search does it on the host (transformers' rules: length_penalty,
  early_stopping True, False or "never" as 1, 0, 2), in the same float32 operations
  (the length penalty's power in double, as Python's).
  It keeps back-pointers (each new beam's parent beam and token, step by step, in
  parents and chosen) instead of whole sequences; generation.grape rebuilds the
  hypotheses from them at the end. rows[b] is the beam row b continues (the KV
  cache's reordering, kernels/kv_cache_reorder.py), tokens[b] its next input.
  done[0] holds 0 while the search goes on, then the final length: after that every
  kernel here returns at once, so steps queued past the end change nothing.

The state arrays are P * K long (improvable: P), the steps' parents and chosen
max_length - prompt_length steps of P * K; lengths[0] is the rows' cache length, the
step's position. The scores of beams that must not go on are -1e9 (NEGATIVE), as
on the host.
"""

import functools

import numpy as np

from kernel_runtime import CudaKernel, KernelArgumentError, ceil_div, check_array
from kernels.sampling import ROW_REDUCTIONS

BEAM_THREADS = 256    # a block of beam_candidates' passes, one chunk of a beam's row
CHUNK = 2048          # logits a chunk (up to 32 chunks): ROW_LOADS (kernels/sampling.py) a thread, loaded at once
MAX_BEAMS = 16        # per prompt: each thread of beam_candidates keeps 2 * MAX_BEAMS candidates at most
EARLY_STOPPING = {False: 0, True: 1, "never": 2}

BEAM_SOURCE = ROW_REDUCTIONS + r"""
#define NEGATIVE (-1e9f)
#define MAX_CANDIDATES (2 * MAX_BEAMS)

// The best `count` of up to 32 sorted lists, best first (lowest token on ties): lane l's list is read through
// entry(l, i, score, token), its i-th best; write(r, score, token) is called by lane 0 for the r-th best.
template <typename Entry, typename Write>
__device__ void merge_lists(int lists, int count, Entry entry, Write write) {
    int lane = threadIdx.x % 32, head = 0;  // lists are sorted, so each round takes the best head
    for (int r = 0; r < count; r++) {
        float score = MINUS_INFINITY;
        int token = NO_INDEX;
        if (lane < lists && head < count) entry(lane, head, score, token);
        int mine = token;
        warp_best(score, token);
        if (mine == token && token != NO_INDEX) head++;
        if (lane == 0) write(r, score, token);
    }
}

// A beam's row of V logits is split between `split` blocks (blockIdx.x); this block's chunk: [begin, end).
__device__ void chunk_of_row(int V, int split, int& begin, int& end) {
    int size = (V + split - 1) / split;
    begin = min(V, blockIdx.x * size);
    end = min(V, begin + size);
}

// First pass, grid (split, rows): each chunk's largest logit and the sum of expf(x - that largest), in double.
extern "C" __global__ void beam_chunk_sums_kernel(float* chunk_max, double* chunk_sums, const float* logits,
                                                  const int* done, int V, int stride, int split) {
    __shared__ float best_scores[32];
    __shared__ int best_indices[32];
    __shared__ double partial[32];
    if (*done) return;
    int row = blockIdx.y, begin, end;
    chunk_of_row(V, split, begin, end);
    const float* x = logits + (long long)row * stride + begin;
    float largest; int unused;
    row_best(x, end - begin, 1.0f, largest, unused, best_scores, best_indices);
    double local = 0.0;
    for_each_in_row(x, end - begin, [&](int j, float value) { local += expf(value - largest); });
    double total = block_sum(local, partial);
    if (threadIdx.x == 0) {
        chunk_max[row * split + blockIdx.x] = largest;
        chunk_sums[row * split + blockIdx.x] = total;
    }
}

// Second pass, grid (split, rows): the row's largest logit and log of its sum of exponentials from the chunks' (the
// same numbers, in the same order, in every block of the row, so equal logits score equal), then the chunk's
// `count` best log-probabilities plus the beam's score, best first, to chunk_scores and chunk_tokens.
extern "C" __global__ void beam_chunk_candidates_kernel(float* chunk_scores, int* chunk_tokens, const float* logits,
                                                        const float* beam_scores, const float* chunk_max,
                                                        const double* chunk_sums, const int* done, int V, int stride,
                                                        int split, int count) {
    __shared__ float warp_scores[BEAM_THREADS / 32][MAX_CANDIDATES];
    __shared__ int warp_tokens[BEAM_THREADS / 32][MAX_CANDIDATES];
    if (*done) return;
    int row = blockIdx.y, warp = threadIdx.x / 32, begin, end;
    chunk_of_row(V, split, begin, end);
    const float* x = logits + (long long)row * stride + begin;
    const float* maxima = chunk_max + row * split;
    const double* sums = chunk_sums + row * split;
    float largest = MINUS_INFINITY;
    for (int c = 0; c < split; c++) largest = fmaxf(largest, maxima[c]);
    double sum = 0.0;  // each chunk's sum rescaled from its own largest logit to the row's
    for (int c = 0; c < split; c++) sum += sums[c] * exp((double)maxima[c] - (double)largest);
    float log_sum = logf((float)sum);
    float beam_score = beam_scores[row];

    float own_scores[MAX_CANDIDATES];
    int own_tokens[MAX_CANDIDATES];
    for (int c = 0; c < count; c++) { own_scores[c] = MINUS_INFINITY; own_tokens[c] = NO_INDEX; }
    for_each_in_row(x, end - begin, [&](int i, float value) {
        int j = begin + i;
        float score = ((value - largest) - log_sum) + beam_score;  // the host's order of float32 operations
        if (!before(score, j, own_scores[count - 1], own_tokens[count - 1])) return;
        int at = count - 1;
        for (; at > 0 && before(score, j, own_scores[at - 1], own_tokens[at - 1]); at--) {
            own_scores[at] = own_scores[at - 1]; own_tokens[at] = own_tokens[at - 1];
        }
        own_scores[at] = score; own_tokens[at] = j;
    });
    merge_lists(32, count,  // the lanes' lists, each lane reading its own
                [&](int lane, int i, float& score, int& token) { score = own_scores[i]; token = own_tokens[i]; },
                [&](int r, float score, int token) { warp_scores[warp][r] = score; warp_tokens[warp][r] = token; });
    __syncthreads();
    if (warp == 0) {
        int at = (row * split + blockIdx.x) * count;
        merge_lists(blockDim.x / 32, count,
                    [&](int w, int i, float& score, int& token) {
                        score = warp_scores[w][i]; token = warp_tokens[w][i];
                    },
                    [&](int r, float score, int token) { chunk_scores[at + r] = score; chunk_tokens[at + r] = token; });
    }
}

// Last, a warp per row: the best `count` of the row's chunks' lists.
extern "C" __global__ void beam_merge_kernel(float* candidate_scores, int* candidate_tokens, const float* chunk_scores,
                                             const int* chunk_tokens, const int* done, int split, int count) {
    if (*done) return;
    int row = blockIdx.x;
    merge_lists(split, count,
                [&](int c, int i, float& score, int& token) {
                    int at = (row * split + c) * count + i;
                    score = chunk_scores[at]; token = chunk_tokens[at];
                },
                [&](int r, float score, int token) {
                    candidate_scores[row * count + r] = score; candidate_tokens[row * count + r] = token;
                });
}

// Beam search's step for all P prompts of K beams (one thread), after beam_candidates.
// State (device arrays, P * K unless said): beam_scores, finished_scores/_step/_beam/_token, is_finished,
// improvable (P); out: parents and chosen (step-major, max_new_tokens * P * K), tokens (the next
// step's input), rows (the cache's reorder), done (1).
extern "C" __global__ void beam_update_kernel(const float* candidate_scores, const int* candidate_tokens,
                                              float* beam_scores, float* finished_scores, int* finished_step,
                                              int* finished_beam, int* finished_token, int* is_finished,
                                              int* improvable, int* parents, int* chosen, int* tokens, int* rows,
                                              int* done, const int* lengths, int P, int K, int V,
                                              int prompt_length, int max_length, double length_penalty,
                                              int early_stopping, int end_of_text) {
    if (threadIdx.x != 0 || blockIdx.x != 0 || *done) return;
    int length = lengths[0], step = length - prompt_length, count = 2 * K;
    bool all_end = true, any_improvable = false, all_finished = true;
    for (int p = 0; p < P; p++) {
        int beam0 = p * K;
        float top_scores[MAX_CANDIDATES], going[MAX_CANDIDATES], candidates[MAX_CANDIDATES];
        int top_beams[MAX_CANDIDATES], top_tokens[MAX_CANDIDATES], heads[MAX_BEAMS];
        bool ends[MAX_CANDIDATES], taken[2 * MAX_CANDIDATES];
        for (int b = 0; b < K; b++) heads[b] = 0;
        for (int c = 0; c < count; c++) {  // merge the beams' sorted lists; ties: lower beam * V + token
            int best = -1; float best_score = MINUS_INFINITY; int best_flat = NO_INDEX;
            for (int b = 0; b < K; b++) {
                if (heads[b] >= count) continue;
                int at = (beam0 + b) * count + heads[b];
                int flat = b * V + candidate_tokens[at];
                if (best < 0 || before(candidate_scores[at], flat, best_score, best_flat)) {
                    best = b; best_score = candidate_scores[at]; best_flat = flat;
                }
            }
            top_scores[c] = best_score; top_beams[c] = best; top_tokens[c] = best_flat - best * V;
            heads[best]++;
            ends[c] = top_tokens[c] == end_of_text || length + 1 >= max_length;
            all_end = all_end && ends[c];
            going[c] = top_scores[c] + (ends[c] ? NEGATIVE : 0.0f);
            taken[c] = false;
        }
        for (int i = 0; i < K; i++) {  // the best K that go on become the beams
            int best = -1;
            for (int c = 0; c < count; c++) if (!taken[c] && (best < 0 || before(going[c], c, going[best], best))) best = c;
            taken[best] = true;
            beam_scores[beam0 + i] = going[best];
            rows[beam0 + i] = beam0 + top_beams[best];
            tokens[beam0 + i] = top_tokens[best];
            parents[(long long)step * P * K + beam0 + i] = top_beams[best];
            chosen[(long long)step * P * K + beam0 + i] = top_tokens[best];
        }
        bool was_all_finished = true;
        for (int i = 0; i < K; i++) was_all_finished = was_all_finished && is_finished[beam0 + i];
        bool closed = (was_all_finished && early_stopping == 1) || !improvable[p];
        float penalty = (float)pow((double)(step + 1), length_penalty);
        for (int c = 0; c < count; c++) {
            bool just_finished = ends[c] && c < K;
            candidates[c] = (top_scores[c] / penalty + (closed ? NEGATIVE : 0.0f)) + (just_finished ? 0.0f : NEGATIVE);
        }
        // the best K of the kept hypotheses (0..K-1) and the candidates (K..3K-1); ties: kept first
        float old_scores[MAX_BEAMS]; int old_step[MAX_BEAMS], old_beam[MAX_BEAMS], old_token[MAX_BEAMS], old_finished[MAX_BEAMS];
        for (int i = 0; i < K; i++) {
            old_scores[i] = finished_scores[beam0 + i]; old_step[i] = finished_step[beam0 + i];
            old_beam[i] = finished_beam[beam0 + i]; old_token[i] = finished_token[beam0 + i];
            old_finished[i] = is_finished[beam0 + i];
        }
        for (int c = 0; c < K + count; c++) taken[c] = false;
        bool now_all_finished = true;
        float worst = 0.0f;
        for (int i = 0; i < K; i++) {
            int best = -1; float best_score = MINUS_INFINITY;
            for (int c = 0; c < K + count; c++) {
                float score = c < K ? old_scores[c] : candidates[c - K];
                if (!taken[c] && (best < 0 || before(score, c, best_score, best))) { best = c; best_score = score; }
            }
            taken[best] = true;
            int at = beam0 + i;
            if (best < K) {
                finished_scores[at] = old_scores[best]; finished_step[at] = old_step[best];
                finished_beam[at] = old_beam[best]; finished_token[at] = old_token[best];
                is_finished[at] = old_finished[best];
            } else {
                int c = best - K;
                finished_scores[at] = candidates[c]; finished_step[at] = step;
                finished_beam[at] = top_beams[c]; finished_token[at] = top_tokens[c];
                is_finished[at] = ends[c] && c < K;
            }
            now_all_finished = now_all_finished && is_finished[at];
            worst = i == 0 ? finished_scores[at] : fminf(worst, finished_scores[at]);
        }
        int best_length = (early_stopping == 2 && length_penalty > 0.0) ? max_length - prompt_length
                                                                         : length + 1 - prompt_length;
        float best_running = beam_scores[beam0] / (float)pow((double)best_length, length_penalty);
        improvable[p] = improvable[p] && best_running > (now_all_finished ? worst : NEGATIVE);
        any_improvable = any_improvable || improvable[p];
        all_finished = all_finished && now_all_finished;
    }
    bool open_beam = !(all_finished && early_stopping == 1);
    if (!(any_improvable && open_beam && !all_end)) *done = length + 1;
}
"""

DEFINES = dict(MAX_BEAMS=MAX_BEAMS, BEAM_THREADS=BEAM_THREADS)
beam_update_kernel = CudaKernel(BEAM_SOURCE, "beam_update_kernel", defines=DEFINES)


@functools.cache
def candidate_kernels(source: str = BEAM_SOURCE) -> tuple[CudaKernel, CudaKernel, CudaKernel]:
    """beam_candidates_forward's three kernels (chunk sums, chunk candidates, merge), compiled from `source`."""
    return tuple(CudaKernel(source, name, defines=DEFINES)
                 for name in ("beam_chunk_sums_kernel", "beam_chunk_candidates_kernel", "beam_merge_kernel"))


@functools.cache
def _chunk_scratch(device: int, rows: int, split: int, count: int) -> tuple:
    """The chunks' maxima, sums and lists for `rows` beams of `split` chunks, made once per shape and device (the
    first call runs eagerly, before any CUDA graph captures the launches that use them)."""
    import cupy

    return (cupy.empty(rows * split, np.float32), cupy.empty(rows * split, np.float64),
            cupy.empty(rows * split * count, np.float32), cupy.empty(rows * split * count, np.int32))


def beam_candidates_forward(candidate_scores, candidate_tokens, logits, beam_scores, done, rows, V, stride, count):
    """Each of `rows` beams' `count` best (log-probability + beam score, token), best first."""
    check_array("beam_candidates_forward", "logits", logits, rows * stride)
    check_array("beam_candidates_forward", "beam_scores", beam_scores, rows)
    check_array("beam_candidates_forward", "candidate_scores", candidate_scores, rows * count)
    check_array("beam_candidates_forward", "candidate_tokens", candidate_tokens, rows * count, np.int32)
    check_array("beam_candidates_forward", "done", done, 1, np.int32)
    if not 1 <= count <= 2 * MAX_BEAMS or count > V or V > stride:
        raise KernelArgumentError(f"beam_candidates_forward: count={count} must be in 1..{2 * MAX_BEAMS} and at "
                                  f"most V={V}, and V at most stride={stride}")
    launch_candidates(candidate_kernels(), candidate_scores, candidate_tokens, logits, beam_scores, done, rows, V,
                      stride, count)


def launch_candidates(kernels, candidate_scores, candidate_tokens, logits, beam_scores, done, rows, V, stride, count):
    """`kernels` (candidate_kernels(), or those of another source): each beam's row in chunks of CHUNK logits, a
    block each, or in 32 larger ones past 32 CHUNK (the merge has a lane a chunk). Its scratch is shared by calls of
    one shape: one stream at a time."""
    import cupy

    sums, candidates, merge = kernels
    split = min(32, ceil_div(V, CHUNK))
    chunk_max, chunk_sums, chunk_scores, chunk_tokens = _chunk_scratch(cupy.cuda.Device().id, rows, split, count)
    sizes = (np.int32(V), np.int32(stride), np.int32(split))
    sums((split, rows), (BEAM_THREADS,), (chunk_max, chunk_sums, logits, done, *sizes))
    candidates((split, rows), (BEAM_THREADS,), (chunk_scores, chunk_tokens, logits, beam_scores, chunk_max, chunk_sums,
                                                done, *sizes, np.int32(count)))
    merge((rows,), (32,), (candidate_scores, candidate_tokens, chunk_scores, chunk_tokens, done, np.int32(split),
                           np.int32(count)))


def beam_update_forward(candidate_scores, candidate_tokens, beam_scores, finished_scores, finished_step,
                        finished_beam, finished_token, is_finished, improvable, parents, chosen, tokens, rows, done,
                        lengths, P, K, V, prompt_length, max_length, length_penalty, early_stopping, end_of_text):
    """Beam search's bookkeeping of one step for P prompts of K beams, after beam_candidates_forward."""
    if not 1 <= K <= MAX_BEAMS or P < 1 or not 0 <= prompt_length < max_length:
        raise KernelArgumentError(f"beam_update_forward: P={P} must be >= 1, K={K} in 1..{MAX_BEAMS}, and "
                                  f"prompt_length={prompt_length} below max_length={max_length}")
    if early_stopping not in EARLY_STOPPING:
        raise KernelArgumentError(f"beam_update_forward: early_stopping={early_stopping!r} must be True, False "
                                  f"or 'never'")
    rows_total, steps = P * K, max_length - prompt_length
    for name, array, size, dtype in (
            ("candidate_scores", candidate_scores, rows_total * 2 * K, np.float32),
            ("candidate_tokens", candidate_tokens, rows_total * 2 * K, np.int32),
            ("beam_scores", beam_scores, rows_total, np.float32),
            ("finished_scores", finished_scores, rows_total, np.float32),
            ("finished_step", finished_step, rows_total, np.int32),
            ("finished_beam", finished_beam, rows_total, np.int32),
            ("finished_token", finished_token, rows_total, np.int32),
            ("is_finished", is_finished, rows_total, np.int32),
            ("improvable", improvable, P, np.int32),
            ("parents", parents, steps * rows_total, np.int32),
            ("chosen", chosen, steps * rows_total, np.int32),
            ("tokens", tokens, rows_total, np.int32),
            ("rows", rows, rows_total, np.int32),
            ("done", done, 1, np.int32),
            ("lengths", lengths, 1, np.int32)):
        check_array("beam_update_forward", name, array, size, dtype)
    launch_update(beam_update_kernel, candidate_scores, candidate_tokens, beam_scores, finished_scores, finished_step,
                  finished_beam, finished_token, is_finished, improvable, parents, chosen, tokens, rows, done, lengths,
                  P, K, V, prompt_length, max_length, length_penalty, early_stopping, end_of_text)


def launch_update(kernel, *arrays_and_sizes):
    """`kernel` (beam_update_kernel, or one with its parameters) on beam_update_forward's arguments."""
    *arrays, P, K, V, prompt_length, max_length, length_penalty, early_stopping, end_of_text = arrays_and_sizes
    kernel((1,), (32,), (*arrays, np.int32(P), np.int32(K), np.int32(V), np.int32(prompt_length),
                         np.int32(max_length), np.float64(length_penalty), np.int32(EARLY_STOPPING[early_stopping]),
                         np.int32(end_of_text)))
