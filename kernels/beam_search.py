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
  in chunks of CHUNK, a block each, so that a row's passes run on many SMs (one block
  a beam took 117 us for GPT-2's five beams). It computes log_softmax in the host's
  order of float32 operations, ((x - max) - log(sum exp(x - max))) + beam score, and
  keeps the `count` best (score, token), best first, lowest token on ties. Its threads
  meet only in global memory, as kernels/sampling.py's do (ROW_PASSES: a block's
  threads combine through words the block owns, the last block of a row to finish
  combines the blocks' partials). Two launches:
  1. each chunk's largest logit c and sum of exp(x - c), each term in 64-bit fixed
     point (so the sum does not depend on the order of adds); the last block takes
     the row's largest and log-sum from those, each chunk's sum rescaled to the row's
     largest in double and added in a fixed order: the same numbers in the same order
     for every logit, so equal logits score equal;
  2. every candidate's score, as ranked(order key of the score, token): one number per
     candidate, larger for the better one, ties broken by token. The row's `count`
     best are shortlisted as sampling's top-k cut is (shortlist_block, then
     rank_shortlists in the last block): a few dozen, each counting the better ones for
     its place.
  `count` is 2K: at most K of the best end, so K always go on. The scratch (the rows'
  states, the blocks' partials, tickets, exchanges and shortlists) is made once per
  shape and kept; each call zeroes the rows' states first and writes the rest before
  reading it.
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

from gpt2kit.kernel_runtime import CudaKernel, KernelArgumentError, ceil_div, check_array
from gpt2kit.kernels.sampling import CHUNK, MAX_V, ROW_DEFINES, ROW_PASSES, THREADS, row_scratch

MAX_BEAMS = 16        # per prompt: count, 2 * MAX_BEAMS at most, is at most THREADS
BEAM_WORDS = 16       # a Beam, in 64-bit words: rounded up to a 128-byte cache line
EARLY_STOPPING = {False: 0, True: 1, "never": 2}

BEAM_SOURCE = ROW_PASSES + r"""
#define NEGATIVE (-1e9f)
#define MINUS_INFINITY __int_as_float(0xff800000)
#define NO_INDEX 0x7fffffff
#define MAX_CANDIDATES (2 * MAX_BEAMS)
#define CHUNK_SUM_UNITS ((float)(1ull << 63) / CHUNK)  // a term's largest, 1: a chunk's CHUNK terms fit 64 bits

// (score a, index ai) comes before (b, bi): higher score, then lower index, as a stable sort
__device__ bool before(float a, int ai, float b, int bi) { return a > b || (a == b && ai < bi); }

// A beam's scratch across beam_candidates' two launches, on a cache line of its own, zero at the call's start
// (launch_candidates's row_scratch holds BEAM_WORDS words a beam).
struct __align__(128) Beam {
    float largest;      // the row's largest logit
    float log_sum;      // log of the sum of exp(x - largest)
    unsigned arrived;   // the row's blocks done with this launch; zero between launches
    unsigned entered;   // the row's finalists so far
};
static_assert(sizeof(Beam) == BEAM_WORDS * 8, "beam_candidates_forward's scratch is laid out so");

// The launches' common arguments: blockIdx.y the beam, blockIdx.x its chunk; a block's two partial words, ticket and
// exchange
#define BEAM_ARGUMENTS Beam* beams, u64* partials, unsigned* tickets, u64* exchanges, const float* logits, \
                       const int* done, int V, int stride
#define BEAM_SETUP                      \
    if (*done) return;                  \
    Beam& beam = beams[blockIdx.y];     \
    BLOCK_SETUP;                        \
    const float* x = logits + (long long)blockIdx.y * stride

// First: each chunk's largest logit c and sum of expf(x - c) (each term in fixed point: the sum does not depend on
// the order of adds); then the row's largest, and the log of its sum: each chunk's rescaled to the row's largest in
// double, added in an order fixed by the number of chunks (the same numbers in the same order for every logit of the
// row, so equal logits score equal, and every call alike).
extern "C" __global__ void __launch_bounds__(THREADS) beam_stats_kernel(BEAM_ARGUMENTS) {
    BEAM_SETUP;
    unsigned own = 0;
    for_each_own(x, V, [&](int u, int j, float value) { own = larger(own, order_key(value)); });
    float largest = from_order_key((unsigned)block_combine((u64)own, exchange, larger<u64>));
    u64 sum = 0;
    for_each_own(x, V, [&](int u, int j, float value) {
        sum += __float2ull_rn(expf(value - largest) * CHUNK_SUM_UNITS);
    });
    sum = block_combine(sum, exchange, plus<u64>);
    if (threadIdx.x == 0) {
        own_partials[0] = order_key(largest);
        own_partials[1] = sum;
    }
    if (!last_of_row(&beam.arrived, ticket)) return;
    largest = from_order_key((unsigned)combine_partials(row_partials, 2, 0, exchange, larger<u64>));
    double rescaled = 0.0;
    if (threadIdx.x < gridDim.x) {
        float chunk_largest = from_order_key((unsigned)row_partials[2 * threadIdx.x]);
        double chunk_sum = (double)row_partials[2 * threadIdx.x + 1] / CHUNK_SUM_UNITS;
        rescaled = chunk_sum * exp((double)chunk_largest - (double)largest);
    }
    double total = block_combine(rescaled, exchange, plus<double>);
    if (threadIdx.x == 0) {
        beam.largest = largest;
        beam.log_sum = logf((float)total);
    }
}

// Then: every logit's candidate, its log-probability plus the beam's score in the host's order of float32 operations,
// ranked; the blocks' shortlists, and in the row's last block the `count` best of them, best first, lowest token on
// ties.
extern "C" __global__ void __launch_bounds__(THREADS)
beam_select_kernel(BEAM_ARGUMENTS, const float* beam_scores, int count, u64* shortlists, u64* finalists,
                   float* candidate_scores, int* candidate_tokens) {
    BEAM_SETUP;
    float largest = beam.largest, log_sum = beam.log_sum, beam_score = beam_scores[blockIdx.y];
    u64 keys[ROW_LOADS];
    u64 own = own_keys(x, V, keys, [&](int j, float value) {
        return ranked(order_key(((value - largest) - log_sum) + beam_score), j);
    });
    u64 bound = shortlist_block(keys, own, count, exchange, shortlists + (long long)block * count * ROW_LOADS);
    if (threadIdx.x == 0) own_partials[0] = bound;
    if (!last_of_row(&beam.arrived, ticket)) return;
    long long listed = (long long)blockIdx.y * gridDim.x * count * ROW_LOADS;  // the row's shortlists' words
    rank_shortlists(shortlists + listed, count, combine_partials(row_partials, 2, 0, exchange, larger<u64>),
                    finalists + listed, &beam.entered, [&](int rank, u64 key) {
                        candidate_scores[blockIdx.y * count + rank] = from_order_key((unsigned)(key >> 32));
                        candidate_tokens[blockIdx.y * count + rank] = index_of(key);
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

OPTIONS = ("-std=c++17",)  # the passes take lambdas
DEFINES = dict(ROW_DEFINES, MAX_BEAMS=MAX_BEAMS, BEAM_WORDS=BEAM_WORDS)
beam_update_kernel = CudaKernel(BEAM_SOURCE, "beam_update_kernel", defines=DEFINES, options=OPTIONS)


@functools.cache
def candidate_kernels(source: str = BEAM_SOURCE) -> tuple[CudaKernel, ...]:
    """beam_candidates_forward's two kernels (stats, select), compiled from `source`."""
    return tuple(CudaKernel(source, name, defines=DEFINES, options=OPTIONS)
                 for name in ("beam_stats_kernel", "beam_select_kernel"))


def beam_candidates_forward(candidate_scores, candidate_tokens, logits, beam_scores, done, rows, V, stride, count):
    """Each of `rows` beams' `count` best (log-probability + beam score, token), best first."""
    check_array("beam_candidates_forward", "logits", logits, rows * stride)
    check_array("beam_candidates_forward", "beam_scores", beam_scores, rows)
    check_array("beam_candidates_forward", "candidate_scores", candidate_scores, rows * count)
    check_array("beam_candidates_forward", "candidate_tokens", candidate_tokens, rows * count, np.int32)
    check_array("beam_candidates_forward", "done", done, 1, np.int32)
    if not 1 <= count <= 2 * MAX_BEAMS or count > V or V > min(stride, MAX_V):
        raise KernelArgumentError(f"beam_candidates_forward: count={count} must be in 1..{2 * MAX_BEAMS} and at "
                                  f"most V={V}, and V at most stride={stride} and {MAX_V}")
    launch_candidates(candidate_kernels(), candidate_scores, candidate_tokens, logits, beam_scores, done, rows, V,
                      stride, count)


def launch_candidates(kernels, candidate_scores, candidate_tokens, logits, beam_scores, done, rows, V, stride, count):
    """`kernels` (candidate_kernels(), or those of another source): each beam's row in chunks of CHUNK logits, a
    block each. Its scratch is shared by calls of one shape: one stream at a time."""
    import cupy

    stats, select = kernels
    chunks = ceil_div(V, CHUNK)
    beams, *blocks, shortlists, finalists = row_scratch(cupy.cuda.Device().id, rows, chunks, BEAM_WORDS, count)
    beams.fill(0)
    row = (beams, *blocks, logits, done, np.int32(V), np.int32(stride))
    stats((chunks, rows), (THREADS,), row)
    select((chunks, rows), (THREADS,), (*row, beam_scores, np.int32(count), shortlists, finalists, candidate_scores,
                                        candidate_tokens))


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
