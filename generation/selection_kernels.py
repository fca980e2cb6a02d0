"""The work after the logits, on the GPU: choosing tokens, beam search's bookkeeping,
and reordering the KV cache for beams (what the grape executor captures in its graphs).

On the host, a step ends by copying the logits back, choosing, and sending the
choice down again: the GPU waits for the host every token. Done here, a step writes
its choice into the buffer the next step reads its tokens from, so steps queue up
back to back and the host only looks at the results every few steps.

* sample_forward: per row, greedy (argmax, lowest id on ties) or sampling with a
  temperature, then top-k, then top-p, as generation.generate.next_token defines them.
  The cuts are found by radix selection on the values' bits (four passes of 8 bits):
  the k-th largest logit for top-k; for top-p, the smallest probability whose
  tokens and all likelier ones hold at least p of the mass (the mass counted in
  64-bit fixed point, so its sums do not depend on the order of atomic adds).
  Tokens tied at a cut are all kept. A uniform number from a counter-based generator
  (splitmix64 of the seed, the row and the position: no state to carry between
  steps) then picks a kept token by the running sum of their probabilities in id order.
* beam_candidates_forward: per beam, log_softmax(logits) + the beam's score, and its
  2K best (score, token), best first: each thread keeps a sorted list of its own,
  warps merge their lanes' lists, then the first warp merges the warps'.
* beam_update_forward: one thread per launch runs beam search's bookkeeping for all
  prompts exactly as generation.beam_search does on the host, in the same float32
  operations. It keeps back-pointers (each new beam's parent beam and token) instead of
  whole sequences; generation.executors rebuilds the hypotheses from them at the end.
  `done` holds 0 while the search goes on, then the final length: after that every
  kernel here returns at once, so steps queued past the end change nothing.
* reorder_rows_forward: row b of one layer's k and v caches becomes a copy of row
  rows[b], through a scratch buffer (a row may be another's source); rows that keep
  their own contents are not touched, and only the filled positions are copied, a
  block per run of COPY_POSITIONS positions, in float4s.
"""

import numpy as np

from kernel_runtime import CudaKernel, KernelArgumentError, check_array

THREADS = 1024        # sample_forward: one block per row
BEAM_THREADS = 256    # beam_candidates_forward: one block per beam
MAX_BEAMS = 16        # per prompt: each thread of beam_candidates keeps 2 * MAX_BEAMS candidates at most
COPY_THREADS = 256    # reorder_rows_forward: one block per (row, head, k or v, run of positions)
COPY_POSITIONS = 32

EARLY_STOPPING = {False: 0, True: 1, "never": 2}

SELECTION_SOURCE = r"""
#define FULL_MASK 0xffffffffu
#define NEGATIVE (-1e9f)
#define MINUS_INFINITY __int_as_float(0xff800000)
#define NO_INDEX 0x7fffffff
#define MAX_CANDIDATES (2 * MAX_BEAMS)
typedef unsigned long long u64;

// (score a, index ai) comes before (b, bi): higher score, then lower index, as a stable sort
__device__ bool before(float a, int ai, float b, int bi) { return a > b || (a == b && ai < bi); }

__device__ void warp_best(float& score, int& index) {
    for (int offset = 16; offset > 0; offset /= 2) {
        float other = __shfl_xor_sync(FULL_MASK, score, offset);
        int other_index = __shfl_xor_sync(FULL_MASK, index, offset);
        if (before(other, other_index, score, index)) { score = other; index = other_index; }
    }
}

// The best (score, index) of the block, in every thread. Shared scratch: one slot per warp.
__device__ void block_best(float& score, int& index, float* scores, int* indices) {
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
    warp_best(score, index);
    if (lane == 0) { scores[warp] = score; indices[warp] = index; }
    __syncthreads();
    score = MINUS_INFINITY; index = NO_INDEX;
    for (int w = 0; w < warps; w++) if (before(scores[w], indices[w], score, index)) { score = scores[w]; index = indices[w]; }
    __syncthreads();
}

// The largest x[j] / divisor of a row of V and its index (the lowest on ties), in every thread.
__device__ void row_best(const float* x, int V, float divisor, float& score, int& index, float* scores,
                         int* indices) {
    score = MINUS_INFINITY; index = NO_INDEX;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        float z = x[j] / divisor;  // / 1.0f is exact: the plain row
        if (before(z, j, score, index)) { score = z; index = j; }
    }
    block_best(score, index, scores, indices);
}

// The block's sum, the same in every thread (warps added in a fixed order: deterministic).
template <typename T> __device__ T block_sum(T value, T* partial) {
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
    for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(FULL_MASK, value, offset);
    if (lane == 0) partial[warp] = value;
    __syncthreads();
    T total = 0;
    for (int w = 0; w < warps; w++) total += partial[w];
    __syncthreads();
    return total;
}

// Bits of a float as an unsigned number in the same order as the floats
__device__ unsigned order_key(float x) {
    unsigned bits = __float_as_uint(x);
    return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

__device__ u64 splitmix64(u64 x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// Radix selection, 8 bits at a time from the top: the largest key whose count (or mass) of keys
// at or above it reaches `target`. weight(j) gives element j's key and weight (0: not counted).
template <typename Weight, typename Count>
__device__ unsigned select_key(int V, Weight weight, Count target, Count* histogram, unsigned* chosen, Count* rest) {
    unsigned prefix = 0, mask = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int d = threadIdx.x; d < 256; d += blockDim.x) histogram[d] = 0;
        __syncthreads();
        for (int j = threadIdx.x; j < V; j += blockDim.x) {
            unsigned key; Count w = weight(j, key);
            if (w != 0 && (key & mask) == prefix) atomicAdd(&histogram[(key >> shift) & 255u], w);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            Count above = 0;
            int digit = 255;
            for (; digit > 0 && above + histogram[digit] < target; digit--) above += histogram[digit];
            *chosen = digit;
            *rest = target - above;
        }
        __syncthreads();
        prefix |= *chosen << shift;
        mask |= 255u << shift;
        target = *rest;
        __syncthreads();
    }
    return prefix;
}

// One block per row of logits (row stride `stride`, the first V used). The chosen token goes to
// tokens[row] (the next step's input) and to sequences[row][lengths[row]] (after the row's tokens so
// far). temperature 0: argmax. top_k >= V or top_p >= 1: no cut.
extern "C" __global__ void sample_kernel(int* tokens, int* sequences, const float* logits, const int* lengths,
                                         int V, int stride, int max_T, float temperature, int top_k, float top_p,
                                         const u64* seed) {
    __shared__ float best_scores[32];
    __shared__ int best_indices[32];
    __shared__ double double_partial[32];
    __shared__ u64 mass_partial[32];
    __shared__ unsigned count_histogram[256], chosen_digit, count_rest;
    __shared__ u64 mass_histogram[256], mass_rest;
    int row = blockIdx.x;
    const float* x = logits + (long long)row * stride;
    int position = lengths[row];
    int token;
    if (temperature == 0.0f) {
        float best;
        row_best(x, V, 1.0f, best, token, best_scores, best_indices);
    } else {
        unsigned least_logit = 0;  // the top-k cut, as an order key (0: keep all)
        if (top_k < V) {
            least_logit = select_key(V, [&](int j, unsigned& key) { key = order_key(x[j] / temperature); return 1u; },
                                     (unsigned)top_k, count_histogram, &chosen_digit, &count_rest);
        }
        float largest; int unused;
        row_best(x, V, temperature, largest, unused, best_scores, best_indices);
        auto kept_probability = [&](int j) {
            float z = x[j] / temperature;
            return order_key(z) >= least_logit ? expf(z - largest) : 0.0f;
        };
        double local = 0.0;
        for (int j = threadIdx.x; j < V; j += blockDim.x) local += kept_probability(j);
        double total = block_sum(local, double_partial);
        auto mass = [&](int j, unsigned& key) {  // a probability in fixed point (2^40 is all), keyed by its bits
            float p = kept_probability(j);
            key = __float_as_uint(p);
            return (u64)((double)p / total * 1099511627776.0);
        };
        unsigned least_probability = 0;  // the top-p cut, as the bits of a probability (0: keep all)
        if (top_p < 1.0f) {
            u64 own_mass = 0;
            for (int j = threadIdx.x; j < V; j += blockDim.x) { unsigned key; own_mass += mass(j, key); }
            u64 target = (u64)ceil((double)top_p * (double)block_sum(own_mass, mass_partial));
            least_probability = select_key(V, mass, target > 0 ? target : 1ull, mass_histogram, &chosen_digit,
                                           &mass_rest);
        }
        auto kept_mass = [&](int j) { unsigned key; u64 m = mass(j, key); return key >= least_probability ? m : 0ull; };
        // each thread takes a contiguous chunk of ids; an exact scan of the chunks' masses tiles [0, total)
        int chunk = (V + blockDim.x - 1) / blockDim.x, begin = min(V, (int)threadIdx.x * chunk), end = min(V, begin + chunk);
        u64 own = 0;
        for (int j = begin; j < end; j++) own += kept_mass(j);
        int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
        u64 inclusive = own;
        for (int offset = 1; offset < 32; offset *= 2) {
            u64 other = __shfl_up_sync(FULL_MASK, inclusive, offset);
            if (lane >= offset) inclusive += other;
        }
        if (lane == 31) mass_partial[warp] = inclusive;
        __syncthreads();
        u64 before_warp = 0, kept_total = 0;
        for (int w = 0; w < warps; w++) { if (w < warp) before_warp += mass_partial[w]; kept_total += mass_partial[w]; }
        inclusive += before_warp;
        u64 exclusive = inclusive - own;
        u64 random = splitmix64(*seed ^ splitmix64(((u64)row << 32) | (unsigned)position));
        u64 u = __umul64hi(random, kept_total);  // uniform in [0, kept_total)
        float pick = MINUS_INFINITY; token = NO_INDEX;
        if (exclusive <= u && u < inclusive) {
            u64 running = exclusive;
            for (int j = begin; j < end && token == NO_INDEX; j++) {
                running += kept_mass(j);
                if (running > u) token = j;
            }
            pick = 1.0f;
        }
        block_best(pick, token, best_scores, best_indices);
    }
    if (threadIdx.x == 0) {
        tokens[row] = token;
        if (position < max_T) sequences[(long long)row * max_T + position] = token;
    }
}

// One block per beam: its `count` best log-probabilities plus the beam's score, best first.
extern "C" __global__ void beam_candidates_kernel(float* candidate_scores, int* candidate_tokens, const float* logits,
                                                  const float* beam_scores, const int* done, int V, int stride,
                                                  int count) {
    __shared__ float best_scores[32];
    __shared__ int best_indices[32];
    __shared__ double partial[32];
    __shared__ float warp_scores[BEAM_THREADS / 32][MAX_CANDIDATES];
    __shared__ int warp_tokens[BEAM_THREADS / 32][MAX_CANDIDATES];
    if (*done) return;
    int row = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const float* x = logits + (long long)row * stride;
    float largest; int unused;
    row_best(x, V, 1.0f, largest, unused, best_scores, best_indices);
    double local = 0.0;
    for (int j = threadIdx.x; j < V; j += blockDim.x) local += expf(x[j] - largest);
    float log_sum = logf((float)block_sum(local, partial));
    float beam_score = beam_scores[row];

    float own_scores[MAX_CANDIDATES];
    int own_tokens[MAX_CANDIDATES];
    for (int c = 0; c < count; c++) { own_scores[c] = MINUS_INFINITY; own_tokens[c] = NO_INDEX; }
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        float score = ((x[j] - largest) - log_sum) + beam_score;  // the host's order of float32 operations
        if (!before(score, j, own_scores[count - 1], own_tokens[count - 1])) continue;
        int at = count - 1;
        for (; at > 0 && before(score, j, own_scores[at - 1], own_tokens[at - 1]); at--) {
            own_scores[at] = own_scores[at - 1]; own_tokens[at] = own_tokens[at - 1];
        }
        own_scores[at] = score; own_tokens[at] = j;
    }
    int head = 0;  // the lane's next candidate; lists are sorted, so each round takes the best head
    for (int r = 0; r < count; r++) {
        float score = head < count ? own_scores[head] : MINUS_INFINITY;
        int token = head < count ? own_tokens[head] : NO_INDEX;
        int mine = token;
        warp_best(score, token);
        if (mine == token && token != NO_INDEX) head++;
        if (lane == 0) { warp_scores[warp][r] = score; warp_tokens[warp][r] = token; }
    }
    __syncthreads();
    if (warp == 0) {
        head = 0;
        for (int r = 0; r < count; r++) {
            bool has = lane < blockDim.x / 32 && head < count;
            float score = has ? warp_scores[lane][head] : MINUS_INFINITY;
            int token = has ? warp_tokens[lane][head] : NO_INDEX;
            int mine = token;
            warp_best(score, token);
            if (mine == token && token != NO_INDEX) head++;
            if (lane == 0) { candidate_scores[row * count + r] = score; candidate_tokens[row * count + r] = token; }
        }
    }
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
                                              int prompt_length, int max_length, float length_penalty,
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
        float penalty = (float)pow((double)(step + 1), (double)length_penalty);
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
        int best_length = (early_stopping == 2 && length_penalty > 0.0f) ? max_length - prompt_length
                                                                         : length + 1 - prompt_length;
        float best_running = beam_scores[beam0] / (float)pow((double)best_length, (double)length_penalty);
        improvable[p] = improvable[p] && best_running > (now_all_finished ? worst : NEGATIVE);
        any_improvable = any_improvable || improvable[p];
        all_finished = all_finished && now_all_finished;
    }
    bool open_beam = !(all_finished && early_stopping == 1);
    if (!(any_improvable && open_beam && !all_end)) *done = length + 1;
}

// grid (B * NH, 2, max_T / COPY_POSITIONS): blockIdx.y picks the k or the v cache of one layer, blockIdx.z
// a run of positions. from_cache 1: scratch row b <- cache row rows[b]; 0: cache row b <- scratch row b.
// Rows with rows[b] == b, and positions past the row's length, are skipped.
extern "C" __global__ void reorder_rows_kernel(float* k_cache, float* v_cache, float* scratch, const int* rows,
                                               const int* lengths, const int* done, int B, int NH, int max_T,
                                               int HS, int from_cache) {
    if (*done) return;
    int b = blockIdx.x / NH, h = blockIdx.x % NH, source = rows[b];
    int first = blockIdx.z * COPY_POSITIONS, filled = min(lengths[b], max_T);
    if (source == b || first >= filled) return;
    float* cache = blockIdx.y ? v_cache : k_cache;
    long long start = (long long)first * HS;
    float* saved = scratch + (((long long)blockIdx.y * B + b) * NH + h) * max_T * HS + start;
    float* own = cache + ((long long)b * NH + h) * max_T * HS + start;
    const float* from = from_cache ? cache + ((long long)source * NH + h) * max_T * HS + start : saved;
    float* to = from_cache ? saved : own;
    int count = (min(filled, first + COPY_POSITIONS) - first) * HS;
    if (HS % 4 == 0) {  // rows start 16-byte aligned: copy float4s
        for (int i = threadIdx.x; i < count / 4; i += blockDim.x) ((float4*)to)[i] = ((const float4*)from)[i];
    } else {
        for (int i = threadIdx.x; i < count; i += blockDim.x) to[i] = from[i];
    }
}
"""

SELECTION_DEFINES = dict(MAX_BEAMS=MAX_BEAMS, BEAM_THREADS=BEAM_THREADS, COPY_POSITIONS=COPY_POSITIONS)
OPTIONS = ("-std=c++17",)
sample_kernel = CudaKernel(SELECTION_SOURCE, "sample_kernel", defines=SELECTION_DEFINES, options=OPTIONS)
beam_candidates_kernel = CudaKernel(SELECTION_SOURCE, "beam_candidates_kernel", defines=SELECTION_DEFINES,
                                    options=OPTIONS)
beam_update_kernel = CudaKernel(SELECTION_SOURCE, "beam_update_kernel", defines=SELECTION_DEFINES, options=OPTIONS)
reorder_rows_kernel = CudaKernel(SELECTION_SOURCE, "reorder_rows_kernel", defines=SELECTION_DEFINES, options=OPTIONS)


def sample_forward(tokens, sequences, logits, lengths, B, V, stride, max_T, temperature, top_k, top_p, seed):
    """Each row's next token from logits (B, stride) into tokens (B,) and sequences (B, max_T) at lengths (B,);
    seed: a device array of one uint64 (a graph then keeps its launch when the seed changes)."""
    for name, array, size in (("tokens", tokens, B), ("sequences", sequences, B * max_T), ("lengths", lengths, B)):
        check_array("sample_forward", name, array, size, np.int32)
    check_array("sample_forward", "logits", logits, B * stride)
    check_array("sample_forward", "seed", seed, 1, np.uint64)
    if not 0 < V <= stride:
        raise KernelArgumentError(f"sample_forward: V={V} must be in 1..stride={stride}")
    sample_kernel((B,), (THREADS,), (tokens, sequences, logits, lengths, np.int32(V), np.int32(stride),
                                     np.int32(max_T), np.float32(temperature), np.int32(min(top_k or V, V)),
                                     np.float32(1.0 if top_p is None else top_p), seed))


def beam_candidates_forward(candidate_scores, candidate_tokens, logits, beam_scores, done, rows, V, stride, count):
    """Each of `rows` beams' `count` best (log-probability + beam score, token), best first."""
    if not 1 <= count <= 2 * MAX_BEAMS or count > V:
        raise KernelArgumentError(f"beam_candidates_forward: count={count} must be in 1..{2 * MAX_BEAMS} and <= V={V}")
    check_array("beam_candidates_forward", "logits", logits, rows * stride)
    beam_candidates_kernel((rows,), (BEAM_THREADS,), (candidate_scores, candidate_tokens, logits, beam_scores, done,
                                                      np.int32(V), np.int32(stride), np.int32(count)))


def beam_update_forward(state, lengths, P, K, V, prompt_length, max_length, length_penalty, early_stopping,
                        end_of_text):
    """Beam search's bookkeeping for one step on the device; `state` holds its arrays by name."""
    s = state
    beam_update_kernel((1,), (32,), (s.candidate_scores, s.candidate_tokens, s.beam_scores, s.finished_scores,
                                     s.finished_step, s.finished_beam, s.finished_token, s.is_finished, s.improvable,
                                     s.parents, s.chosen, s.tokens, s.rows, s.done, lengths, np.int32(P),
                                     np.int32(K), np.int32(V), np.int32(prompt_length), np.int32(max_length),
                                     np.float32(length_penalty), np.int32(EARLY_STOPPING[early_stopping]),
                                     np.int32(end_of_text)))


def reorder_rows_forward(k_cache, v_cache, scratch, rows, lengths, done, B, NH, max_T, HS):
    """Row b of one layer's caches (B, NH, max_T, HS) becomes row rows[b], for the filled positions."""
    for name, array in (("k_cache", k_cache), ("v_cache", v_cache)):
        check_array("reorder_rows_forward", name, array, B * NH * max_T * HS)
    check_array("reorder_rows_forward", "scratch", scratch, 2 * B * NH * max_T * HS)
    for from_cache in (1, 0):
        reorder_rows_kernel((B * NH, 2, -(-max_T // COPY_POSITIONS)), (COPY_THREADS,), (k_cache, v_cache, scratch, rows, lengths, done,
                                                             np.int32(B), np.int32(NH), np.int32(max_T),
                                                             np.int32(HS), np.int32(from_cache)))
