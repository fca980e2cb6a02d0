"""LayerNorm's backward pass, from the forward pass's saved mean and rstd (B, T).

The forward pass (kernels/layernorm.py) computed, for every row of C channels,

    n   = (x - mean) * rstd              the normalized row
    out = n * weight + bias

and kept mean and rstd, so n is recomputed here from inp rather than stored. Given
dout (B, T, C), the gradients are

    dbias   += sum over the B*T rows of dout
    dweight += sum over the B*T rows of dout * n
    dnorm    = dout * weight
    dinp    += rstd * (dnorm - mean(dnorm) - n * mean(dnorm * n))   (means over the row's C)

Every x of a row moves the row's mean and rstd, and through them every n of the row:
the two means are what that path hands back. All three are added to, not written:
dweight and dbias are parameters' gradients, and dinp is the residual stream's, which
also gathers the gradient of the branch this layernorm starts.

Two kinds of reductions, then. The row means sum C values, as in the forward pass.
dweight and dbias sum over all B*T rows, a column each: one thread per column alone
would walk thousands of rows; atomicAdd from every row onto C floats would make
thousands of additions queue on each float, in an order that changes from run to run.

* layernorm_backward_registers_kernel, for rows of up to 1024 columns (GPT-2 124M's
  768, medium's 1024): one block of WARPS warps per ROWS_PER_BLOCK consecutive rows,
  each warp taking a row (then the row WARPS further). Its lanes load the row's
  columns lane, lane + 32, ... of dout, inp and dinp at once (a warp's load is 128
  contiguous bytes; the loop over a lane's columns is unrolled, so every load is in
  flight together) and keep them in registers: the row is read from memory once. The
  two row sums meet by shuffles, which leave the total in every lane, and each lane
  writes its columns of dinp. Each lane also adds its columns' dout * n and dout into
  its warp's own sums in shared memory (no other lane touches them, so no barrier a
  row); after the block's rows, one barrier, and thread t adds column t's WARPS sums
  (then column t + blockDim.x's) in warp order into the block's slice of scratch.
  Registers are sized to the row: C / 32 columns a lane, rounded up to 4, one build
  per size; four warps a block (168 registers a thread at C = 768 on sm_90) let three
  blocks share an SM, where the sums kept in registers allowed one of eight warps.
* layernorm_backward_kernel, for wider rows (GPT-2 XL's 1600), whose registers a lane
  could not hold: the same blocks and warps, but each lane reads its columns as it
  needs them, for the row sums and then again (from cache) for dinp. Then the column
  sums: thread t takes columns t, t + blockDim.x, ... and adds up dout * n and dout
  over the block's rows in order, reading them once more, from cache, and writes its
  columns' sums to the block's own slice of scratch.
* layernorm_parameter_grads_kernel: per 32 columns, 32 x SLICES threads add up the
  blocks' slices, each thread every SLICES-th, and the first row of threads adds up
  its column's SLICES subtotals in order and the total into dweight and dbias.

Every sum is taken in an order fixed by B, T and C alone (not by the GPU's size or by
which block finishes first), so a call gives the same bits every time. What it costs: 2 * C
floats of scratch per 16 rows, written once and read once, 4C floats against the 64C
that the 16 rows' dout, inp and dinp move: a sixteenth more traffic. The signature's
scratch is (B, T, 2C), twice dout's size, so a caller needs no formula; the kernel uses
its first sixteenth.
"""

import functools

import numpy as np

from gpt2kit.kernel_runtime import CudaKernel, ceil_div, check_array, check_dims

ROWS_PER_BLOCK = 16  # rows a block sums into one slice of scratch
WARPS = 4  # per rows block: each warp takes every WARPS-th of its rows
SLICES = 32  # threads per column in the parameter kernel: each adds every SLICES-th slice
MAX_COLUMNS_PER_LANE = 32  # rows of up to 32 * 32 = 1024 columns are held in registers; wider ones are read again

LAYERNORM_BACKWARD_SOURCE = r"""
// The sum of value over the warp, in every lane.
__device__ float warp_sum(float value) {
    for (int offset = 16; offset > 0; offset /= 2) {
        value += __shfl_xor_sync(0xffffffff, value, offset);
    }
    return value;
}

// grid ceil(N / ROWS_PER_BLOCK), WARPS * 32 threads. Adds into dinp; block p writes its rows' sums of dout * n to
// scratch[p][0][:] and of dout to scratch[p][1][:].
extern "C" __global__ void __launch_bounds__(WARPS * 32)
layernorm_backward_kernel(float* dinp, float* scratch, const float* dout, const float* inp, const float* weight,
                          const float* mean, const float* rstd, int N, int C) {
    // BEGIN SOLUTION
    const int first = blockIdx.x * ROWS_PER_BLOCK, rows = min(ROWS_PER_BLOCK, N - first);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int r = warp; r < rows; r += WARPS) {  // dinp: a warp per row
        const long long row = first + r;
        const float* g = dout + row * C;
        const float* x = inp + row * C;
        float* dx = dinp + row * C;
        const float mu = mean[row], s = rstd[row];
        float dnorm_sum = 0.0f, dnorm_n_sum = 0.0f;
        #pragma unroll 4
        for (int i = lane; i < C; i += 32) {
            float n = (x[i] - mu) * s;
            float dnorm = g[i] * weight[i];
            dnorm_sum += dnorm;
            dnorm_n_sum += dnorm * n;
        }
        const float dnorm_mean = warp_sum(dnorm_sum) / C, dnorm_n_mean = warp_sum(dnorm_n_sum) / C;
        #pragma unroll 4
        for (int i = lane; i < C; i += 32) {
            float n = (x[i] - mu) * s;
            float dnorm = g[i] * weight[i];
            dx[i] += s * ((dnorm - dnorm_mean) - n * dnorm_n_mean);
        }
    }
    float* slice = scratch + (long long)blockIdx.x * 2 * C;
    for (int i = threadIdx.x; i < C; i += blockDim.x) {  // the column sums: a thread per column, the rows in order
        float dweight_sum = 0.0f, dbias_sum = 0.0f;
        #pragma unroll  // every row's loads in flight at once; the additions keep their order
        for (int r = 0; r < ROWS_PER_BLOCK; r++) {
            if (r < rows) {
                const long long row = first + r;
                const float g = dout[row * C + i];
                dweight_sum += g * ((inp[row * C + i] - mean[row]) * rstd[row]);
                dbias_sum += g;
            }
        }
        slice[i] = dweight_sum;
        slice[C + i] = dbias_sum;
    }
    // END SOLUTION
}

// grid ceil(N / ROWS_PER_BLOCK), WARPS * 32 threads, for rows of C <= 32 * COLUMNS_PER_LANE: the same results
// into dinp and scratch as layernorm_backward_kernel, every row read once. Lane l of a warp holds columns l, l + 32,
// ... of its row (dout * weight, n and dinp) in registers and adds its columns' dout * n and dout into its warp's
// own sums in shared memory, which no other lane touches until the block's rows are done.
extern "C" __global__ void __launch_bounds__(WARPS * 32)
layernorm_backward_registers_kernel(float* dinp, float* scratch, const float* dout, const float* inp,
                                    const float* weight, const float* mean, const float* rstd, int N, int C) {
    // BEGIN SOLUTION
    __shared__ float warp_sums[WARPS][2][32 * COLUMNS_PER_LANE];  // warp w's sums of dout * n and of dout, by column
    const int first = blockIdx.x * ROWS_PER_BLOCK, rows = min(ROWS_PER_BLOCK, N - first);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float* dweight_sum = warp_sums[warp][0];
    float* dbias_sum = warp_sums[warp][1];
    #pragma unroll
    for (int k = 0; k < COLUMNS_PER_LANE; k++) dweight_sum[lane + 32 * k] = dbias_sum[lane + 32 * k] = 0.0f;
    for (int r = warp; r < rows; r += WARPS) {
        const long long row = first + r;
        const float mu = mean[row], s = rstd[row];
        float dnorm[COLUMNS_PER_LANE], n[COLUMNS_PER_LANE], dx[COLUMNS_PER_LANE];
        float dnorm_sum = 0.0f, dnorm_n_sum = 0.0f;
        #pragma unroll
        for (int k = 0; k < COLUMNS_PER_LANE; k++) {  // unrolled: every load of the row is in flight at once
            const int i = lane + 32 * k;
            const float g = i < C ? dout[row * C + i] : 0.0f;
            n[k] = i < C ? (inp[row * C + i] - mu) * s : 0.0f;
            dx[k] = i < C ? dinp[row * C + i] : 0.0f;
            dnorm[k] = i < C ? g * weight[i] : 0.0f;
            dnorm_sum += dnorm[k];
            dnorm_n_sum += dnorm[k] * n[k];
            dweight_sum[i] += g * n[k];
            dbias_sum[i] += g;
        }
        const float row_dnorm_mean = warp_sum(dnorm_sum) / C, row_dnorm_n_mean = warp_sum(dnorm_n_sum) / C;
        #pragma unroll
        for (int k = 0; k < COLUMNS_PER_LANE; k++) {
            const int i = lane + 32 * k;
            if (i < C) dinp[row * C + i] = dx[k] + s * ((dnorm[k] - row_dnorm_mean) - n[k] * row_dnorm_n_mean);
        }
    }
    __syncthreads();
    float* slice = scratch + (long long)blockIdx.x * 2 * C;
    for (int i = threadIdx.x; i < C; i += WARPS * 32) {  // each column's warp sums, added in warp order
        float dweight_total = 0.0f, dbias_total = 0.0f;
        #pragma unroll
        for (int w = 0; w < WARPS; w++) {
            dweight_total += warp_sums[w][0][i];
            dbias_total += warp_sums[w][1][i];
        }
        slice[i] = dweight_total;
        slice[C + i] = dbias_total;
    }
    // END SOLUTION
}

// grid ceil(C / 32), block (32, SLICES): thread (x, y) sums column blockIdx.x * 32 + x of the slices
// y, y + SLICES, ... of scratch; those SLICES subtotals, added in order, go into dweight and dbias.
extern "C" __global__ void __launch_bounds__(32 * SLICES)
layernorm_parameter_grads_kernel(float* dweight, float* dbias, const float* scratch, int slices, int C) {
    // BEGIN SOLUTION
    __shared__ float subtotals[2][SLICES][32];
    const int column = blockIdx.x * 32 + threadIdx.x;
    float dweight_sum = 0.0f, dbias_sum = 0.0f;
    if (column < C) {
        for (int p = threadIdx.y; p < slices; p += SLICES) {
            const float* slice = scratch + (long long)p * 2 * C;
            dweight_sum += slice[column];
            dbias_sum += slice[C + column];
        }
    }
    subtotals[0][threadIdx.y][threadIdx.x] = dweight_sum;
    subtotals[1][threadIdx.y][threadIdx.x] = dbias_sum;
    __syncthreads();
    if (threadIdx.y == 0 && column < C) {
        float dweight_total = 0.0f, dbias_total = 0.0f;
        for (int y = 0; y < SLICES; y++) {
            dweight_total += subtotals[0][y][threadIdx.x];
            dbias_total += subtotals[1][y][threadIdx.x];
        }
        dweight[column] += dweight_total;
        dbias[column] += dbias_total;
    }
    // END SOLUTION
}
"""

# COLUMNS_PER_LANE: the registers kernel's; the widest rows' here, rows_kernel_for picks each C's
DEFINES = dict(ROWS_PER_BLOCK=ROWS_PER_BLOCK, WARPS=WARPS, SLICES=SLICES, COLUMNS_PER_LANE=MAX_COLUMNS_PER_LANE)
layernorm_backward_kernel = CudaKernel(LAYERNORM_BACKWARD_SOURCE, "layernorm_backward_kernel", defines=DEFINES)
layernorm_backward_registers_kernel = CudaKernel(LAYERNORM_BACKWARD_SOURCE, "layernorm_backward_registers_kernel",
                                                 defines=DEFINES)
layernorm_parameter_grads_kernel = CudaKernel(LAYERNORM_BACKWARD_SOURCE, "layernorm_parameter_grads_kernel",
                                              defines=DEFINES)


def layernorm_backward(dinp, dweight, dbias, scratch, dout, inp, weight, mean, rstd, B, T, C):
    check_dims("layernorm_backward", B=B, T=T, C=C)
    for name, array, size in (("dinp", dinp, B * T * C), ("dweight", dweight, C), ("dbias", dbias, C),
                              ("scratch", scratch, 2 * B * T * C), ("dout", dout, B * T * C),
                              ("inp", inp, B * T * C), ("weight", weight, C), ("mean", mean, B * T),
                              ("rstd", rstd, B * T)):
        check_array("layernorm_backward", name, array, size)
    launch(rows_kernel_for(C), layernorm_parameter_grads_kernel,
           dinp, dweight, dbias, scratch, dout, inp, weight, mean, rstd, B, T, C)


def rows_kernel_for(C, registers_kernel=None):
    """The rows kernel for rows of C columns: `registers_kernel` (layernorm_backward_registers_kernel, or one with
    its defines) with ceil(C / 32) registers a lane rounded up to a multiple of 4 (eight builds cover every C up
    to 32 * MAX_COLUMNS_PER_LANE); layernorm_backward_kernel for wider rows."""
    if C > 32 * MAX_COLUMNS_PER_LANE:
        return layernorm_backward_kernel
    return _with_columns_per_lane(registers_kernel or layernorm_backward_registers_kernel, 4 * ceil_div(C, 128))


@functools.cache
def _with_columns_per_lane(kernel, columns_per_lane):
    return kernel.with_defines(COLUMNS_PER_LANE=columns_per_lane)


def launch(rows_kernel, parameters_kernel, dinp, dweight, dbias, scratch, dout, inp, weight, mean, rstd, B, T, C):
    """rows_kernel (rows_kernel_for's, or one with its parameters) over blocks of ROWS_PER_BLOCK rows,
    then parameters_kernel (layernorm_parameter_grads_kernel's) over their slices of scratch."""
    slices = ceil_div(B * T, ROWS_PER_BLOCK)
    rows_kernel((slices,), (WARPS * 32,), (dinp, scratch, dout, inp, weight, mean, rstd, np.int32(B * T), np.int32(C)))
    parameters_kernel((ceil_div(C, 32),), (32, SLICES), (dweight, dbias, scratch, np.int32(slices), np.int32(C)))
