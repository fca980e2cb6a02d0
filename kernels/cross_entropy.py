"""The classifier's loss and its gradient in one kernel: cross-entropy forward and backward, fused.

    losses[b, t]      = log(sum over j < V of exp(logits[b, t, j])) - logits[b, t, targets[b, t]]
    dlogits[b, t, j]  = (softmax(logits[b, t, :V])[j] - (j == targets[b, t])) / (B * T)   for j < V
    dlogits[b, t, j]  = 0                                                                  for V <= j < Vp

logits (B, T, Vp) are the last matmul's output, each row's V real logits first: the
vocabulary is padded to Vp columns (GPT-2's 50257 to 50304) so rows start at aligned
addresses, and the padding is never read as a logit. The gradient is that of the mean
loss over the B * T positions, hence the division; the padding columns get an exact 0.
dlogits may be the logits array itself, as llm.c's fused_classifier writes it in place:
the logits are never needed again.

Blocks of up to 1024 threads, each taking whole rows (b, t) in turn, its threads
striding over the columns 4 at a time (16-byte loads when the rows are aligned):
1. each thread keeps a running maximum m and a running sum of exp(x - m) over its
   columns (an "online" softmax: when a larger x comes, the sum so far is rescaled by
   exp(m_old - x)); then the block's maximum, and the block's sum with each thread's
   rescaled to it. Subtracting the maximum keeps every exponent <= 0: exp(x) itself
   overflows float32 past x = 88.7, and logits can be far larger.
2. the loss from log-sum-exp, max + log(sum), minus the target's logit.
3. each thread computes exp(x - max) / sum for its columns again, subtracts 1 at the
   target, scales by 1 / (B * T) and writes: the probabilities are never stored whole,
   so the row is read twice and written once.
The second read is what decides the speed: from memory, it makes the traffic one and a
half times what the loss needs. So it should come from L2, and the launcher starts no
more blocks than leaves every row being read in half of L2 (GPT-2's 201 KB rows: one
block per SM on an H100's 50 MB). The first read goes backwards, from the row's end:
the second, from its start, first asks for the lines read last, the likeliest still
there; and it marks its loads as the lines' last use, its stores as streamed, so that
L2 keeps the lines other blocks have yet to read again.
In place, a thread overwrites only the columns it has just read itself, and the
target's logit is read before the first barrier: no row is written before it has
been read.

A target outside [0, V) would read another row or unmapped memory; instead its row's
loss and gradient are filled with NaN, which any later check sees. The host cannot
check the targets without copying them back and waiting for the GPU.
"""

import numpy as np

from gpt2kit.kernel_runtime import (CudaKernel, KernelArgumentError, ceil_div, check_array, check_dims, l2_cache_bytes,
                                    multiprocessor_count, threads_per_multiprocessor)

MAX_THREADS = 1024  # a block's threads, on one row at a time; fewer for short rows (a warp multiple covering Vp / 4)

# The block-wide reductions of a row this kernel needs, shared with kernels/group_norm.py.
BLOCK_REDUCTIONS = r"""
#define FULL_MASK 0xffffffffu
#define MINUS_INFINITY __int_as_float(0xff800000)
#define NO_INDEX 0x7fffffff

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

CROSS_ENTROPY_SOURCE = BLOCK_REDUCTIONS + r"""
#define NOT_A_NUMBER __int_as_float(0x7fffffff)
#define GROUPS_IN_FLIGHT 2  // a thread's loads of the first read issued before it waits on any

// Columns column .. column + 3 of a row into v: one 16-byte load when the rows are aligned (the group then lies
// inside the row, padding included), else only the real columns (< V), 0 past them. The row's second read is
// its last (__ldcs: evicted first, the lines other rows still need to read again stay in L2).
__device__ void read_group(const float* x, int column, int V, bool vectorized, bool last_read, float v[4]) {
    if (vectorized) {
        float4 a = last_read ? __ldcs((const float4*)(x + column)) : *(const float4*)(x + column);
        v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
    } else {
        for (int k = 0; k < 4; k++) v[k] = column + k < V ? x[column + k] : 0.0f;
    }
}

// Columns column .. column + 3 of a row from d, those inside the row (< Vp).
__device__ void write_group(float* y, int column, int Vp, bool vectorized, const float d[4]) {
    if (vectorized) {
        __stcs((float4*)(y + column), make_float4(d[0], d[1], d[2], d[3]));  // streamed: not read here again
    } else {
        for (int k = 0; k < 4; k++) if (column + k < Vp) y[column + k] = d[k];
    }
}

// One more value into a running (max, sum of exp(x - max)): one expf, and one more when the max grows.
__device__ void accumulate(float value, float& running_max, float& running_sum) {
    if (value > running_max) {
        running_sum = running_sum * expf(running_max - value) + 1.0f;  // the first value: 0 * 0 + 1
        running_max = value;
    } else {
        running_sum += expf(value - running_max);
    }
}

// A block per SM or a few, each taking rows blockIdx.x, blockIdx.x + gridDim.x, ... (B * T rows of Vp, the
// first V real); dlogits may be logits.
extern "C" __global__ void __launch_bounds__(MAX_THREADS)
cross_entropy_kernel(float* dlogits, float* losses, const float* logits, const int* targets, int V, int Vp,
                     int rows) {
    __shared__ float best_scores[32];
    __shared__ int best_indices[32];
    __shared__ float partial[32];
    // BEGIN SOLUTION
    bool vectorized = Vp % 4 == 0 && (((size_t)logits | (size_t)dlogits) % 16) == 0;
    int real_groups = (V + 3) / 4, all_groups = (Vp + 3) / 4;
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        const float* x = logits + row * Vp;
        float* dx = dlogits + row * Vp;
        int target = targets[row];
        if (target < 0 || target >= V) {  // NaN: a bad target must not pass silently (the branch is the block's)
            for (int j = threadIdx.x; j < Vp; j += blockDim.x) dx[j] = NOT_A_NUMBER;
            if (threadIdx.x == 0) losses[row] = NOT_A_NUMBER;
            continue;
        }
        float target_logit = x[target];  // before the barriers below: in place, its column is overwritten after them

        // the first read goes from the row's end back: the second, from its start, first reads what was read last
        float thread_max = MINUS_INFINITY, thread_sum = 0.0f;
        for (int i0 = threadIdx.x; i0 < real_groups; i0 += GROUPS_IN_FLIGHT * blockDim.x) {
            float v[GROUPS_IN_FLIGHT][4];
            #pragma unroll
            for (int u = 0; u < GROUPS_IN_FLIGHT; u++) {  // the loads first, then the arithmetic that waits on them
                int i = i0 + u * blockDim.x;
                if (i < real_groups) read_group(x, 4 * (real_groups - 1 - i), V, vectorized, false, v[u]);
            }
            #pragma unroll
            for (int u = 0; u < GROUPS_IN_FLIGHT; u++) {
                int i = i0 + u * blockDim.x, g = real_groups - 1 - i;
                if (i >= real_groups) break;
                for (int k = 0; k < 4 && 4 * g + k < V; k++) accumulate(v[u][k], thread_max, thread_sum);
            }
        }
        float row_max = thread_max;
        int unused = 0;
        block_best(row_max, unused, best_scores, best_indices);
        // a thread that saw no column adds 0 * exp(-inf) = 0
        float row_sum = block_sum(thread_sum * expf(thread_max - row_max), partial);
        float log_sum_exp = row_max + logf(row_sum);
        if (threadIdx.x == 0) losses[row] = log_sum_exp - target_logit;

        float inverse_sum = 1.0f / row_sum;
        float grad_scale = 1.0f / rows;  // the mean over B * T positions
        for (int g = threadIdx.x; g < all_groups; g += blockDim.x) {
            float v[4], d[4];
            read_group(x, 4 * g, V, vectorized, true, v);
            for (int k = 0; k < 4; k++) {
                int j = 4 * g + k;
                float indicator = j == target ? 1.0f : 0.0f;
                d[k] = j < V ? (expf(v[k] - row_max) * inverse_sum - indicator) * grad_scale : 0.0f;
            }
            write_group(dx, 4 * g, Vp, vectorized, d);
        }
    }
    // END SOLUTION
}
"""

cross_entropy_kernel = CudaKernel(CROSS_ENTROPY_SOURCE, "cross_entropy_kernel", defines=dict(MAX_THREADS=MAX_THREADS))


def cross_entropy_forward_backward(dlogits, losses, logits, targets, B, T, V, Vp):
    """losses (B, T) and dlogits (B, T, Vp), both written, from logits (B, T, Vp) and targets (B, T) int32 in
    [0, V) (a row whose target is not gets NaN); dlogits may be logits."""
    check_dims("cross_entropy_forward_backward", B=B, T=T, V=V, Vp=Vp)
    if V > Vp:
        raise KernelArgumentError(f"cross_entropy_forward_backward: V={V} must be at most the row width Vp={Vp}")
    check_array("cross_entropy_forward_backward", "logits", logits, B * T * Vp)
    check_array("cross_entropy_forward_backward", "targets", targets, B * T, np.int32)
    check_array("cross_entropy_forward_backward", "dlogits", dlogits, B * T * Vp)
    check_array("cross_entropy_forward_backward", "losses", losses, B * T)
    launch(cross_entropy_kernel, dlogits, losses, logits, targets, B, T, V, Vp)


def launch(kernel, dlogits, losses, logits, targets, B, T, V, Vp):
    """`kernel` (cross_entropy_kernel, or one with its parameters): blocks of up to MAX_THREADS threads taking
    the rows in turn, as many as the SMs hold, but no more rows at once than fill half of L2."""
    threads = min(MAX_THREADS, 32 * ceil_div(ceil_div(Vp, 4), 32))
    sms = multiprocessor_count()
    blocks_per_sm = max(1, min(threads_per_multiprocessor() // threads, l2_cache_bytes() // (8 * Vp * sms)))
    blocks = min(B * T, blocks_per_sm * sms)
    kernel((blocks,), (threads,), (dlogits, losses, logits, targets, np.int32(V), np.int32(Vp), np.int32(B * T)))
