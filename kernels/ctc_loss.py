"""CTC loss and its gradient at the logits: the loss Wav2Vec2ForCTC trains with (blank 0).

    ctc_loss_forward_backward(dlogits, losses, logits, targets, input_lengths, target_lengths, B, T, V, S)

Utterance b has input_lengths[b] frames of logits (B, T, V) and target_lengths[b] labels
targets[b, :U] (ids in 1..V-1; the batch is padded to S). CTC sums over every alignment:
a path through the extended sequence ext = (blank, l1, blank, l2, ..., lU, blank) of
L = 2U + 1 states that starts at ext[0] or ext[1], ends at ext[L-1] or ext[L-2], and
at each frame stays, moves one state on, or skips a blank between two different
labels. With lp the log-softmax of the logits,

    alpha[t, s] = logsumexp(alpha[t-1, s], alpha[t-1, s-1], alpha[t-1, s-2] if skip(s)) + lp[t, ext[s]]
    beta[t, s]  = logsumexp(beta[t+1, s], beta[t+1, s+1], beta[t+1, s+2] if skip(s+2)) + lp[t, ext[s]]
    losses[b]   = -log p(labels) = -logsumexp(alpha[T_b-1, L-1], alpha[T_b-1, L-2])
    dlogits[t, v] = softmax[t, v] - sum over s with ext[s] = v of exp(alpha[t, s] + beta[t, s] - lp[t, v] + losses[b])

for frames t < T_b = input_lengths[b]; dlogits is 0 at the padded frames, whose logits
are never read as such. The gradient is that of the sum of the losses (transformers'
ctc_loss_reduction "sum"). Both recursions count frame t's emission, so the
occupancy of state s at frame t subtracts it once. Everything is in log space:
probabilities of 800 frames' alignments are far below float32's range.

An utterance no alignment fits (more labels, plus repeats, than frames) has loss +inf
and a NaN gradient, as torch.nn.functional.ctc_loss gives. An id outside [1, V), or a
length outside its range, gives NaN rather than reading past a row.

Three launches:
1. ctc_log_softmax_kernel: one warp per frame (b, t): lp into a scratch, and the
   softmax into dlogits (0 at padded frames).
2. ctc_alpha_beta_kernel: one block per utterance and direction, its threads over the
   states, the frames in order with a barrier between them: alpha forwards, beta
   backwards, each (B, T, L_max) in the scratch.
3. ctc_gradient_kernel: one warp per frame: the utterance's log-likelihood from
   alpha's last frame, then for each class v (a lane each) the occupancies of the
   states that emit it, summed in state order, subtracted from dlogits; the loss
   written by frame 0's warp.
Scratch (lp, alpha, beta) comes from CuPy's memory pool (a captured graph's own:
kernel_runtime.device.captured). No atomics: every sum has a fixed order.
"""

import numpy as np

from gpt2kit.kernel_runtime import CudaKernel, KernelArgumentError, ceil_div, check_array, check_dims
from gpt2kit.kernel_runtime.device import cupy

WARPS_PER_BLOCK = 8    # frames per block of the softmax and the gradient
STATE_THREADS = 256    # threads over an utterance's states in the recursions

CTC_LOSS_SOURCE = r"""
#define NEG_INFINITY __int_as_float(0xff800000)
#define NAN __int_as_float(0x7fffffff)

// log(exp(a) + exp(b)), exact when either is -inf (no path), with the larger exponent factored out.
__device__ float log_add(float a, float b) {
    if (a == NEG_INFINITY) return b;
    if (b == NEG_INFINITY) return a;
    return fmaxf(a, b) + log1pf(expf(-fabsf(a - b)));
}

// The state's class: a blank at even s, label (s - 1) / 2 at odd s; -1 for an id outside [1, V).
__device__ int state_class(const int* labels, int s, int V) {
    if (s % 2 == 0) return 0;
    const int id = labels[s / 2];
    return (id >= 1 && id < V) ? id : -1;
}

// Whether utterance b's lengths are usable: 1..T frames, 0..S labels.
__device__ bool usable(const int* input_lengths, const int* target_lengths, int b, int T, int S) {
    return input_lengths[b] >= 1 && input_lengths[b] <= T && target_lengths[b] >= 0 && target_lengths[b] <= S;
}

// lp[b, t] = log_softmax(logits[b, t]); dlogits[b, t] = softmax, or 0 past the utterance's frames.
// One warp per frame: grid ceil(B * T / WARPS_PER_BLOCK), WARPS_PER_BLOCK warps.
extern "C" __global__ void ctc_log_softmax_kernel(float* lp, float* dlogits, const float* logits,
                                                  const int* input_lengths, int B, int T, int V) {
    const long long row = (long long)blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= (long long)B * T) return;
    const float* x = logits + row * V;
    float* d = dlogits + row * V;
    if (row % T >= input_lengths[row / T]) {  // a padded frame: no gradient, its logits not read
        for (int v = lane; v < V; v += 32) d[v] = 0.0f;
        return;
    }
    float maximum = NEG_INFINITY;
    for (int v = lane; v < V; v += 32) maximum = fmaxf(maximum, x[v]);
    for (int offset = 16; offset > 0; offset /= 2) {
        maximum = fmaxf(maximum, __shfl_xor_sync(0xffffffff, maximum, offset));
    }
    float sum = 0.0f;
    for (int v = lane; v < V; v += 32) sum += expf(x[v] - maximum);
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffff, sum, offset);
    const float log_sum = maximum + logf(sum);
    for (int v = lane; v < V; v += 32) {
        const float value = x[v] - log_sum;
        lp[row * V + v] = value;
        d[v] = expf(value);
    }
}

// alpha (blockIdx.y 0) or beta (1) of utterance blockIdx.x into table (B, T, L_max), -inf at unreachable states.
// STATE_THREADS threads stride over the states; a barrier between frames.
extern "C" __global__ void __launch_bounds__(STATE_THREADS)
ctc_alpha_beta_kernel(float* alpha, float* beta, const float* lp, const int* targets, const int* input_lengths,
                      const int* target_lengths, int T, int V, int S) {
    const int b = blockIdx.x, L_max = 2 * S + 1;
    if (!usable(input_lengths, target_lengths, b, T, S)) return;  // the gradient kernel writes NaN
    const int frames = input_lengths[b], L = 2 * target_lengths[b] + 1;
    const int* labels = targets + (long long)b * S;
    const float* emissions = lp + (long long)b * T * V;
    const bool forwards = blockIdx.y == 0;
    float* table = (forwards ? alpha : beta) + (long long)b * T * L_max;
    for (int step = 0; step < frames; step++) {
        const int t = forwards ? step : frames - 1 - step;
        float* row = table + (long long)t * L_max;
        for (int s = threadIdx.x; s < L; s += STATE_THREADS) {
            const int v = state_class(labels, s, V);
            const float emission = v < 0 ? NAN : emissions[(long long)t * V + v];
            float before;
            if (step == 0) {  // a path starts on the first two states, and ends on the last two
                before = (forwards ? s <= 1 : s >= L - 2) ? 0.0f : NEG_INFINITY;
            } else {
                const float* previous = row + (forwards ? -L_max : L_max);
                const int next = forwards ? s - 1 : s + 1, skipped = forwards ? s - 2 : s + 2;
                before = previous[s];
                if (next >= 0 && next < L) before = log_add(before, previous[next]);
                // a blank may be skipped only between two different labels
                const int far = forwards ? s : s + 2;
                if (skipped >= 0 && skipped < L && far % 2 == 1 && far >= 2 &&
                    labels[far / 2] != labels[far / 2 - 1]) before = log_add(before, previous[skipped]);
            }
            row[s] = before + emission;
        }
        __syncthreads();  // this frame's states are complete before the next frame reads them
    }
}

// dlogits[b, t, v] -= the occupancy of the states emitting v; losses[b] from frame 0's warp. One warp per frame.
extern "C" __global__ void ctc_gradient_kernel(float* dlogits, float* losses, const float* lp, const float* alpha,
                                               const float* beta, const int* targets, const int* input_lengths,
                                               const int* target_lengths, int B, int T, int V, int S) {
    const long long row = (long long)blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= (long long)B * T) return;
    const int b = (int)(row / T), t = (int)(row % T), L_max = 2 * S + 1;
    float* d = dlogits + row * V;
    if (!usable(input_lengths, target_lengths, b, T, S)) {
        for (int v = lane; v < V; v += 32) d[v] = NAN;
        if (t == 0 && lane == 0) losses[b] = NAN;
        return;
    }
    const int frames = input_lengths[b], L = 2 * target_lengths[b] + 1;
    if (t >= frames) return;  // the softmax kernel wrote its zeros
    const int* labels = targets + (long long)b * S;
    const float* last = alpha + ((long long)b * T + frames - 1) * L_max;
    const float log_likelihood = log_add(last[L - 1], L > 1 ? last[L - 2] : NEG_INFINITY);
    if (t == 0 && lane == 0) losses[b] = -log_likelihood;
    const float* a = alpha + row * L_max;
    const float* c = beta + row * L_max;
    for (int v = lane; v < V; v += 32) {
        if (log_likelihood == NEG_INFINITY) {  // no alignment fits: torch's gradient is NaN
            d[v] = NAN;
            continue;
        }
        float occupancy = 0.0f;
        for (int s = (v == 0 ? 0 : 1); s < L; s += 2) {
            const int emitted = state_class(labels, s, V);
            if (emitted < 0) occupancy = NAN;
            else if (emitted == v) occupancy += expf(a[s] + c[s] - lp[row * V + v] - log_likelihood);
        }
        d[v] -= occupancy;
    }
}
"""

DEFINES = dict(WARPS_PER_BLOCK=WARPS_PER_BLOCK, STATE_THREADS=STATE_THREADS)
KERNELS = tuple(CudaKernel(CTC_LOSS_SOURCE, name, defines=DEFINES)
                for name in ("ctc_log_softmax_kernel", "ctc_alpha_beta_kernel", "ctc_gradient_kernel"))


def ctc_loss_forward_backward(dlogits, losses, logits, targets, input_lengths, target_lengths, B, T, V, S):
    function = "ctc_loss_forward_backward"
    check_dims(function, B=B, T=T, V=V, S=S)
    if V < 2:
        raise KernelArgumentError(f"{function}: V={V} must be at least 2 (the blank and one label)")
    for name, array, size in (("dlogits", dlogits, B * T * V), ("losses", losses, B), ("logits", logits, B * T * V)):
        check_array(function, name, array, size)
    for name, array, size in (("targets", targets, B * S), ("input_lengths", input_lengths, B),
                              ("target_lengths", target_lengths, B)):
        check_array(function, name, array, size, np.int32)
    launch(KERNELS, dlogits, losses, logits, targets, input_lengths, target_lengths, B, T, V, S)


def launch(kernels, dlogits, losses, logits, targets, input_lengths, target_lengths, B, T, V, S):
    """The three launches (or those of kernels that stand in for them, in that order); lp, alpha and beta in a scratch
    from CuPy's memory pool."""
    log_softmax, alpha_beta, gradient = kernels
    lp = cupy.empty(B * T * V, dtype=np.float32)
    alpha, beta = cupy.empty((2, B * T * (2 * S + 1)), dtype=np.float32)
    rows = (ceil_div(B * T, WARPS_PER_BLOCK),)
    B, T, V, S = np.int32(B), np.int32(T), np.int32(V), np.int32(S)
    log_softmax(rows, (32 * WARPS_PER_BLOCK,), (lp, dlogits, logits, input_lengths, B, T, V))
    alpha_beta((B, 2), (STATE_THREADS,), (alpha, beta, lp, targets, input_lengths, target_lengths, T, V, S))
    gradient(rows, (32 * WARPS_PER_BLOCK,), (dlogits, losses, lp, alpha, beta, targets, input_lengths, target_lengths,
                                             B, T, V, S))
