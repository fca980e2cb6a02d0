"""Choosing each row's next token on the GPU: greedy, or sampling with a temperature, top-k and top-p.

On the host a generation step ends by copying the logits back, choosing, and
sending the choice down again, so the GPU waits for the host every token. Chosen
here, a step writes its token into the buffer the next step reads its tokens from:
steps queue up back to back, and a CUDA graph can hold the choice (the grape
executor's, generation.grape).

    sample_forward(tokens, sequences, logits, lengths, B, V, stride, max_T, temperature, top_k, top_p, seed)

logits (B, stride) holds each row's V real logits first. The chosen token goes to
tokens[b] and to sequences[b, lengths[b]] (when that is inside max_T), as
generation.generate.next_token chooses it:

* temperature 0: the largest logit, the lowest id on ties;
* otherwise z = logit / temperature; top-k keeps the tokens whose z is at least the
  k-th largest (ties at the cut all kept); top-p then keeps the likeliest tokens
  whose probabilities, with all likelier ones, reach p of the kept mass (ties at the
  cut all kept); and one kept token is drawn with probability proportional to
  exp(z - max z).

The cuts are found by radix selection on the values' bits: four passes of 8 bits,
each a 256-bin histogram, so no sort of 50,000 logits. The k-th largest logit orders
the z's by their bits (order_key); the top-p cut orders the probabilities, whose
mass is counted in 64-bit fixed point (2^40 is all of it) so that sums do not depend
on the order of atomic adds. The draw needs no random state carried between steps:
u = splitmix64(seed ^ splitmix64(row << 32 | position)) is a counter-based random
number, and the token picked is the first, in id order, whose running kept mass
passes u * (kept mass) / 2^64. seed is a device array (one uint64), so a captured
graph keeps its launch when the seed changes.

One block of 1024 threads per row: every pass over the row is a strided loop and a
block reduction (warp shuffles, then one value per warp in shared memory). The pass
for the largest logit (row_best, shared with beam search) loads a thread's next
ROW_LOADS elements before it uses any.
"""

import numpy as np

from kernel_runtime import CudaKernel, KernelArgumentError, check_array

THREADS = 1024  # one block per row

# The block-wide reductions choosing needs, shared with kernels/beam_search.py.
ROW_REDUCTIONS = r"""
#define ROW_LOADS 8  // a thread's loads in flight on a pass over a row
#define FULL_MASK 0xffffffffu
#define MINUS_INFINITY __int_as_float(0xff800000)
#define NO_INDEX 0x7fffffff
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

// f(j, x[j]) for the thread's elements of a row of V (j = threadIdx.x, then blockDim.x on), in that order, with
// ROW_LOADS of them loaded before any is used: a pass then waits for memory a ROW_LOADS-th as often.
template <typename Use> __device__ void for_each_in_row(const float* x, int V, Use f) {
    for (int j0 = threadIdx.x; j0 < V; j0 += ROW_LOADS * blockDim.x) {
        float held[ROW_LOADS];
#pragma unroll
        for (int u = 0; u < ROW_LOADS; u++) {
            int j = j0 + u * blockDim.x;
            held[u] = j < V ? x[j] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < ROW_LOADS; u++) {
            int j = j0 + u * blockDim.x;
            if (j < V) f(j, held[u]);
        }
    }
}

// The largest x[j] / divisor of a row of V and its index (the lowest on ties), in every thread.
__device__ void row_best(const float* x, int V, float divisor, float& score, int& index, float* scores,
                         int* indices) {
    score = MINUS_INFINITY; index = NO_INDEX;
    for_each_in_row(x, V, [&](int j, float value) {
        float z = value / divisor;  // / 1.0f is exact: the plain row
        if (before(z, j, score, index)) { score = z; index = j; }
    });
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
"""

SAMPLING_SOURCE = ROW_REDUCTIONS + r"""
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
"""

OPTIONS = ("-std=c++17",)  # the selection passes take lambdas
sample_kernel = CudaKernel(SAMPLING_SOURCE, "sample_kernel", options=OPTIONS)


def sample_forward(tokens, sequences, logits, lengths, B, V, stride, max_T, temperature, top_k, top_p, seed):
    """Each row's next token from logits (B, stride) into tokens (B,) and sequences (B, max_T) at lengths (B,);
    temperature 0 is greedy; top_k 0 or >= V and top_p None or >= 1 cut nothing."""
    check_array("sample_forward", "logits", logits, B * stride)
    for name, array, size in (("tokens", tokens, B), ("sequences", sequences, B * max_T), ("lengths", lengths, B)):
        check_array("sample_forward", name, array, size, np.int32)
    check_array("sample_forward", "seed", seed, 1, np.uint64)
    if not 0 < V <= stride:
        raise KernelArgumentError(f"sample_forward: V={V} must be in 1..stride={stride}")
    if temperature < 0 or (top_p is not None and top_p <= 0):
        raise KernelArgumentError(f"sample_forward: temperature={temperature} must be >= 0 and top_p={top_p} > 0")
    launch(sample_kernel, tokens, sequences, logits, lengths, B, V, stride, max_T, temperature, top_k, top_p, seed)


def launch(kernel, tokens, sequences, logits, lengths, B, V, stride, max_T, temperature, top_k, top_p, seed):
    """`kernel` (sample_kernel, or one with its parameters) over the B rows; no cut passes as top-k V, top-p 1."""
    kernel((B,), (THREADS,), (tokens, sequences, logits, lengths, np.int32(V), np.int32(stride), np.int32(max_T),
                              np.float32(temperature), np.int32(min(top_k or V, V)),
                              np.float32(1.0 if top_p is None else top_p), seed))
