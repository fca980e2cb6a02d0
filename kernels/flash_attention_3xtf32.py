"""Flash attention on the tensor cores at float32 accuracy ("3xTF32"): milestone 3's menu.

    flash_attention_forward(out, lse, inp, B, T, C, NH)     (flash_attention.py's contract)

flash_attention.py computes its two products, the scores S = Q K^T and the output
O = P V, on CUDA cores, and they are most of its time. Here both run on the tensor
cores, each product split into TF32 parts as matmul_3xtf32.py splits them (high =
tf32(x), low = tf32(x - high); low x high, high x low, high x high), so the results
stay inside the strict fp32 bounds. tests/reference/test_three_pass_tf32.py emulates
the same products on the CPU over every case of the spec.

The loop is flash_attention.py's (an online softmax over tiles of keys); what changes
is who holds what:

* A block of 4 warps takes QUERY_ROWS = 64 queries of one (b, h); each warp owns 16
  of them, the rows of an mma's A (32 a warp, two mma tiles, spill registers). Its
  queries, scaled by log2(e) / sqrt(HS), stay in registers as fragments, split into
  high and low parts as they are used.
* S for a tile of KEY_TILE = 64 keys is 8 mma n-tiles of 16 x 8, 32 floats a thread.
  A thread holds two rows of S (g and g + 8, with g = lane / 4): the online softmax
  needs only the four lanes of a row (two shuffles for its maximum).
* The order of k inside a sum does not matter, so each product picks the one that
  suits its loads. For S the head dims are dealt so that a lane's four dims of two
  k-steps are consecutive: one 16-byte load from shared memory gives its key
  fragments of both (rows of K_ROW = CHUNK + 16 floats: the 8 lanes of a load phase
  hit all 32 banks). For O = P V the keys are dealt as S's accumulators left them:
  lane (g, t) holds keys 2t and 2t + 1 of each n-tile, so S's accumulators are P's
  fragments without moving (keys 2t, 2t + 1 as the k-slots t, t + 4), and the
  values are read at those keys (rows of V_ROW = CHUNK + 4: conflict-free).
* The mmas go out GROUP = 4 accumulators at a time, pass by pass, so that four are in
  flight while one waits for its accumulator.
* Keys and values arrive by cp.async one tile ahead: the next tile's keys are asked
  for once every warp has its scores, its values once every warp has used this
  tile's, so each lands while the block computes. 167 registers on sm_90: 3 blocks a
  multiprocessor.
* A head is walked in chunks of CHUNK = 64 dims. The scores add up chunk by chunk
  (queries reloaded per chunk); the output's chunks are blockIdx.z, each block
  computing the whole softmax and one chunk of O. A 64-dim head (GPT-2) is one chunk;
  GPT-J's 256 computes its scores four times, which keeps O in 32 registers.

Costs: three mmas per product, and every operand split after it is loaded. The split
is most of the kernel's instructions, so it is done in integer operations: rounding
to TF32 is half an ulp added to the bits and the 13 bits below cleared (cvt.rna's
rounding, which that instruction takes four operations for on sm_90), and the low
part's bits are left for the tensor core to drop. The block's last key tile holds its
diagonal: keys past a query still go through the mmas, and its scores are masked.
On an H200 it takes 0.38 ms at B8 T1024 C768 NH12, against 0.55 for the CUDA-core
flash kernel.
"""

import math

import numpy as np

from gpt2kit.kernel_runtime import CudaKernel, ceil_div
from gpt2kit.kernels.flash_attention import check_attention_arguments
from gpt2kit.kernels.matmul_tf32 import TF32_HELPERS

QUERY_ROWS = 64   # queries per block: 16 per warp
KEY_TILE = 64     # keys (and values) per shared-memory tile
CHUNK = 64        # head dims per shared-memory tile, and per block of the output
THREADS = 128     # 4 warps
GROUP = 4         # mmas on independent accumulators issued together, pass by pass

FLASH_ATTENTION_3XTF32_SOURCE = TF32_HELPERS + r"""
#define NEG_INFINITY __int_as_float(0xff800000)
#define LN2 0.6931471805599453f
#define K_ROW (CHUNK + 16)        // a shared row of keys: 16-byte fragment loads of 8 lanes hit 32 banks
#define V_ROW (CHUNK + 4)         // a shared row of values: lanes (g, t) read rows 2t and columns g
#define DIM_STEPS (CHUNK / 8)     // mma k-steps of S over a chunk of head dims
#define KEY_STEPS (KEY_TILE / 8)  // n-tiles of S, k-steps of P V
#define DIM_TILES (CHUNK / 8)     // n-tiles of a chunk of O
static_assert(QUERY_ROWS == 16 * (THREADS / 32) && CHUNK % 16 == 0 && KEY_TILE % (8 * GROUP) == 0 &&
              CHUNK % (8 * GROUP) == 0, "a warp owns 16 queries; dims in pairs of k-steps");

// d += a (16 x 8, row) * b (8 x 8, col), inputs TF32, accumulators float32. Not volatile: the compiler may
// interleave independent mmas, so one waits for its accumulator while others run.
__device__ __forceinline__ void mma_tf32(float* d, const unsigned* a, const unsigned* b) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// d[i] += a b[i] for GROUP accumulators from split operands, pass by pass, so that GROUP independent mmas are in
// flight at once: the small products first, while d can still hold them, then high x high (PASSES 1: that alone)
__device__ __forceinline__ void mma_passes(float (*d)[4], const unsigned* a_high, const unsigned* a_low,
                                           const unsigned (*b_high)[2], const unsigned (*b_low)[2]) {
#if PASSES == 3
    #pragma unroll
    for (int i = 0; i < GROUP; i++) mma_tf32(d[i], a_low, b_high[i]);
    #pragma unroll
    for (int i = 0; i < GROUP; i++) mma_tf32(d[i], a_high, b_low[i]);
#endif
    #pragma unroll
    for (int i = 0; i < GROUP; i++) mma_tf32(d[i], a_high, b_high[i]);
}

// Start copying BYTES (16 or 4) from global src to shared dst, or zeros when not valid (cp.async; 16 bytes skip L1).
template <int BYTES>
__device__ __forceinline__ void copy_async(float* dst, const float* src, bool valid) {
    const unsigned to = (unsigned)__cvta_generic_to_shared(dst), size = valid ? BYTES : 0;
    if (BYTES == 16) {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(to), "l"(src), "r"(size) : "memory");
    } else {
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" :: "r"(to), "l"(src), "r"(size) : "memory");
    }
}

// Start copying dims d0 .. d0 + CHUNK - 1 of rows k0 .. k0 + KEY_TILE - 1 of a head's keys or values (`column`)
// into shared memory, zeros past T and HS, as one group of copies. With `vectors` (HS a multiple of 4, qkv
// 16-byte aligned) a float4 a copy. Past the last tile (k0 >= T) it commits an empty group, keeping the count.
template <int ROW>
__device__ void copy_tile(float (*tile)[ROW], const float* column, int k0, int d0, int T, int C, int HS,
                          bool vectors) {
    const int width = vectors ? 4 : 1;
    for (int e = threadIdx.x; e < KEY_TILE * CHUNK / width && k0 < T; e += THREADS) {
        const int r = e / (CHUNK / width), d = e % (CHUNK / width) * width;
        const bool valid = k0 + r < T && d0 + d < HS;
        const float* src = valid ? column + (long long)(k0 + r) * 3 * C + d0 + d : column;  // a readable address
        if (vectors) copy_async<16>(&tile[r][d], src, valid);
        else copy_async<4>(&tile[r][d], src, valid);
    }
    copy_async_commit();
}

// Dims d .. d + 3 of a query row (zeros past HS, or for a row past T), times score_scale.
__device__ __forceinline__ float4 load_query4(const float* row, int d, int HS, bool vectors, float score_scale) {
    float4 q = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (row == nullptr) return q;
    if (vectors && d < HS) {
        q = *(const float4*)(row + d);
    } else {
        q.x = d < HS ? row[d] : 0.0f;
        q.y = d + 1 < HS ? row[d + 1] : 0.0f;
        q.z = d + 2 < HS ? row[d + 2] : 0.0f;
        q.w = d + 3 < HS ? row[d + 3] : 0.0f;
    }
    return make_float4(q.x * score_scale, q.y * score_scale, q.z * score_scale, q.w * score_scale);
}

// The A fragments of this warp's 16 queries over dims d0 .. d0 + CHUNK - 1, scaled, not yet split. Dims are
// dealt in pairs of k-steps: lane (g, t) holds dims 16j + 4t .. 16j + 4t + 3 of rows g and g + 8, as k-slots
// t, t + 4 of step 2j (the first two dims) and of step 2j + 1 (the last two). q[step] is (g, t), (g + 8, t),
// (g, t + 4), (g + 8, t + 4).
__device__ void load_query_fragments(float (*q)[4], const float* row_g, const float* row_g8, int d0, int HS,
                                     bool vectors, float score_scale) {
    const int t = threadIdx.x % 4;
    #pragma unroll
    for (int j = 0; j < DIM_STEPS / 2; j++) {
        const float4 a = load_query4(row_g, d0 + 16 * j + 4 * t, HS, vectors, score_scale);
        const float4 b = load_query4(row_g8, d0 + 16 * j + 4 * t, HS, vectors, score_scale);
        q[2 * j][0] = a.x; q[2 * j][1] = b.x; q[2 * j][2] = a.y; q[2 * j][3] = b.y;
        q[2 * j + 1][0] = a.z; q[2 * j + 1][1] = b.z; q[2 * j + 1][2] = a.w; q[2 * j + 1][3] = b.w;
    }
}

// grid (query tiles, B * NH, head chunks), THREADS threads: block z computes dims 64z .. 64z + 63 of out
extern "C" __global__ void __launch_bounds__(THREADS)
flash_attention_3xtf32_kernel(float* out, float* lse, const float* qkv, int T, int C, int NH, float score_scale,
                              int vectors) {
    // BEGIN SOLUTION
    __shared__ __align__(16) float k_tile[KEY_TILE][K_ROW];
    __shared__ __align__(16) float v_tile[KEY_TILE][V_ROW];

    const int row0 = (gridDim.x - 1 - blockIdx.x) * QUERY_ROWS;  // the longest rows first
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH, HS = C / NH;
    const int head_chunks = (HS + CHUNK - 1) / CHUNK, out_d0 = blockIdx.z * CHUNK;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const float* head = qkv + (long long)b * T * 3 * C + h * HS;  // q at column 0, k at C, v at 2C
    const int query = row0 + 16 * warp + g;  // this thread's rows of S and O: query (half 0) and query + 8 (half 1)
    const float* row_g = query < T ? head + (long long)query * 3 * C : nullptr;
    const float* row_g8 = query + 8 < T ? head + (long long)(query + 8) * 3 * C : nullptr;

    // Copies run one tile ahead, in groups: the keys of tile i + 1 once every warp has its scores of tile i,
    // its values once every warp has used tile i's. So a tile's keys land during the softmax and P V before it,
    // its values during its own scores.
    copy_tile(k_tile, head + C, 0, 0, T, C, HS, vectors);
    copy_tile(v_tile, head + 2 * C, 0, out_d0, T, C, HS, vectors);

    float q[DIM_STEPS][4];
    if (head_chunks == 1) load_query_fragments(q, row_g, row_g8, 0, HS, vectors, score_scale);

    float o[DIM_TILES][4] = {};  // (row, 8n + 2t), (row, 8n + 2t + 1) of half 0, then of half 1
    float m[2] = {NEG_INFINITY, NEG_INFINITY}, l[2] = {0.0f, 0.0f};  // l: this lane's keys' part

    const int last_key = min(T - 1, row0 + QUERY_ROWS - 1);  // the block's last query sees no further
    for (int k0 = 0; k0 <= last_key; k0 += KEY_TILE) {
        const int next = k0 + KEY_TILE <= last_key ? k0 + KEY_TILE : T;  // T: no next tile, empty groups
        float s[KEY_STEPS][4] = {};  // as o: keys k0 + 8n + 2t and + 1
        for (int c = 0; c < head_chunks; c++) {
            if (head_chunks > 1) load_query_fragments(q, row_g, row_g8, c * CHUNK, HS, vectors, score_scale);
            if (c > 0) {  // a head of several chunks: its keys chunk by chunk, waited for
                __syncthreads();  // every warp is done with the last chunk
                copy_tile(k_tile, head + C, k0, c * CHUNK, T, C, HS, vectors);
                copy_async_wait<0>();
            } else {
                copy_async_wait<1>();  // this tile's keys have landed (its values may still be in flight)
            }
            __syncthreads();
            #pragma unroll
            for (int j = 0; j < DIM_STEPS / 2; j++) {
                #pragma unroll
                for (int n0 = 0; n0 < KEY_STEPS; n0 += GROUP) {  // keys 8n + g, dims 16j + 4t ..: b of 2 steps
                    unsigned high[2][GROUP][2], low[2][GROUP][2];
                    #pragma unroll
                    for (int i = 0; i < GROUP; i++) {
                        const float4 key = *(const float4*)&k_tile[8 * (n0 + i) + g][16 * j + 4 * t];
                        split(key.x, high[0][i][0], low[0][i][0]);
                        split(key.y, high[0][i][1], low[0][i][1]);
                        split(key.z, high[1][i][0], low[1][i][0]);
                        split(key.w, high[1][i][1], low[1][i][1]);
                    }
                    #pragma unroll
                    for (int step = 0; step < 2; step++) {
                        unsigned q_high[4], q_low[4];
                        #pragma unroll
                        for (int i = 0; i < 4; i++) split(q[2 * j + step][i], q_high[i], q_low[i]);
                        mma_passes(&s[n0], q_high, q_low, high[step], low[step]);
                    }
                }
            }
        }
        __syncthreads();  // every warp has its scores: the keys' buffer is free
        copy_tile(k_tile, head + C, next, 0, T, C, HS, vectors);

        // the online softmax of each row, over the four lanes that hold it; keys past a query, or past T, are
        // only in the tiles that reach the warp's first query or T
        const bool masked = k0 + KEY_TILE - 1 > row0 + 16 * warp || k0 + KEY_TILE > T;
        #pragma unroll
        for (int half = 0; half < 2; half++) {
            const int row = query + 8 * half;
            float tile_max = NEG_INFINITY;
            #pragma unroll
            for (int n = 0; n < KEY_STEPS; n++) {
                #pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int key = k0 + 8 * n + 2 * t + e;
                    float& score = s[n][2 * half + e];
                    if (masked && (key > row || key >= T)) score = NEG_INFINITY;  // not seen by this query
                    tile_max = fmaxf(tile_max, score);
                }
            }
            tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffff, tile_max, 1));
            tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffff, tile_max, 2));
            const float new_max = fmaxf(m[half], tile_max);
            const float base = new_max == NEG_INFINITY ? 0.0f : new_max;  // no -inf - -inf = NaN
            const float correction = exp2f(m[half] - base);                // the old terms' rescale: 0 at first
            m[half] = new_max;
            l[half] *= correction;
            #pragma unroll
            for (int n = 0; n < DIM_TILES; n++) {
                o[n][2 * half] *= correction;
                o[n][2 * half + 1] *= correction;
            }
            #pragma unroll
            for (int n = 0; n < KEY_STEPS; n++) {
                #pragma unroll
                for (int e = 0; e < 2; e++) {
                    float& p = s[n][2 * half + e];
                    p = exp2f(p - base);
                    l[half] += p;
                }
            }
        }

        copy_async_wait<1>();  // this tile's values have landed (the next keys may still be in flight)
        __syncthreads();
        // O += P V: S's accumulators are P's A fragments, keys 2t, 2t + 1 of a step as its k-slots t, t + 4
        #pragma unroll
        for (int n = 0; n < KEY_STEPS; n++) {
            unsigned p_high[4], p_low[4];
            const float p[4] = {s[n][0], s[n][2], s[n][1], s[n][3]};
            #pragma unroll
            for (int i = 0; i < 4; i++) split(p[i], p_high[i], p_low[i]);
            #pragma unroll
            for (int d0 = 0; d0 < DIM_TILES; d0 += GROUP) {
                unsigned high[GROUP][2], low[GROUP][2];
                #pragma unroll
                for (int i = 0; i < GROUP; i++) {
                    split(v_tile[8 * n + 2 * t][8 * (d0 + i) + g], high[i][0], low[i][0]);
                    split(v_tile[8 * n + 2 * t + 1][8 * (d0 + i) + g], high[i][1], low[i][1]);
                }
                mma_passes(&o[d0], p_high, p_low, high, low);
            }
        }
        __syncthreads();  // every warp has used the values: their buffer is free
        copy_tile(v_tile, head + 2 * C, next, out_d0, T, C, HS, vectors);
    }
    copy_async_wait<0>();  // no copy may still be writing shared memory when the block exits

    #pragma unroll
    for (int half = 0; half < 2; half++) {
        const int row = query + 8 * half;
        float total = l[half] + __shfl_xor_sync(0xffffffff, l[half], 1);
        total += __shfl_xor_sync(0xffffffff, total, 2);
        if (row >= T) continue;
        float* out_row = out + ((long long)b * T + row) * C + h * HS;
        #pragma unroll
        for (int n = 0; n < DIM_TILES; n++) {
            #pragma unroll
            for (int e = 0; e < 2; e++) {
                const int d = out_d0 + 8 * n + 2 * t + e;
                if (d < HS) out_row[d] = o[n][2 * half + e] / total;
            }
        }
        if (t == 0 && blockIdx.z == 0) lse[(long long)bh * T + row] = (m[half] + log2f(total)) * LN2;
    }
    // END SOLUTION
}
"""

FLASH_3XTF32_DEFINES = dict(QUERY_ROWS=QUERY_ROWS, KEY_TILE=KEY_TILE, CHUNK=CHUNK, THREADS=THREADS, GROUP=GROUP)
flash_attention_3xtf32_kernel = CudaKernel(FLASH_ATTENTION_3XTF32_SOURCE, "flash_attention_3xtf32_kernel",
                                           defines=dict(FLASH_3XTF32_DEFINES, PASSES=3))


def flash_attention_forward(out, lse, inp, B, T, C, NH):
    """Causal multi-head attention of packed q|k|v, both products on the tensor cores in 3xTF32."""
    launch_flash_on_tensor_cores(flash_attention_3xtf32_kernel, out, lse, inp, B, T, C, NH)


def launch_flash_on_tensor_cores(kernel, out, lse, inp, B, T, C, NH):
    """A grid of (query tiles, B * NH, the head's chunks of CHUNK dims) of `kernel` (this file's source)."""
    check_attention_arguments("flash_attention_forward", out, lse, inp, B, T, C, NH, T)
    # BEGIN SOLUTION
    HS = C // NH
    score_scale = math.log2(math.e) / math.sqrt(HS)
    vectors = HS % 4 == 0 and inp.data.ptr % 16 == 0  # keys, values and queries as float4s
    kernel((ceil_div(T, QUERY_ROWS), B * NH, ceil_div(HS, CHUNK)), (THREADS,),
           (out, lse, inp, np.int32(T), np.int32(C), np.int32(NH), np.float32(score_scale), np.int32(vectors)))
    # END SOLUTION
