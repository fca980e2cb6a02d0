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

The draw needs no random state carried between steps: u = splitmix64(seed ^
splitmix64(row << 32 | position)) is a counter-based random number, and the token
picked is the first, in id order, whose running kept mass passes u * (kept mass) /
2^64. A token's mass is its probability exp(z - max z) in 64-bit fixed point (2^40 is
the largest token's), so that sums do not depend on the order they are taken in. seed
is a device array (one uint64), so a captured graph keeps its launch when the seed
changes.

Each row is split into chunks of CHUNK logits, a block of THREADS each (grid: chunks
by rows), so that a row's passes run on many SMs. A thread takes ROW_LOADS logits of
its chunk, THREADS apart (a warp's loads are contiguous), and loads them all before it
uses any. The kernels hold no shared memory and no warp shuffles: threads meet in
global memory. A block's threads combine their values (largest, sum) through words of
global memory the block owns (block_combine: sixteen threads combine sixteen values
each, then every thread the sixteen results), one thread writes the block's partial,
and the last block of the row to finish (last_of_row: each block takes a ticket from
an integer atomic once its threads are done) combines the partials and decides.
Integer maxima and sums come out the same in any order, so every result is the same
on every call. A step that needs the whole row's result before its own pass over the
row is a launch of its own:

1. sample_best_kernel: the largest z, and its id: at temperature 0 the last block
   writes it as the token, and that is the whole call. When top-k cuts and keeps at
   most THREADS, its cut is shortlisted: in each block the threads rank their best
   z's (as ranked(order key, id): distinct numbers), and the top_k best threads
   shortlist their z's at or above the top_k-th best thread's; every z of the row's
   top_k is on a shortlist, at or above the largest of the blocks' bounds, and the
   last block ranks those few (each counts the better ones): the top_k-th z is the
   cut, and every z equal to it is kept too;
2. when top-k keeps more than THREADS, or top-p cuts, radix selection on the values'
   bits instead: four passes of 8 bits, each a 256-bin histogram of the row that the
   threads add into with integer atomics, and the last block chooses the digit
   (sample_top_k_kernel, its first pass in sample_best_kernel; sample_top_p_kernel,
   over the probabilities' bits weighted by their masses, whose first pass also
   totals the kept mass for the target);
3. sample_draw_kernel: each chunk's kept mass; the last block draws u, finds the chunk
   whose running mass passes it, and in it the token, each thread taking ROW_LOADS ids
   in order.

So greedy is one launch, and temperature with top-k (the leaderboard's sampling) two.
The scratch (the rows' states: selection, tally of arrived blocks; the blocks'
partials, tickets and exchanges; top-k's shortlists) is made once per device and shape
and kept (row_scratch); each call zeroes the rows' states first and writes the rest
before reading it, so nothing passes from one call to the next (graphs replay it),
and calls share it: one stream at a time. Past ROWS_AT_ONCE rows the rows go in
groups, one after the other, to keep it small.
"""

import functools

import numpy as np

from gpt2kit.kernel_runtime import CudaKernel, KernelArgumentError, ceil_div, check_array

THREADS = 256         # a block: one chunk of a row, and one thread a digit of a radix pass
ROW_LOADS = 32        # a thread's logits of its chunk, loaded at once: few blocks a row (GPT-2's, 7), so few
                      # shortlisted (top-k 50: about 200, against 900 at 8 a thread)
CHUNK = THREADS * ROW_LOADS
ROWS_AT_ONCE = 256    # rows a launch takes; more go in groups, sharing one scratch
EXCHANGE = THREADS + 16  # words of global memory a block's threads meet in
MAX_V = THREADS * CHUNK  # a row's chunks: one thread each of its last block
ROW_WORDS = THREADS + 16  # a RowState, in 64-bit words: rounded up to 128-byte cache lines

# What a row's passes share, shared with kernels/beam_search.py (compiled with ROW_DEFINES).
ROW_DEFINES = dict(THREADS=THREADS, ROW_LOADS=ROW_LOADS, CHUNK=CHUNK, EXCHANGE=EXCHANGE)
ROW_PASSES = r"""
static_assert(THREADS == 16 * 16, "block_combine takes sixteen groups of sixteen");
typedef unsigned long long u64;

// Bits of a float as an unsigned number in the same order as the floats, and back
__device__ unsigned order_key(float x) {
    unsigned bits = __float_as_uint(x);
    return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}
__device__ float from_order_key(unsigned key) {
    return __uint_as_float((key & 0x80000000u) ? key & 0x7fffffffu : ~key);
}

// A score's order key and an index as one number in the ranking's order: higher score first, then lower index (the
// index's bits are tie_bits, larger for a lower index; tie_bits is its own inverse). 0 is below every such number.
__device__ unsigned tie_bits(unsigned index) { return 0xffffffffu - index; }
__device__ u64 ranked(unsigned key, int index) { return (u64)key << 32 | tie_bits(index); }
__device__ int index_of(u64 ranked) { return (int)tie_bits((unsigned)ranked); }
template <typename T> __device__ T larger(T a, T b) { return a > b ? a : b; }
template <typename T> __device__ T plus(T a, T b) { return a + b; }

// A launch's block (blockIdx.y its row, blockIdx.x its chunk): its two partial words, ticket and exchange, and its
// row's blocks' partials
#define BLOCK_SETUP                                                                     \
    int block = blockIdx.y * gridDim.x + blockIdx.x;                                    \
    u64 *row_partials = partials + 2 * blockIdx.y * gridDim.x,                          \
        *own_partials = partials + 2 * block, *exchange = exchanges + block * EXCHANGE; \
    unsigned* ticket = tickets + block

// This thread's logits of its block's chunk (blockIdx.x) of a row of V: ROW_LOADS of them, THREADS apart, all loaded
// before any is used; f(j, x[j]) for each.
template <typename Use> __device__ void for_each_own(const float* x, int V, Use f) {
    int first = blockIdx.x * CHUNK + threadIdx.x;
    float held[ROW_LOADS];
#pragma unroll
    for (int u = 0; u < ROW_LOADS; u++) held[u] = first + u * THREADS < V ? x[first + u * THREADS] : 0.0f;
#pragma unroll
    for (int u = 0; u < ROW_LOADS; u++) if (first + u * THREADS < V) f(u, first + u * THREADS, held[u]);
}

// The combination of every thread's `value`, in every thread of the block, in an order fixed by the block's size. The
// threads meet in global memory (`exchange`, EXCHANGE words this block owns): sixteen of them combine sixteen values
// each, then every thread the sixteen results.
template <typename T, typename Combine> __device__ T block_combine(T value, u64* exchange, Combine combine) {
    T* meeting = (T*)exchange;
    meeting[threadIdx.x] = value;
    __syncthreads();
    if (threadIdx.x < 16) {
        T part = meeting[16 * threadIdx.x];
#pragma unroll
        for (int i = 1; i < 16; i++) part = combine(part, meeting[16 * threadIdx.x + i]);
        meeting[THREADS + threadIdx.x] = part;
    }
    __syncthreads();
    T all = meeting[THREADS];
#pragma unroll
    for (int i = 1; i < 16; i++) all = combine(all, meeting[THREADS + i]);
    __syncthreads();  // every thread has read: the exchange is free again
    return all;
}

// Whether this block is the last of its row's gridDim.x blocks to get here in this launch: the threads' writes and
// atomics are made visible to the whole GPU, the block meets, its first thread takes the row's next ticket, and the
// block reads it back after a second barrier. The last block, past its fence, sees what every block of the row left
// (as the CUDA samples' single-pass reduction reads its blocks' sums); it sets the row's count of arrivals (zero
// before the call's first launch) back to 0 for the call's next launch.
__device__ bool last_of_row(unsigned* arrived, unsigned* ticket) {
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) *ticket = atomicAdd(arrived, 1u);
    __syncthreads();
    if (*ticket != gridDim.x - 1) return false;
    __threadfence();
    if (threadIdx.x == 0) *arrived = 0;
    return true;
}

// The last block: the row's blocks' partials (a block's partial word `which` of `words`; gridDim.x <= THREADS),
// combined, in every thread.
template <typename Combine> __device__ u64 combine_partials(const u64* partials, int words, int which, u64* exchange,
                                                           Combine combine) {
    return block_combine(threadIdx.x < gridDim.x ? partials[threadIdx.x * words + which] : 0ull, exchange, combine);
}

// This thread's keys key(j, x[j]) of its logits (0 where it has none), and the best of them
template <typename Key> __device__ u64 own_keys(const float* x, int V, u64 keys[ROW_LOADS], Key key) {
    u64 best = 0;
#pragma unroll
    for (int u = 0; u < ROW_LOADS; u++) keys[u] = 0;
    for_each_own(x, V, [&](int u, int j, float value) { best = larger(best, keys[u] = key(j, value)); });
    return best;
}

// Shortlisting a row's `count` best (count <= THREADS) of its logits' keys (own_keys: ranked, distinct), in two
// halves, so that only a few dozen are ranked against each other.
// In each block: its threads rank their best keys; the count best threads each write their keys at or above the
// block's count-th best thread's (the block's bound) to ROW_LOADS slots of the block's `shortlist` (count * ROW_LOADS
// words; 0 elsewhere). The bound is returned, in every thread. No other key of the block can be among the row's best:
// the count best threads hold count keys at least as good as the bound.
__device__ u64 shortlist_block(const u64 keys[ROW_LOADS], u64 own, int count, u64* exchange, u64* shortlist) {
    exchange[threadIdx.x] = own;
    __syncthreads();
    int ahead = 0;  // the block's threads ranked before this one: better, or as good (no logits) and earlier
#pragma unroll 16
    for (int t = 0; t < THREADS; t++) ahead += exchange[t] > own || (exchange[t] == own && t < (int)threadIdx.x);
    __syncthreads();
    if (ahead == count - 1) exchange[THREADS] = own;
    __syncthreads();
    u64 bound = exchange[THREADS];
    if (ahead < count) {
#pragma unroll
        for (int u = 0; u < ROW_LOADS; u++) shortlist[ahead * ROW_LOADS + u] = keys[u] >= bound ? keys[u] : 0ull;
    }
    __syncthreads();  // every thread has read: the exchange is free again
    return bound;
}

// Then in the row's last block: the keys of every block's shortlist at or above `bound`, the largest of the blocks'
// bounds (so at most the row's count-th best), go to `finalists` (a counter, `entered`, zero before, gives each its
// slot); each finalist counts the better ones, and use(rank, key) is called for those ranked below count.
template <typename Use> __device__ void rank_shortlists(const u64* shortlists, int count, u64 bound, u64* finalists,
                                                        unsigned* entered, Use use) {
    for (int i = threadIdx.x; i < gridDim.x * count * ROW_LOADS; i += THREADS) {
        u64 key = shortlists[i];
        if (key != 0 && key >= bound) finalists[atomicAdd(entered, 1u)] = key;
    }
    __syncthreads();
    int n = __ldcg(entered);
    for (int i = threadIdx.x; i < n; i += THREADS) {
        u64 key = finalists[i];
        int better = 0;
#pragma unroll 8
        for (int k = 0; k < n; k++) better += finalists[k] > key;
        if (better < count) use(better, key);
    }
}
"""

SAMPLING_SOURCE = ROW_PASSES + r"""
#define DIGITS THREADS  // a radix pass's histogram: one thread of the last block a digit

// A row's scratch across a call's launches, on cache lines of its own, zero at the call's start (sample_forward's
// _scratch holds ROW_WORDS words a row).
struct __align__(128) RowState {
    u64 histogram[DIGITS];  // a radix pass's counts or masses by digit; zero between passes
    u64 best;               // the largest z and its id, ranked(order_key(z), id)
    u64 target;             // the count or mass the selection still needs within its prefix
    unsigned prefix;        // the digits the selection has chosen so far
    unsigned least_logit;   // top-k's cut: the order key of the k-th largest z
    unsigned least_probability;  // top-p's cut: the bits of the least kept probability
    unsigned arrived;       // the row's blocks done with this launch; zero between launches
    unsigned entered;       // top-k's finalists so far
};
static_assert(sizeof(RowState) == ROW_WORDS * 8, "sample_forward's scratch is laid out so");

__device__ u64 splitmix64(u64 x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// A token's weight once the largest z and the cuts before it are known: exp(z - max z) where top-k keeps it, else 0,
// and that probability's mass in fixed point (2^40 is the largest token's), where top-p keeps it.
struct Weights {
    float temperature, largest;
    unsigned least_logit, least_probability;  // 0: keep all

    __device__ float probability(float logit) const {
        float z = logit / temperature;
        return order_key(z) >= least_logit ? expf(z - largest) : 0.0f;
    }
    __device__ u64 kept_mass(float logit) const {
        float p = probability(logit);
        return __float_as_uint(p) >= least_probability ? mass(p) : 0ull;
    }
    __device__ static u64 mass(float p) { return (u64)(p * 1099511627776.0f); }
};

__device__ Weights weights_of(const RowState& state, float temperature, int top_k, float top_p, int V) {
    return {temperature, from_order_key((unsigned)(state.best >> 32)), top_k < V ? state.least_logit : 0u,
            top_p < 1.0f ? state.least_probability : 0u};
}

// A radix pass: weight(value, key) of each of this thread's logits whose key's digits above `shift` are the prefix
// chosen so far, added into the row's histogram at the key's digit at `shift` (a weight of 0 adds nothing).
template <typename Weight>
__device__ void count_digits(RowState& state, const float* x, int V, int shift, Weight weight) {
    unsigned above = shift == 24 ? 0u : ~0u << (shift + 8), prefix = state.prefix & above;
    for_each_own(x, V, [&](int u, int j, float value) {
        unsigned key;
        u64 w = weight(value, key);
        if (w != 0 && (key & above) == prefix) atomicAdd(&state.histogram[(key >> shift) & 255u], w);
    });
}

// Top-k's radix pass: each z's order key, counted once
__device__ void count_z_digits(RowState& state, const float* x, int V, float temperature, int shift) {
    count_digits(state, x, V, shift, [&](float value, unsigned& key) {
        key = order_key(value / temperature);
        return 1ull;
    });
}

// The last block after a radix pass: the digit at which the histogram, summed from the largest digit down, reaches
// `target` (thread d checks digit d: exactly one has above < target <= above + its own). The selection narrows to it;
// after the last digit the whole key is the cut. The histogram is cleared for the next pass.
__device__ void choose_digit(RowState& state, u64 target, int shift, unsigned* cut, u64* exchange) {
    int digit = threadIdx.x;
    unsigned prefix = shift == 24 ? 0u : state.prefix;
    u64 own = state.histogram[digit];
    state.histogram[digit] = 0;
    exchange[digit] = own;
    __syncthreads();
    u64 above = 0;
#pragma unroll 16
    for (int d = 0; d < DIGITS; d++) above += d > digit ? exchange[d] : 0ull;
    if (above < target && target <= above + own) {
        state.prefix = prefix | digit << shift;
        state.target = target - above;
        if (shift == 0) *cut = state.prefix;
    }
}

__device__ void write_token(int* tokens, int* sequences, int row, int position, int max_T, int token) {
    tokens[row] = token;
    if (position < max_T) sequences[(long long)row * max_T + position] = token;
}

// The launches' common arguments: rows `first_row` on, blockIdx.y the row among them (and in the scratch), blockIdx.x
// the chunk; a block's two partial words, ticket and exchange.
#define ROW_ARGUMENTS RowState* states, u64* partials, unsigned* tickets, u64* exchanges, const float* logits, \
                      int first_row, int V, int stride
#define ROW_SETUP                         \
    RowState& state = states[blockIdx.y]; \
    BLOCK_SETUP;                          \
    const float* x = logits + (long long)(first_row + blockIdx.y) * stride

// First: the largest z and its id (temperature 0: z is the logit, and the id is the token), and when top-k cuts
// (top_k < V), its cut: shortlisted when top_k <= THREADS (the blocks' shortlists, `top_k` * ROW_LOADS words a block,
// and the row's finalists as many), else top-k's first radix pass over the z's order keys.
extern "C" __global__ void __launch_bounds__(THREADS)
sample_best_kernel(ROW_ARGUMENTS, int* tokens, int* sequences, const int* lengths, int max_T, float temperature,
                   int top_k, u64* shortlists, u64* finalists) {
    ROW_SETUP;
    float divisor = temperature > 0.0f ? temperature : 1.0f;  // / 1.0f is exact: the plain row
    bool cutting = temperature > 0.0f && top_k < V, shortlisting = cutting && top_k <= THREADS;
    u64 keys[ROW_LOADS], bound = 0;
    u64 own = own_keys(x, V, keys, [&](int j, float value) { return ranked(order_key(value / divisor), j); });
    if (shortlisting) {
        bound = shortlist_block(keys, own, top_k, exchange, shortlists + (long long)block * top_k * ROW_LOADS);
    } else if (cutting) {
        count_z_digits(state, x, V, temperature, 24);
    }
    u64 best = block_combine(own, exchange, larger<u64>);
    if (threadIdx.x == 0) {
        own_partials[0] = best;
        own_partials[1] = bound;
    }
    if (!last_of_row(&state.arrived, ticket)) return;
    best = combine_partials(row_partials, 2, 0, exchange, larger<u64>);
    if (temperature == 0.0f) {
        int row = first_row + blockIdx.y;
        if (threadIdx.x == 0) write_token(tokens, sequences, row, lengths[row], max_T, index_of(best));
        return;
    }
    if (threadIdx.x == 0) state.best = best;
    if (shortlisting) {
        long long listed = (long long)blockIdx.y * gridDim.x * top_k * ROW_LOADS;  // the row's shortlists' words
        rank_shortlists(shortlists + listed, top_k, combine_partials(row_partials, 2, 1, exchange, larger<u64>),
                        finalists + listed, &state.entered, [&](int rank, u64 key) {
                            if (rank == top_k - 1) state.least_logit = (unsigned)(key >> 32);
                        });
    } else if (cutting) {
        choose_digit(state, top_k, 24, &state.least_logit, exchange);
    }
}

// Top-k's radix passes after the first (shift 16, 8, 0), when top_k > THREADS: each z's order key, counted once.
extern "C" __global__ void __launch_bounds__(THREADS)
sample_top_k_kernel(ROW_ARGUMENTS, float temperature, int shift) {
    ROW_SETUP;
    count_z_digits(state, x, V, temperature, shift);
    if (!last_of_row(&state.arrived, ticket)) return;
    choose_digit(state, state.target, shift, &state.least_logit, exchange);
}

// Top-p's radix passes (shift 24, 16, 8, 0): the bits of each probability top-k keeps, weighted by its mass. The first
// also totals the masses, so that its last block knows the target: top_p of the kept mass, rounded up.
extern "C" __global__ void __launch_bounds__(THREADS)
sample_top_p_kernel(ROW_ARGUMENTS, float temperature, int top_k, float top_p, int shift) {
    ROW_SETUP;
    Weights weights = weights_of(state, temperature, top_k, 1.0f, V);  // without the cut this pass looks for
    u64 own_mass = 0;
    count_digits(state, x, V, shift, [&](float value, unsigned& key) {
        float p = weights.probability(value);
        key = __float_as_uint(p);
        u64 mass = Weights::mass(p);
        own_mass += mass;
        return mass;
    });
    if (shift == 24) {
        u64 mass = block_combine(own_mass, exchange, plus<u64>);
        if (threadIdx.x == 0) own_partials[0] = mass;
    }
    if (!last_of_row(&state.arrived, ticket)) return;
    u64 target = state.target;
    if (shift == 24) {
        target = (u64)ceil((double)top_p * (double)combine_partials(row_partials, 2, 0, exchange, plus<u64>));
        target = target > 0 ? target : 1;
    }
    choose_digit(state, target, shift, &state.least_probability, exchange);
}

// Last: each chunk's kept mass; then the row's last block draws u in [0, kept mass) and picks the first id, in id
// order, whose running kept mass passes it. Every thread finds the chunk it falls in; there each thread takes
// ROW_LOADS ids in order, and the one whose ids' masses span u picks among them.
extern "C" __global__ void __launch_bounds__(THREADS)
sample_draw_kernel(ROW_ARGUMENTS, int* tokens, int* sequences, const int* lengths, int max_T, float temperature,
                   int top_k, float top_p, const u64* seed) {
    ROW_SETUP;
    Weights weights = weights_of(state, temperature, top_k, top_p, V);
    u64 own = 0;
    for_each_own(x, V, [&](int u, int j, float value) { own += weights.kept_mass(value); });
    own = block_combine(own, exchange, plus<u64>);
    if (threadIdx.x == 0) own_partials[0] = own;
    if (!last_of_row(&state.arrived, ticket)) return;
    exchange[threadIdx.x] = threadIdx.x < gridDim.x ? row_partials[2 * threadIdx.x] : 0ull;  // the chunks' masses
    __syncthreads();
    int row = first_row + blockIdx.y, position = lengths[row], chunk = 0;
    u64 total = 0;
    for (int c = 0; c < gridDim.x; c++) total += exchange[c];
    u64 random = splitmix64(*seed ^ splitmix64(((u64)row << 32) | (unsigned)position));
    u64 u = __umul64hi(random, total);  // uniform in [0, total): total >= 2^40, the largest token's
    u64 before = 0;  // the kept mass of the ids before the chunk, then before this thread's ids
    for (u64 mass; before + (mass = exchange[chunk]) <= u; chunk++) before += mass;
    int begin = chunk * CHUNK + threadIdx.x * ROW_LOADS, end = min(V, begin + ROW_LOADS);
    u64 span = 0;
    for (int j = begin; j < end; j++) span += weights.kept_mass(x[j]);
    __syncthreads();  // the chunks' masses have been read
    exchange[threadIdx.x] = span;
    __syncthreads();
#pragma unroll 16
    for (int t = 0; t < THREADS; t++) before += t < (int)threadIdx.x ? exchange[t] : 0ull;
    if (before <= u && u < before + span) {
        int token = begin;
        for (u64 running = before + weights.kept_mass(x[token]); running <= u; running += weights.kept_mass(x[token]))
            token++;
        write_token(tokens, sequences, row, position, max_T, token);
    }
}
"""
OPTIONS = ("-std=c++17",)  # the passes take lambdas
DEFINES = dict(ROW_DEFINES, ROW_WORDS=ROW_WORDS)
KERNEL_NAMES = ("sample_best_kernel", "sample_top_k_kernel", "sample_top_p_kernel", "sample_draw_kernel")


def sampling_kernels(source: str = SAMPLING_SOURCE) -> tuple[CudaKernel, ...]:
    """sample_forward's four kernels (best, top-k, top-p, draw), compiled from `source`."""
    return tuple(CudaKernel(source, name, defines=DEFINES, options=OPTIONS) for name in KERNEL_NAMES)


KERNELS = sampling_kernels()


@functools.cache
def row_scratch(device: int, rows: int, chunks: int, state_words: int, shortlisted: int) -> tuple:
    """For `rows` rows of `chunks` chunks: their states (`state_words` words a row), and their blocks' partials,
    tickets and exchanges, and when a row's `shortlisted` best are (else 0) its blocks' shortlists and rows'
    finalists; made once per device and shape (the first call runs eagerly, before any CUDA graph captures the
    launches that use them). A call zeroes the states and writes everything else before it reads it: nothing passes
    from one call to the next."""
    import cupy

    listed = rows * chunks * shortlisted * ROW_LOADS
    return (cupy.empty(rows * state_words, np.uint64), cupy.empty(rows * chunks * 2, np.uint64),
            cupy.empty(rows * chunks, np.uint32), cupy.empty(rows * chunks * EXCHANGE, np.uint64),
            cupy.empty(max(listed, 1), np.uint64), cupy.empty(max(listed, 1), np.uint64))


def sample_forward(tokens, sequences, logits, lengths, B, V, stride, max_T, temperature, top_k, top_p, seed):
    """Each row's next token from logits (B, stride) into tokens (B,) and sequences (B, max_T) at lengths (B,);
    temperature 0 is greedy; top_k 0 or >= V and top_p None or >= 1 cut nothing."""
    check_array("sample_forward", "logits", logits, B * stride)
    for name, array, size in (("tokens", tokens, B), ("sequences", sequences, B * max_T), ("lengths", lengths, B)):
        check_array("sample_forward", name, array, size, np.int32)
    check_array("sample_forward", "seed", seed, 1, np.uint64)
    if not 0 < V <= stride or V > MAX_V:
        raise KernelArgumentError(f"sample_forward: V={V} must be in 1..stride={stride}, and at most {MAX_V}")
    if temperature < 0 or (top_p is not None and top_p <= 0):
        raise KernelArgumentError(f"sample_forward: temperature={temperature} must be >= 0 and top_p={top_p} > 0")
    launch(KERNELS, tokens, sequences, logits, lengths, B, V, stride, max_T, temperature, top_k, top_p, seed)


def launch(kernels, tokens, sequences, logits, lengths, B, V, stride, max_T, temperature, top_k, top_p, seed):
    """`kernels` (KERNELS, or sampling_kernels of another source) over the B rows, ROWS_AT_ONCE at a time: the passes
    the cuts need, no cut passing as top-k V, top-p 1."""
    import cupy

    best, top_k_pass, top_p_pass, draw = kernels
    top_k, top_p = np.int32(min(top_k or V, V)), np.float32(1.0 if top_p is None else top_p)
    temperature, chunks = np.float32(temperature), ceil_div(V, CHUNK)
    cutting = temperature > 0 and top_k < V  # sample_best_kernel shortlists top-k up to THREADS, past it radix passes
    shortlisted = int(top_k) if cutting and top_k <= THREADS else 0
    for first in range(0, B, ROWS_AT_ONCE):
        rows = min(ROWS_AT_ONCE, B - first)
        states, *blocks, shortlists, finalists = row_scratch(cupy.cuda.Device().id, rows, chunks, ROW_WORDS, shortlisted)
        states.fill(0)
        row = (states, *blocks, logits, np.int32(first), np.int32(V), np.int32(stride))
        grid, block = (chunks, rows), (THREADS,)
        best(grid, block, (*row, tokens, sequences, lengths, np.int32(max_T), temperature, top_k, shortlists,
                           finalists))
        if temperature == 0:
            continue
        for shift in (16, 8, 0) if cutting and not shortlisted else ():
            top_k_pass(grid, block, (*row, temperature, np.int32(shift)))
        for shift in (24, 16, 8, 0) if top_p < 1 else ():
            top_p_pass(grid, block, (*row, temperature, top_k, top_p, np.int32(shift)))
        draw(grid, block, (*row, tokens, sequences, lengths, np.int32(max_T), temperature, top_k, top_p, seed))
