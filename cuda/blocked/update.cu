// update.cu - the blocked route's update: block reflector application (LAPACK slarft + slarfb) for the blocked route.
//
// H_0 H_1 ... H_{w-1} = I - V T V^T with T upper triangular (forward, column-wise storage).
// T comes from the Gram matrix G = V^T V by recursive doubling: for adjacent diagonal blocks
// T11 (s x s) and T22, the block above T22 is T12 = -T11 G12 T22 (G12 = V1^T V2). Blocks start at
// s = 1 with T_ii = tau_i, so a reflector with tau = 0 gives a zero row and column of T: the
// identity, as LAPACK intends. One thread block per matrix builds T in shared memory.
// G = V^T V is summed in FP32 by gram_kernel (only where the panel kernel built no T). The products with C run on
// tensor cores at FP32 accuracy (3xTF32, tf32x3.cuh) in one kernel per update: a thread block takes one matrix's strip of 64 (or
// 32) columns of C and computes W = V^T C_strip, W = T^T W and C_strip -= V W, so W never leaves shared memory and
// the strip is read twice and written once. A few large matrices split the rows over blocks instead (three launches,
// WyPart). On 640 x 512 x 512 the update takes 2.9 ms against 4.7 for the three FP32 cuBLAS GEMMs it replaced
// (docs/results/2026-12-02-h200-ldmatrix-update.txt); the kernel issues about five instructions per mma (addresses,
// predicates, the split) at three blocks per SM, so it is bound by issue and latency, not by the tensor cores.
#include <cublas_v2.h>
#include <limits.h>

#include "launch.cuh"
#include "reduce.cuh"
#include "tf32x3.cuh"

#include <atomic>
#include <type_traits>

namespace {

// ---- the update's arguments and the split update's parts ----

// Matrix b's columns of C from zero_from[b] - col0 on are exactly zero (qr2_update_args), or zero_from is null: the
// update leaves their strips alone, since Q^T keeps a zero column zero.
struct WyTail {
    const int* zero_from;
    int col0;
    __device__ bool zero(int64_t b, int j0) const { return zero_from && col0 + j0 >= zero_from[b]; }
};

// One update's geometry (see qr2_update_args), for a block of w <= 64 reflectors.
struct WyArgs {
    int64_t batch;
    int mr, w, nc;
    const float* v;
    int64_t ldv, v_bs;
    const float* t;
    int64_t t_rs, t_cs, t_bs;  // T(r, c) at t[r t_rs + c t_cs]: T, or T^T to apply Q instead of Q^T
    bool t_lower;              // whether that is T^T
    float* c;
    int64_t ldc, c_bs;
    const float* cf;  // where C's entries are read (row-major, see qr2_update_args.c_from), or nullptr: in c
    int64_t cf_rs, cf_bs;
    WyTail tail;
};

// What one launch of an update kernel does. whole: all of the update for a block's strip. Where strips alone leave
// SMs idle (a few large matrices), the rows are split over blocks in three launches: partial_w (W_s = V_s^T C_s over
// a block's rows, stored with a power-of-two scale per column), wy_reduce_kernel (W' = -T^T sum_s W_s, each column
// normalised by a power of two 2^-E_j), apply (C_s += V_s W' 2^E over a block's rows).
enum class WyPart { whole, partial_w, apply };

// Where the split update keeps its partial W's, their scales, W' and its scales: for item (matrix, strip) =
// b strips + strip and split s, W_s at part + (item splits + s) WMAX NT (W(k, j) at j WMAX + k), the scale exponent
// of its column j at scale[(item splits + s) NT + j] (the true W_s(k, j) is the stored one times 2^scale; SCALE_ZERO:
// the column is exactly zero); W' at wq + item WMAX NT, the exponent of its column j at e_of[item NT + j] (likewise).
// NT = 64 wherever rows are split.
struct WySplitWork {
    float* part;
    int* scale;
    float* wq;
    int* e_of;
};

// ---- copies: global -> shared asynchronously, and a row-major source's strips into column-major C (the first
// update of a row-major input writes H, exact zero strips included, -0 staying -0) ----

// Asynchronous copies global -> shared of 16 or 4 bytes; src_ok false writes zeros and reads nothing.
template <int BYTES>
__device__ __forceinline__ void copy_async(float* dst, const float* src, bool src_ok) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    if constexpr (BYTES == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(src_ok ? 16 : 0));
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(d), "l"(src), "r"(src_ok ? 4 : 0));
}
__device__ __forceinline__ void copy_async_commit() { asm volatile("cp.async.commit_group;"); }
template <int PENDING>
__device__ __forceinline__ void copy_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(PENDING));
}

// Rows 0 .. mr, columns 0 .. ncs of src (element (i, j) at src[i src_rs + j]) into c (column j at c + j ldc), by all
// the block's threads through 32 x 32 tiles of shared memory: rows read along the source's rows, columns written along
// C's.
__device__ __forceinline__ void copy_strip_from_rows(float (*tile)[33], const float* src, int64_t src_rs, float* c,
                                                     int64_t ldc, int mr, int ncs) {
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5, rows = blockDim.x >> 5;
    for (int i0 = 0; i0 < mr; i0 += 32)
        for (int jt = 0; jt < ncs; jt += 32) {
            for (int i = ty; i < 32; i += rows)
                if (i0 + i < mr && jt + tx < ncs) tile[i][tx] = src[(int64_t)(i0 + i) * src_rs + jt + tx];
            __syncthreads();
            for (int j = ty; j < 32; j += rows)
                if (jt + j < ncs && i0 + tx < mr) c[(int64_t)(jt + j) * ldc + i0 + tx] = tile[tx][j];
            __syncthreads();
        }
}

// A KC-row chunk of a row-major source's strip (rows row0 .., columns 0 .. ncs; zeros past mr and ncs) into shared
// memory at dst + at(r, col), by four warps: lane (fr, fc) copies rows 4 i + fr, columns fc + 32 h, fc = 8 warp +
// lane % 8, one float each, so that a warp reads four 32-byte pieces of rows.
template <int KC, int NT, typename At>
__device__ __forceinline__ void copy_chunk_from_rows(float* dst, At at, const float* src, int64_t src_rs, int row0,
                                                     int mr, int ncs) {
    const int lane = threadIdx.x & 31, fr = lane >> 3, fc = 8 * (threadIdx.x >> 5) + (lane & 7);
#pragma unroll
    for (int i = 0; i < KC / 4; ++i)
#pragma unroll
        for (int h = 0; h < NT / 32; ++h) {
            const int r = 4 * i + fr, col = fc + 32 * h, row = row0 + r;
            const bool ok = row < mr && col < ncs;
            copy_async<4>(dst + at(r, col), ok ? src + row * src_rs + col : src, ok);
        }
}

constexpr int T_THREADS = 256;
constexpr int UPDATE_THREADS = 128;
constexpr int KC = 32;        // rows of V and C per chunk
constexpr int STAGES = 3;     // chunks in flight
constexpr int UPDATE_W = 64;  // widest block one kernel applies; wider ones go in pieces
constexpr int MAX_SPLITS = 64;          // row splits of one strip's update
constexpr int SPLIT_MIN_ROWS = 8 * KC;  // rows of a partial W, at least
constexpr int SPLIT_MAX_ROWS = 4096;    // taller updates with few strips go to cuBLAS (qr2_update_run)
constexpr int APPLY_ROWS = 8 * KC;      // rows of one apply block, at most
constexpr int SPLIT_WAVE_BLOCKS = 4;    // blocks per SM a wave of the split update counts, at most (the workspace's bound)
constexpr int REDUCE_THREADS = 256;
constexpr int REDUCE_SPLITS = 4;  // partial W's a reduce thread has in flight at once
constexpr int SCALE_ZERO = INT_MIN / 2;  // a partial W's column that is exactly zero: no scale to take part in the sum

// G = V^T V as `parts` partial sums over row ranges, w x w each, one matrix's parts consecutive and g_bs apart (the
// parts are added in order: the same bits every run).
constexpr int GRAM_THREADS = 256;
constexpr int GRAM_ROWS = 32;          // rows of V staged per step
constexpr int GRAM_SPLIT_ROWS = 256;   // rows of one partial Gram block, at least
constexpr int MAX_GRAM_SPLITS = 16;

// Thread (ti, tj) of a 16 x 16 grid sums the TILE x TILE block of G at rows TILE ti.., columns TILE tj..: two TILE-float
// shared loads per TILE^2 FMAs (one load per FMA, as a thread per entry needs, ran 2.3x slower than cuBLAS).
template <int WMAX>
__global__ void __launch_bounds__(GRAM_THREADS) gram_kernel(int mr, int w, int split_rows, int parts, const float* v,
                                                            int64_t ldv, int64_t v_bs, float* g, int64_t g_bs) {
    qr2_follow_previous_kernel();  // launched with Qr2Launch::pdl
    constexpr int TILE = WMAX / 16, LD = WMAX + 4;  // LD: rows stay 16-byte aligned
    static_assert(GRAM_THREADS == 256, "a 16 x 16 grid of threads");
    __shared__ __align__(16) float Vs[GRAM_ROWS * LD];  // V(r, c) at r LD + c
    const int64_t b = blockIdx.x / parts;
    const int part = (int)(blockIdx.x - b * parts), tid = threadIdx.x;
    const int i0 = TILE * (tid % 16), j0 = TILE * (tid / 16);
    const int r_begin = part * split_rows, r_end = min(mr, r_begin + split_rows);
    v += b * v_bs;
    float acc[TILE][TILE] = {};
    for (int r0 = r_begin; r0 < r_end; r0 += GRAM_ROWS) {
        __syncthreads();
        for (int idx = tid; idx < GRAM_ROWS * WMAX; idx += GRAM_THREADS) {  // a warp reads 32 rows of a column
            const int r = idx % GRAM_ROWS, c = idx / GRAM_ROWS, row = r0 + r;
            Vs[r * LD + c] = row < r_end && c < w ? v[row + (int64_t)c * ldv] : 0.f;
        }
        __syncthreads();
#pragma unroll 2
        for (int r = 0; r < GRAM_ROWS; ++r) {
            float x[TILE], y[TILE];
            if constexpr (TILE % 4 == 0) {
#pragma unroll
                for (int q = 0; q < TILE / 4; ++q) {
                    const float4 a = *reinterpret_cast<const float4*>(Vs + r * LD + i0 + 4 * q);
                    const float4 c = *reinterpret_cast<const float4*>(Vs + r * LD + j0 + 4 * q);
                    x[4 * q] = a.x, x[4 * q + 1] = a.y, x[4 * q + 2] = a.z, x[4 * q + 3] = a.w;
                    y[4 * q] = c.x, y[4 * q + 1] = c.y, y[4 * q + 2] = c.z, y[4 * q + 3] = c.w;
                }
            } else {
#pragma unroll
                for (int q = 0; q < TILE; ++q) x[q] = Vs[r * LD + i0 + q], y[q] = Vs[r * LD + j0 + q];
            }
#pragma unroll
            for (int p = 0; p < TILE; ++p)
#pragma unroll
                for (int q = 0; q < TILE; ++q) acc[p][q] = fmaf(x[p], y[q], acc[p][q]);
        }
    }
    g += b * g_bs + (int64_t)part * w * w;
#pragma unroll
    for (int p = 0; p < TILE; ++p)
#pragma unroll
        for (int q = 0; q < TILE; ++q)
            if (i0 + p < w && j0 + q < w) g[i0 + p + (j0 + q) * w] = acc[p][q];
}

// Partial Grams per matrix: one while the batch fills the GPU, else enough for two blocks per SM, each at least
// GRAM_SPLIT_ROWS rows (cuBLAS's batched Gram GEMM ran 40 us on a 4096-row V at batch 2, on a few SMs).
int gram_parts(int64_t batch, int mr, const qr2_device* dev) {
    if (batch <= 0 || batch >= dev->sms) return 1;
    int64_t p = (2 * (int64_t)dev->sms + batch - 1) / batch;
    const int by_rows = (mr + GRAM_SPLIT_ROWS - 1) / GRAM_SPLIT_ROWS;
    if (p > by_rows) p = by_rows;
    if (p > MAX_GRAM_SPLITS) p = MAX_GRAM_SPLITS;
    return p < 1 ? 1 : (int)p;
}

__global__ void __launch_bounds__(T_THREADS) larft_from_gram_kernel(const float* G, int64_t g_bs, int parts,
                                                                    const float* tau, int64_t tau_bs, float* T,
                                                                    int64_t t_bs, int w) {
    qr2_follow_previous_kernel();  // launched with Qr2Launch::pdl
    extern __shared__ float smem[];
    float* Gs = smem;           // w x w, ld w
    float* Ts = Gs + w * w;     // w x w, ld w
    float* X = Ts + w * w;      // per merge: s x s products G12 * T22
    const int64_t b = blockIdx.x;
    const int tid = threadIdx.x;
    G += b * g_bs;
    T += b * t_bs;
    tau += b * tau_bs;

    for (int idx = tid; idx < w * w; idx += blockDim.x) {
        const int i = idx % w, j = idx / w;
        float sum = 0.f;
        for (int part = 0; part < parts; ++part) sum += G[(int64_t)part * w * w + idx];
        Gs[idx] = sum;
        Ts[idx] = i == j ? tau[i] : 0.f;
    }
    __syncthreads();

    for (int s = 1; s < w; s *= 2) {
        const int nmerge = (w - s + 2 * s - 1) / (2 * s);
        const int cells = nmerge * s * s;
        // X = G12 * T22 (T22 upper triangular: l <= jj)
        for (int idx = tid; idx < cells; idx += blockDim.x) {
            const int p = idx / (s * s), rem = idx - p * s * s, i = rem % s, jj = rem / s;
            const int b0 = 2 * s * p, s2 = min(s, w - b0 - s);
            if (jj >= s2) continue;
            float acc = 0.f;
            for (int l = 0; l <= jj; ++l) acc += Gs[(b0 + s + l) * w + b0 + i] * Ts[(b0 + s + jj) * w + b0 + s + l];
            X[idx] = acc;
        }
        __syncthreads();
        // T12 = -T11 * X (T11 upper triangular: l >= i)
        for (int idx = tid; idx < cells; idx += blockDim.x) {
            const int p = idx / (s * s), rem = idx - p * s * s, i = rem % s, jj = rem / s;
            const int b0 = 2 * s * p, s2 = min(s, w - b0 - s);
            if (jj >= s2) continue;
            float acc = 0.f;
            for (int l = i; l < s; ++l) acc += Ts[(b0 + l) * w + b0 + i] * X[p * s * s + jj * s + l];
            Ts[(b0 + s + jj) * w + b0 + i] = -acc;
        }
        __syncthreads();
    }

    for (int idx = tid; idx < w * w; idx += blockDim.x) T[idx] = Ts[idx];
}

// T of V = [V1 V2] from the T factors of its halves: T12 = -T1 (V1^T V2) T2 (LAPACK slarft's recurrence, as
// larft_from_gram_kernel applies it at every level), with V1^T V2 summed in FP32 over the rows from w1 down (V2 is
// zero above its row w1). Where both halves' panel kernels built their T, this replaces the Gram matrix and the whole
// recursive build of a 64-wide T. One block a matrix while the batch fills the GPU; fewer matrices split the rows into
// parts (gram_parts), whose X = V1^T V2 partials merge_t_finish_kernel adds in order before the products.
// V1^T V2: four groups of 64 threads take a quarter of each staged chunk's rows; a thread sums a 4 x 4 tile of X
// (rows ti + 8p, columns tj + 8q) from 16-byte shared loads, 8 loads per 64 FMAs (one load per FMA, with a thread per
// four entries, ran 62 us a launch at 640 x 512 x 512: bound by shared loads). The groups' tiles are summed in order.
constexpr int MERGE_THREADS = 256;
constexpr int MERGE_ROWS = 64;  // rows of V1 and V2 staged per step
constexpr int MERGE_H = QR2_PANEL_MAX_W;
constexpr int MERGE_LD = MERGE_ROWS + 4;  // staged V's column stride: 16-byte aligned, a warp's 8 columns on distinct banks
constexpr int MERGE_GROUPS = MERGE_THREADS / 64;
constexpr int MERGE_PER = MERGE_H * MERGE_H / MERGE_THREADS;  // entries of X per thread in the triangular products
static_assert(MERGE_THREADS == 256 && MERGE_H == 32 && MERGE_ROWS % (4 * MERGE_GROUPS) == 0,
              "eight warps: 8 x 8 threads of 4 x 4 tiles in each of four groups cover X");
static_assert(MERGE_LD % 4 == 0, "16-byte loads of the staged columns");
static_assert(MERGE_GROUPS * MERGE_H * (MERGE_H + 1) <= 2 * MERGE_H * MERGE_LD, "the groups' tiles fit the stage");

struct MergeSmem {
    float X[MERGE_H][MERGE_H + 1];
    float T1s[MERGE_H][MERGE_H + 1];
    float T2s[MERGE_H][MERGE_H + 1];
};

// The halves' upper triangles into shared memory, zeros elsewhere.
__device__ void merge_load_halves(MergeSmem& S, int w1, int w2, const float* t1, const float* t2) {
    for (int idx = threadIdx.x; idx < MERGE_H * MERGE_H; idx += MERGE_THREADS) {
        const int r = idx % MERGE_H, c = idx / MERGE_H;
        S.T1s[r][c] = r <= c && c < w1 ? t1[r + c * w1] : 0.f;
        S.T2s[r][c] = r <= c && c < w2 ? t2[r + c * w2] : 0.f;
    }
}

// With X = V1^T V2 and the halves in S (all threads past a barrier): T = [T1, -T1 X T2; 0, T2] into t, ld w1 + w2.
// Thread (i, j0) holds the entries (i, j0 + 8 e) of each product.
__device__ void merge_finish(MergeSmem& S, int w1, int w2, float* t) {
    const int tid = threadIdx.x, i = tid & 31, j0 = tid >> 5;
    float acc[MERGE_PER];
    // Y = X T2 (T2 upper triangular: l <= j), in place once every thread has its entries
#pragma unroll
    for (int e = 0; e < MERGE_PER; ++e) {
        const int j = j0 + 8 * e;
        float y = 0.f;
        for (int l = 0; l <= j; ++l) y = fmaf(S.X[i][l], S.T2s[l][j], y);
        acc[e] = y;
    }
    __syncthreads();
#pragma unroll
    for (int e = 0; e < MERGE_PER; ++e) S.X[i][j0 + 8 * e] = acc[e];
    __syncthreads();
    // T12 = -T1 Y (T1 upper triangular: l >= i), then T = [T1 T12; 0 T2], ld w1 + w2
    const int w = w1 + w2;
#pragma unroll
    for (int e = 0; e < MERGE_PER; ++e) {
        const int j = j0 + 8 * e;
        float s = 0.f;
        for (int l = i; l < MERGE_H; ++l) s = fmaf(S.T1s[i][l], S.X[l][j], s);
        if (i < w1 && j < w2) t[i + (int64_t)(w1 + j) * w] = -s;
    }
    for (int idx = tid; idx < w * w; idx += MERGE_THREADS) {
        const int r = idx % w, c = idx / w;
        if (r < w1 && c >= w1) continue;  // T12, above
        t[idx] = r < w1 ? S.T1s[r][c] : c >= w1 ? S.T2s[r - w1][c - w1] : 0.f;
    }
}

// Block x: matrix x / parts, rows w1 + (x % parts) split_rows .. + split_rows. One part: all of T; more: this part's
// X into xpart[(b parts + part) 1024 + i + 32 j].
__global__ void __launch_bounds__(MERGE_THREADS) merge_t_kernel(int parts, int split_rows, int mr, int w1, int w2,
                                                               const float* v, int64_t ldv, int64_t v_bs,
                                                               const float* t1, const float* t2, int64_t t_bs,
                                                               float* t, int64_t out_bs, float* xpart) {
    qr2_follow_previous_kernel();  // launched with Qr2Launch::pdl
    __shared__ __align__(16) float stage[2 * MERGE_H * MERGE_LD];  // V1 then V2, column c at c MERGE_LD; then partials
    __shared__ MergeSmem S;
    float* V1s = stage;
    float* V2s = stage + MERGE_H * MERGE_LD;
    const int64_t b = blockIdx.x / parts;
    const int part = (int)(blockIdx.x - b * parts);
    const int tid = threadIdx.x, i = tid & 31, j0 = tid >> 5;
    const int ti = tid & 7, tj = (tid >> 3) & 7, group = tid >> 6;
    const int r_begin = w1 + part * split_rows, r_end = min(mr, r_begin + split_rows);
    v += b * v_bs;
    if (parts == 1) merge_load_halves(S, w1, w2, t1 + b * t_bs, t2 + b * t_bs);
    float tile[4][4] = {};
    for (int r0 = r_begin; r0 < r_end; r0 += MERGE_ROWS) {
        __syncthreads();
        for (int idx = tid; idx < MERGE_ROWS * MERGE_H; idx += MERGE_THREADS) {  // a warp reads 32 rows of a column
            const int r = idx % MERGE_ROWS, c = idx / MERGE_ROWS, row = r0 + r;
            V1s[c * MERGE_LD + r] = row < r_end && c < w1 ? v[row + (int64_t)c * ldv] : 0.f;
            V2s[c * MERGE_LD + r] = row < r_end && c < w2 ? v[row + (int64_t)(w1 + c) * ldv] : 0.f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < MERGE_ROWS / MERGE_GROUPS; k += 4) {
            const int r = group * (MERGE_ROWS / MERGE_GROUPS) + k;
            float4 a[4], c[4];
#pragma unroll
            for (int p = 0; p < 4; ++p) {
                a[p] = *reinterpret_cast<const float4*>(V1s + (ti + 8 * p) * MERGE_LD + r);
                c[p] = *reinterpret_cast<const float4*>(V2s + (tj + 8 * p) * MERGE_LD + r);
            }
#pragma unroll
            for (int p = 0; p < 4; ++p)
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    float s = tile[p][q];
                    s = fmaf(a[p].x, c[q].x, s);
                    s = fmaf(a[p].y, c[q].y, s);
                    s = fmaf(a[p].z, c[q].z, s);
                    tile[p][q] = fmaf(a[p].w, c[q].w, s);
                }
        }
    }
    __syncthreads();
    float* partial = stage;  // the groups' tiles, (MERGE_H + 1)-strided
#pragma unroll
    for (int p = 0; p < 4; ++p)
#pragma unroll
        for (int q = 0; q < 4; ++q) partial[(group * MERGE_H + ti + 8 * p) * (MERGE_H + 1) + tj + 8 * q] = tile[p][q];
    __syncthreads();
    float acc[MERGE_PER];
#pragma unroll
    for (int e = 0; e < MERGE_PER; ++e) {
        float s = 0.f;
        for (int g = 0; g < MERGE_GROUPS; ++g) s += partial[(g * MERGE_H + i) * (MERGE_H + 1) + j0 + 8 * e];
        acc[e] = s;
    }
    if (parts > 1) {
        float* x = xpart + (b * parts + part) * (MERGE_H * MERGE_H) + i;
#pragma unroll
        for (int e = 0; e < MERGE_PER; ++e) x[(j0 + 8 * e) * MERGE_H] = acc[e];
        return;
    }
#pragma unroll
    for (int e = 0; e < MERGE_PER; ++e) S.X[i][j0 + 8 * e] = acc[e];
    __syncthreads();
    merge_finish(S, w1, w2, t + b * out_bs);
}

// Parts of merge_t's rows w1 .. mr and their rows (a multiple of MERGE_ROWS): at most gram_parts' (the split region
// holds that many), and none empty.
int merge_parts(int64_t batch, int mr, int w1, const qr2_device* dev, int* split_rows) {
    const int rows = mr - w1 > 0 ? mr - w1 : 0, most = gram_parts(batch, rows, dev);
    *split_rows = ((rows + most - 1) / most + MERGE_ROWS - 1) / MERGE_ROWS * MERGE_ROWS;
    const int parts = rows > 0 ? (rows + *split_rows - 1) / *split_rows : 1;
    return parts < 1 ? 1 : parts;
}

// T from merge_t_kernel's partial X's of each matrix (block x: matrix x), added in the order of the parts.
__global__ void __launch_bounds__(MERGE_THREADS) merge_t_finish_kernel(int parts, int w1, int w2, const float* xpart,
                                                                      const float* t1, const float* t2, int64_t t_bs,
                                                                      float* t, int64_t out_bs) {
    qr2_follow_previous_kernel();  // launched with Qr2Launch::pdl
    __shared__ MergeSmem S;
    const int64_t b = blockIdx.x;
    const int tid = threadIdx.x, i = tid & 31, j0 = tid >> 5;
    merge_load_halves(S, w1, w2, t1 + b * t_bs, t2 + b * t_bs);
    const float* x = xpart + b * parts * (MERGE_H * MERGE_H) + i;
#pragma unroll
    for (int e = 0; e < MERGE_PER; ++e) {
        float s = 0.f;
        for (int part = 0; part < parts; ++part) s += x[part * (MERGE_H * MERGE_H) + (j0 + 8 * e) * MERGE_H];
        S.X[i][j0 + 8 * e] = s;
    }
    __syncthreads();
    merge_finish(S, w1, w2, t + b * out_bs);
}

int check_cublas(cublasStatus_t st, const char* what) {
    if (st == CUBLAS_STATUS_SUCCESS) return 0;
    char detail[160];
    snprintf(detail, sizeof detail, "%s (%s)", cublasGetStatusName(st), cublasGetStatusString(st));
    return qr2_record_error(what, detail);
}

// C = alpha op(A) op(B) + beta C for every matrix of the batch, FP32 in and out, FP32 arithmetic.
int gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
         const float* A, int64_t lda, int64_t sa, const float* B, int64_t ldb, int64_t sb, float beta, float* C,
         int64_t ldc, int64_t sc, int64_t batch, const char* what) {
    // cuBLAS splits a long K over blocks only for a batch of one: a few matrices with K >= 8192 and a small
    // output go one call each (H200: 2 x 16384 x 1024 spent 24 ms in 32 x 32-tile GEMMs of K 16384, 255 us
    // each, at batch 2)
    if (batch > 1 && batch <= 8 && k >= 8192 && (int64_t)m * n <= 65536) {
        for (int64_t b = 0; b < batch; ++b)
            if (gemm(h, ta, tb, m, n, k, alpha, A + b * sa, lda, sa, B + b * sb, ldb, sb, beta, C + b * sc, ldc, sc, 1,
                     what))
                return 1;
        return 0;
    }
    return check_cublas(cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, &alpha, A, CUDA_R_32F, (int)lda, sa, B,
                                                   CUDA_R_32F, (int)ldb, sb, &beta, C, CUDA_R_32F, (int)ldc, sc,
                                                   (int)batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                        what);
}


// Element (r, c) of a KC-row chunk stored column-major, each column one 32-float line whose rows are permuted by an
// XOR of the column with a multiple of 4, so that groups of four rows stay together (16-byte copies, ldmatrix rows):
// eight adjacent columns' groups at one row then lie in eight different 16-byte bank groups (ldmatrix), and rows along
// g with columns along q (the V fragment of C += V W) hit 32 different banks.
__device__ __forceinline__ int chunk_swizzle(int c) { return ((c & 3) << 3) | (c & 4); }
__device__ __forceinline__ int chunk_at(int r, int c) { return c * KC + (r ^ chunk_swizzle(c)); }

template <int WMAX, int NT>
struct WyUpdateShape {
    static constexpr int LDW = WMAX + 4;            // ld of T and W in shared memory: 4 mod 32, conflict-free
    static constexpr int WARPS_M = WMAX / 32;       // W = V^T C: warps along W's rows, 32 rows each
    static constexpr int NT1 = NT * WARPS_M / 32;   // ... and W's 8-column tiles per warp
    static constexpr int WARPS_J = NT / 16;         // C^T += W^T V^T: warps along the strip's columns, 16 each
    static constexpr int NI3 = KC * WARPS_J / 32;   // ... and the chunk's 8-row tiles per warp
    static constexpr int stage = KC * (WMAX + NT);  // one chunk of V and one of C
    static constexpr int floats = STAGES * stage + NT * LDW;
    static_assert(WMAX * LDW <= STAGES * stage, "T is kept where the chunks were");
    static_assert(WARPS_J * (KC / (8 * NI3)) == UPDATE_THREADS / 32, "C's chunk is shared out among all warps");
};

// C_strip -= V (T^T (V^T C_strip)) for the NT-column strip of each block (PART says which share of it).
// Block x: matrix x / (strips splits), strip x / splits % strips, rows (x % splits) split_rows .. + split_rows.
// V: mr x w (w <= WMAX), T: w x w, element (r, c) at t[r t_rs + c t_cs] (T upper triangular, or T^T to apply Q
// instead of Q^T), C: mr x nc column-major. Chunks of KC rows of V
// and C stream through a STAGES-deep cp.async ring twice: once for W = V^T C, once for C += V (-T^T W), computed as
// C^T += W^T V^T so that each lane holds pairs of adjacent rows of C. VEC: rows go in 16-byte groups of four (mr, the
// leading dimensions and strides multiples of 4, the pointers 16-byte aligned). Whole chunks skip the predicates.
// FROM (whole only): C's entries are read from the row-major cf (element (i, j) of matrix b at
// cf[b cf_bs + i cf_rs + j]) and all of the strip is written into c.
template <int WMAX, int NT, bool VEC, WyPart PART, bool FROM = false>
__global__ void __launch_bounds__(UPDATE_THREADS, WMAX == 32 ? 4 : 3)
    wy_update_kernel(int64_t strips, int splits, int split_rows, int mr, int w, int nc, const float* v, int64_t ldv,
                     int64_t v_bs, const float* t, int64_t t_rs, int64_t t_cs, int64_t t_bs, float* c, int64_t ldc,
                     int64_t c_bs, const float* cf, int64_t cf_rs, int64_t cf_bs, WySplitWork sw, WyTail tail) {
    static_assert(!FROM || PART == WyPart::whole, "a row-major source is read by the one-launch update only");
    qr2_follow_previous_kernel();  // launched with Qr2Launch::pdl
    using S = WyUpdateShape<WMAX, NT>;
    constexpr int LDW = S::LDW;
    extern __shared__ float4 smem4[];
    float* sm = reinterpret_cast<float*>(smem4);
    float* Ws = sm + STAGES * S::stage;  // W(k, j) at j LDW + k
    float* Ts = sm;                      // once the chunks of W = V^T C are consumed: T(r, c) at c LDW + r

    const int64_t item = blockIdx.x / splits;  // (matrix, strip)
    const int split = (int)(blockIdx.x - item * splits);
    const int64_t b = item / strips;
    const int j0 = (int)(item - b * strips) * NT;
    const int r0 = split * split_rows;
    mr = min(split_rows, mr - r0);  // this block's rows r0 .. + mr
    v += b * v_bs + r0;
    t += b * t_bs;
    c += b * c_bs + j0 * ldc + r0;
    if constexpr (FROM) cf += b * cf_bs + j0 + (int64_t)r0 * cf_rs;
    const int ncs = min(NT, nc - j0);
    if (tail.zero(b, j0)) {  // a strip of zeros: from a row-major source, copied as it is (-0 stays -0)
        if constexpr (FROM) copy_strip_from_rows(reinterpret_cast<float(*)[33]>(smem4), cf, cf_rs, c, ldc, mr, ncs);
        return;
    }
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, q = lane & 3;

    // each thread copies the four rows 4 (tid % 8) .. + 4 of columns tid / 8 + 16 i of a chunk: eight threads read a
    // column's 128 contiguous bytes
    const int lr = 4 * (tid & 7), lc = tid >> 3;
    const float* vp = v + lr + lc * ldv;
    const float* cp = c + lr + lc * ldc;
    const int64_t vstep = 16 * ldv, cstep = 16 * ldc;
    const int chunks = (mr + KC - 1) / KC;
    // FROM: a chunk of the row-major source by copy_chunk_from_rows (the swizzle puts adjacent columns' rows 8 apart,
    // so a warp's copies write 32 distinct banks)
    static_assert(!FROM || UPDATE_THREADS == 128, "four warps of 8 columns cover 32 columns of a chunk");
    auto issue = [&](int ch, int slot) {  // chunk ch into stage slot % STAGES, or an empty group past the end
        if (ch < chunks) {
            float* st = sm + (slot % STAGES) * S::stage;
            const int r0 = ch * KC + lr;
            if constexpr (FROM)
                copy_chunk_from_rows<KC, NT>(st + KC * WMAX, [](int r, int col) { return chunk_at(r, col); }, cf,
                                             cf_rs, ch * KC, mr, ncs);
            if (VEC && (ch + 1) * KC <= mr && w == WMAX && ncs == NT) {  // all of the chunk: no predicates
#pragma unroll
                for (int i = 0; i < WMAX / 16; ++i)
                    copy_async<16>(st + chunk_at(lr, lc + 16 * i), vp + ch * KC + i * vstep, true);
                if constexpr (!FROM)
#pragma unroll
                    for (int i = 0; i < NT / 16; ++i)
                        copy_async<16>(st + KC * WMAX + chunk_at(lr, lc + 16 * i), cp + ch * KC + i * cstep, true);
            } else {
                auto column = [&](float* dst, const float* src, bool col_ok, const float* any) {
                    if constexpr (VEC) {
                        copy_async<16>(dst, col_ok && r0 < mr ? src : any, col_ok && r0 < mr);
                    } else {
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            const bool ok = col_ok && r0 + e < mr;
                            copy_async<4>(dst + e, ok ? src + e : any, ok);
                        }
                    }
                };
#pragma unroll
                for (int i = 0; i < WMAX / 16; ++i)
                    column(st + chunk_at(lr, lc + 16 * i), vp + ch * KC + i * vstep, lc + 16 * i < w, v);
                if constexpr (!FROM)
#pragma unroll
                    for (int i = 0; i < NT / 16; ++i)
                        column(st + KC * WMAX + chunk_at(lr, lc + 16 * i), cp + ch * KC + i * cstep,
                               lc + 16 * i < ncs, c);
            }
        }
        copy_async_commit();
    };
    // body(ch, V chunk, C chunk) for every chunk as it arrives, first to last or (backward) last to first
    auto stream_chunks = [&](bool backward, auto&& body) {
        auto at = [&](int i) { return backward && i < chunks ? chunks - 1 - i : i; };
#pragma unroll
        for (int s = 0; s < STAGES - 1; ++s) issue(at(s), s);
        for (int i = 0; i < chunks; ++i) {
            copy_async_wait<STAGES - 2>();
            __syncthreads();
            issue(at(i + STAGES - 1), i + STAGES - 1);
            const float* Vc = sm + (i % STAGES) * S::stage;
            body(at(i), Vc, Vc + KC * WMAX);
        }
        copy_async_wait<0>();
        __syncthreads();
    };

    // W = V^T C_strip: warp (wm, wn) owns rows 32 wm .. + 32 and NT1 column tiles of W; a second pass redoes it with
    // some columns of C scaled (below).
    const int wm = warp % S::WARPS_M, wj = 8 * S::NT1 * (warp / S::WARPS_M);
    const int ar = ldsm_a_row(lane), ak = ldsm_a_k(lane), br = ldsm_b_row(lane), bk = ldsm_b_k(lane);
    float big[2][S::NT1][4], small[2][S::NT1][4];
    // Per column j of the strip: C's multipliers for the redone pass (sc, 2^-e_j in two factors) and the update's
    // (uc, 2^e_j: whole; 2^E_j: apply); 1 where the column needs no scaling.
    __shared__ float sc1[NT], sc2[NT], uc1[NT], uc2[NT];
    __shared__ unsigned colmax_bits[NT];  // |x| as bits: unsigned order is float order, NaN above Inf
    auto clear_w = [&] {
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int nt = 0; nt < S::NT1; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) big[mt][nt][e] = small[mt][nt][e] = 0.f;
    };
    auto w_pass = [&](auto scaled_pass) {
        constexpr bool SCALED = decltype(scaled_pass)::value;
        float f1[S::NT1], f2[S::NT1];  // this lane's columns wj + 8 nt + g
#pragma unroll
        for (int nt = 0; nt < S::NT1; ++nt) {
            f1[nt] = SCALED ? sc1[wj + 8 * nt + g] : 1.f;
            f2[nt] = SCALED ? sc2[wj + 8 * nt + g] : 1.f;
        }
        clear_w();
        stream_chunks(false, [&](int, const float* Vc, const float* Cc) {
            tf32x3_warp_tile<2, S::NT1, KC / 8>(
                big, small,
                [&](int mt, int ks) {  // A = V^T: row i is V's column 32 wm + 16 mt + i, contiguous in k
                    uint32_t x[4];
                    ldsm_x4(x, Vc + chunk_at(8 * ks + ak, 32 * wm + 16 * mt + ar));
                    return tf32x3_a(x);
                },
                [&](int nt, int ks) {  // B = C: column j contiguous in k
                    uint32_t x[2];
                    ldsm_x2(x, Cc + chunk_at(8 * ks + bk, wj + 8 * nt + br));
                    return tf32x3_b<SCALED>(x, f1[nt], f2[nt]);
                });
        });
    };
    auto put_w = [&](float sign) {
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int nt = 0; nt < S::NT1; ++nt) {
                const int i = 32 * wm + 16 * mt + g, j = wj + 8 * nt + 2 * q;
                const float* d = big[mt][nt];
                const float* e = small[mt][nt];
                Ws[j * LDW + i] = sign * (d[0] + e[0]);
                Ws[(j + 1) * LDW + i] = sign * (d[1] + e[1]);
                Ws[j * LDW + i + 8] = sign * (d[2] + e[2]);
                Ws[(j + 1) * LDW + i + 8] = sign * (d[3] + e[3]);
            }
    };
    // Tensor cores flush subnormal products and W can overflow: a column of W whose largest entry lies outside
    // [2^-64, 2^64] (or is not finite) has its column of C measured, and where all of that column lies outside the
    // range, W's column is redone with C's column scaled by a power of two. Column by column, so that a large column
    // never pushes a small one of the same strip below FP32's range.
    bool scaled = false;  // any column of the strip
    bool keep = false;    // W is zero: the strip's entries are stored unchanged (FROM)
    if constexpr (PART != WyPart::apply) {
        w_pass(std::false_type{});
        for (int j = tid; j < NT; j += UPDATE_THREADS) colmax_bits[j] = 0u;
        __syncthreads();
#pragma unroll
        for (int nt = 0; nt < S::NT1; ++nt)
#pragma unroll
            for (int par = 0; par < 2; ++par) {
                unsigned m = 0u;
#pragma unroll
                for (int mt = 0; mt < 2; ++mt)
#pragma unroll
                    for (int r = par; r < 4; r += 2)
                        m = max(m, __float_as_uint(big[mt][nt][r] + small[mt][nt][r]) & 0x7fffffffu);
#pragma unroll
                for (int o = 4; o < 32; o <<= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
                if (g == 0) atomicMax(&colmax_bits[wj + 8 * nt + 2 * q + par], m);
            }
        __syncthreads();
        auto outside = [](unsigned bits) {
            const float x = __uint_as_float(bits);
            return !(x >= 0x1p-64f && x <= 0x1p64f);
        };
        unsigned wbits = 0u;  // this thread's column's largest |W| (tid < NT), for the partial's zero test
        if (tid < NT) wbits = colmax_bits[tid];
        if (__syncthreads_or(tid < ncs && outside(wbits))) {
            for (int j = warp; j < ncs; j += UPDATE_THREADS / 32) {  // a warp per flagged column of C
                if (!outside(colmax_bits[j])) continue;
                unsigned m = 0u;
                for (int r = lane; r < mr; r += 32)
                    m = max(m, __float_as_uint(FROM ? cf[r * cf_rs + j] : c[r + (int64_t)j * ldc]) & 0x7fffffffu);
#pragma unroll
                for (int o = 1; o < 32; o <<= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
                __syncwarp();  // every lane has read the flag before lane 0 overwrites it
                if (lane == 0) colmax_bits[j] = m;
            }
            __syncthreads();
        }
        int e = 0;  // this thread's column's exponent (tid < NT)
        bool col_scaled = false;
        if (tid < NT) {
            const float cmax = __uint_as_float(colmax_bits[tid]);
            col_scaled = tid < ncs && outside(wbits) && cmax > 0.f && isfinite(cmax) &&
                         (cmax < 0x1p-64f || cmax > 0x1p64f);
            e = col_scaled ? ilogbf(cmax) : 0;
            sc1[tid] = ldexpf(1.f, -e / 2), sc2[tid] = ldexpf(1.f, -e - (-e / 2));
            uc1[tid] = ldexpf(1.f, e / 2), uc2[tid] = ldexpf(1.f, e - e / 2);
        }
        scaled = __syncthreads_or(col_scaled);
        if (scaled) w_pass(std::true_type{});
        if constexpr (PART == WyPart::partial_w) {  // W_s, its column j scaled by 2^-e_j, and e_j
            float* out = sw.part + (item * splits + split) * (WMAX * NT);
#pragma unroll
            for (int mt = 0; mt < 2; ++mt)
#pragma unroll
                for (int nt = 0; nt < S::NT1; ++nt)
#pragma unroll
                    for (int r = 0; r < 4; ++r) {
                        const int i = 32 * wm + 16 * mt + g + (r & 2 ? 8 : 0), j = wj + 8 * nt + 2 * q + (r & 1);
                        out[j * WMAX + i] = big[mt][nt][r] + small[mt][nt][r];
                    }
            if (tid < NT) sw.scale[(item * splits + split) * NT + tid] = !col_scaled && wbits == 0u ? SCALE_ZERO : e;
            return;
        }
        // W exactly zero (no column rescaled, so no product was flushed that a scaled pass would have kept): C += V (T^T
        // W) would add zeros, so the strip keeps its bits without the second pass over it. Exact zero tails (rank-
        // deficient inputs, columns already reduced) cost one read instead of two reads and a write. FROM: the strip is
        // copied as it is.
        if (!scaled && !__syncthreads_or(tid < ncs && wbits != 0u)) {
            if constexpr (!FROM) return;
            keep = true;
        }
        put_w(1.f);
    } else {  // W' and its per-column scales from wy_reduce_kernel
        const float* wq = sw.wq + item * (WMAX * NT);
        for (int idx = tid; idx < WMAX * NT; idx += UPDATE_THREADS) Ws[(idx / WMAX) * LDW + idx % WMAX] = wq[idx];
        int e = 0;
        if (tid < NT) {
            e = sw.e_of[item * NT + tid];
            uc1[tid] = ldexpf(1.f, e / 2), uc2[tid] = ldexpf(1.f, e - e / 2);
        }
        scaled = __syncthreads_or(e != 0);
    }
    if constexpr (PART == WyPart::whole) {
        for (int idx = tid; idx < WMAX * WMAX; idx += UPDATE_THREADS) {
            const int r = idx % WMAX, cc = idx / WMAX;
            Ts[cc * LDW + r] = r < w && cc < w ? t[r * t_rs + cc * t_cs] : 0.f;
        }
        __syncthreads();

        // W = -T^T W, negated so that the last product adds: A = T^T (row i is T's column), B = W, both contiguous in k
        clear_w();
        tf32x3_warp_tile<2, S::NT1, WMAX / 8>(
            big, small,
            [&](int mt, int ks) { return tf32x3_a_ldsm(Ts + (32 * wm + 16 * mt) * LDW + 8 * ks, LDW, lane); },
            [&](int nt, int ks) { return tf32x3_b_ldsm(Ws + (wj + 8 * nt) * LDW + 8 * ks, LDW, lane); });
        __syncthreads();
        put_w(-1.f);
        __syncthreads();
    }

    // C_strip^T += W^T V^T, KC rows at a time: warp (wjw, wiw) owns columns 16 wjw .. + 16 of the strip and rows
    // 8 NI3 wiw .. + 8 NI3 of each chunk; its 16 columns of W^T, split once, stay in registers.
    const int j3 = 16 * (warp % S::WARPS_J), i3 = 8 * S::NI3 * (warp / S::WARPS_J);
    Tf32x3A wt[WMAX / 8];
#pragma unroll
    for (int ks = 0; ks < WMAX / 8; ++ks) wt[ks] = tf32x3_a_ldsm(Ws + j3 * LDW + 8 * ks, LDW, lane);
    const int jc[2] = {j3 + g, j3 + g + 8};  // this lane's columns of C, each with rows i3 + 8 n + 2q, + 1
    float* ccol[2];
    float u1s[2], u2s[2];  // the update's scale for this lane's columns
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        ccol[h] = c + (int64_t)(jc[h] < ncs ? jc[h] : 0) * ldc;
        u1s[h] = uc1[jc[h]], u2s[h] = uc2[jc[h]];
    }
    // Last chunk first: the strip's rows that the first pass read last should be the likeliest still in L2 (a wave of
    // blocks reads more than L2 holds, so first to first would find its rows evicted; not yet measured).
    stream_chunks(true, [&](int ch, const float* Vc, const float* Cc) {
        float up[1][S::NI3][4] = {}, upsmall[1][S::NI3][4] = {};
        tf32x3_warp_tile<1, S::NI3, WMAX / 8>(
            up, upsmall, [&](int, int ks) { return wt[ks]; },
            [&](int n, int ks) {  // B = V^T: B(k, i) = V(i, k), one element at a time (V is contiguous in i)
                return tf32x3_b_at([&](int k, int i) { return Vc[chunk_at(i3 + 8 * n + i, 8 * ks + k)]; }, lane);
            });
        auto update = [&](float2 old, int n, int h) {
            if (keep) return old;
            const float u0 = up[0][n][2 * h] + upsmall[0][n][2 * h];
            const float u1 = up[0][n][2 * h + 1] + upsmall[0][n][2 * h + 1];
            if (!scaled) return make_float2(old.x + u0, old.y + u1);
            // one rounding: (u 2^(e/2)) 2^(e - e/2) alone may overflow where the sum does not
            return make_float2(fmaf(u0 * u1s[h], u2s[h], old.x), fmaf(u1 * u1s[h], u2s[h], old.y));
        };
        if (VEC && (ch + 1) * KC <= mr && ncs == NT) {  // all of the chunk: no predicates
#pragma unroll
            for (int n = 0; n < S::NI3; ++n)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int i = i3 + 8 * n + 2 * q;
                    const float2 old = *reinterpret_cast<const float2*>(Cc + chunk_at(i, jc[h]));
                    *reinterpret_cast<float2*>(ccol[h] + ch * KC + i) = update(old, n, h);
                }
            return;
        }
#pragma unroll
        for (int n = 0; n < S::NI3; ++n)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int i = i3 + 8 * n + 2 * q;  // and i + 1
                const int row = ch * KC + i;
                if (jc[h] >= ncs || row >= mr) continue;
                const float2 nw = update(*reinterpret_cast<const float2*>(Cc + chunk_at(i, jc[h])), n, h);
                if constexpr (VEC) {
                    *reinterpret_cast<float2*>(ccol[h] + row) = nw;
                } else {
                    ccol[h][row] = nw.x;
                    if (row + 1 < mr) ccol[h][row + 1] = nw.y;
                }
            }
    });
}

// W' = -T^T sum_s W_s for one (matrix, strip) per block, in FP32, column by column: column j of each partial is
// 2^-e_sj times the true one; the sum is taken at the largest e_sj of the column and then normalised so that its
// largest entry is in [1, 2), stored with its exponent E_j: the apply step's tensor cores see entries near 1 (never
// subnormal products), and a large column never pushes a small one out of range.
template <int WMAX, int NT>
__global__ void __launch_bounds__(REDUCE_THREADS) wy_reduce_kernel(int64_t strips, int splits, int w, const float* t,
                                                                   int64_t t_rs, int64_t t_cs, int64_t t_bs,
                                                                   bool t_lower, WySplitWork sw, WyTail tail) {
    qr2_follow_previous_kernel();  // launched with Qr2Launch::pdl
    constexpr int PER = WMAX * NT / REDUCE_THREADS;  // entries per thread, tid + REDUCE_THREADS i
    static_assert(REDUCE_THREADS % WMAX == 0, "a warp's entries lie in one column");
    __shared__ float Ss[NT][WMAX + 1];    // the sum: (k, j) at [j][k]
    __shared__ float Tt[WMAX][WMAX + 1];  // T(r, k) at [k][r]
    __shared__ int e0[NT];
    __shared__ unsigned colmax_bits[NT];
    const int64_t item = blockIdx.x;
    const int tid = threadIdx.x;
    if (tail.zero(item / strips, (int)(item % strips) * NT)) return;  // its partial_w and apply blocks left it too
    t += (item / strips) * t_bs;
    const float* part = sw.part + item * splits * (WMAX * NT);
    const int* scale = sw.scale + item * splits * NT;

    for (int j = tid; j < NT; j += REDUCE_THREADS) {
        int e = INT_MIN;
#pragma unroll 4
        for (int s = 0; s < splits; ++s)
            if (scale[s * NT + j] != SCALE_ZERO) e = max(e, scale[s * NT + j]);
        e0[j] = e == INT_MIN ? 0 : e;
        colmax_bits[j] = 0u;
    }
    for (int idx = tid; idx < WMAX * WMAX; idx += REDUCE_THREADS) {
        const int r = idx % WMAX, k = idx / WMAX;
        Tt[k][r] = r < w && k < w ? t[r * t_rs + k * t_cs] : 0.f;
    }
    __syncthreads();
    // The partials of REDUCE_SPLITS splits are loaded together (one trip to L2 for each group, not each split), then
    // added one split after another, in the order of the splits: the same bits as a split at a time.
    float sum[PER] = {};
    for (int s0 = 0; s0 < splits; s0 += REDUCE_SPLITS) {
        float x[REDUCE_SPLITS][PER];
        int e[REDUCE_SPLITS][PER];
#pragma unroll
        for (int u = 0; u < REDUCE_SPLITS; ++u) {
            const int s = s0 + u < splits ? s0 + u : s0;  // past the last split: loaded again, not added
#pragma unroll
            for (int i = 0; i < PER; ++i) {
                x[u][i] = part[s * (WMAX * NT) + tid + REDUCE_THREADS * i];
                e[u][i] = scale[s * NT + (tid + REDUCE_THREADS * i) / WMAX];
            }
        }
#pragma unroll
        for (int u = 0; u < REDUCE_SPLITS; ++u)
            if (s0 + u < splits)
#pragma unroll
                for (int i = 0; i < PER; ++i) {
                    const int j = (tid + REDUCE_THREADS * i) / WMAX;
                    sum[i] += e[u][i] == SCALE_ZERO || e[u][i] == e0[j] ? x[u][i] : ldexpf(x[u][i], e[u][i] - e0[j]);
                }
    }
#pragma unroll
    for (int i = 0; i < PER; ++i) {  // each column's largest entry (NaN above Inf)
        unsigned m = __float_as_uint(sum[i]) & 0x7fffffffu;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
        if ((tid & 31) == 0) atomicMax(&colmax_bits[(tid + REDUCE_THREADS * i) / WMAX], m);
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < PER; ++i) {
        const int idx = tid + REDUCE_THREADS * i, j = idx / WMAX;
        const float m = __uint_as_float(colmax_bits[j]);
        const int up = isfinite(m) && m > 0.f ? -ilogbf(m) : 0;  // the column times 2^up has its largest in [1, 2)
        Ss[j][idx % WMAX] = up == 0 ? sum[i] : ldexpf(sum[i], up);
    }
    __syncthreads();
    // -T^T S: this thread's entries share row k (REDUCE_THREADS is a multiple of WMAX) and lie in PER columns, so one
    // pass over r feeds PER independent sums, each still taken in order of r (T upper triangular, or T^T lower)
    float* wq = sw.wq + item * (WMAX * NT);
    {
        const int k = tid % WMAX, r0 = t_lower ? k : 0, r1 = t_lower ? WMAX : k + 1;
        float acc[PER] = {};
#pragma unroll 4
        for (int r = 0; r < WMAX; ++r) {
            if (r < r0 || r >= r1) continue;
            const float tkr = Tt[k][r];
#pragma unroll
            for (int i = 0; i < PER; ++i) acc[i] = fmaf(tkr, Ss[(tid + REDUCE_THREADS * i) / WMAX][r], acc[i]);
        }
#pragma unroll
        for (int i = 0; i < PER; ++i) wq[tid + REDUCE_THREADS * i] = -acc[i];
    }
    for (int j = tid; j < NT; j += REDUCE_THREADS) {
        const float m = __uint_as_float(colmax_bits[j]);
        sw.e_of[item * NT + j] = e0[j] - (isfinite(m) && m > 0.f ? -ilogbf(m) : 0);
    }
}

// One launch of wy_update_kernel: its PART of the update of every (matrix, NT-column strip), the rows split in
// blocks of split_rows.
template <int WMAX, int NT, WyPart PART>
int launch_wy_update(const WyArgs& a, int split_rows, const WySplitWork& sw, void* stream) {
    const int64_t strips = (a.nc + NT - 1) / NT;
    const int splits = (a.mr + split_rows - 1) / split_rows;
    if (a.batch > INT_MAX / strips / splits) return qr2_record_error("wy_update launch", "more than 2^31 - 1 thread blocks");
    const bool vec = a.mr % 4 == 0 && a.ldv % 4 == 0 && a.ldc % 4 == 0 && a.v_bs % 4 == 0 && a.c_bs % 4 == 0 &&
                     (uintptr_t)a.v % 16 == 0 && (uintptr_t)a.c % 16 == 0;
    Qr2Launch how;
    how.pdl = true;  // the kernel starts with qr2_follow_previous_kernel
    how.grid = dim3((unsigned)(a.batch * strips * splits));
    how.block = dim3(UPDATE_THREADS);
    how.smem = WyUpdateShape<WMAX, NT>::floats * sizeof(float);
    how.smem_limit = how.smem;
    auto kernel = vec ? wy_update_kernel<WMAX, NT, true, PART> : wy_update_kernel<WMAX, NT, false, PART>;
    if constexpr (PART == WyPart::whole)
        if (a.cf)
            kernel = vec ? wy_update_kernel<WMAX, NT, true, PART, true> : wy_update_kernel<WMAX, NT, false, PART, true>;
    return qr2_launch(kernel, how, stream, "wy_update launch", strips, splits, split_rows, a.mr, a.w, a.nc, a.v, a.ldv,
                      a.v_bs, a.t, a.t_rs, a.t_cs, a.t_bs, a.c, a.ldc, a.c_bs, a.cf, a.cf_rs, a.cf_bs, sw, a.tail);
}


// Thread blocks of one PART of the split update that an SM holds at once (registers, shared memory, threads), per
// instantiation; at most SPLIT_WAVE_BLOCKS.
template <int WMAX, bool VEC, WyPart PART>
int update_blocks_per_sm(const qr2_device* dev) {
    static std::atomic<int> regs{-1};
    if (regs.load(std::memory_order_relaxed) < 0) {
        cudaFuncAttributes fa;
        if (cudaFuncGetAttributes(&fa, wy_update_kernel<WMAX, 64, VEC, PART>) != cudaSuccess) {
            (void)cudaGetLastError();
            return SPLIT_WAVE_BLOCKS;  // what the launch bounds promise for the 32-wide form
        }
        regs.store(fa.numRegs, std::memory_order_relaxed);
    }
    using S = WyUpdateShape<WMAX, 64>;
    const int per_thread = (regs.load(std::memory_order_relaxed) + 7) / 8 * 8;  // allocated in eights
    const int by_regs = 65536 / (per_thread * UPDATE_THREADS);
    const int by_smem = (dev->smem_optin + 1024) / (S::floats * (int)sizeof(float) + 5 * 64 * 4 + 1024);
    int blocks = by_regs < by_smem ? by_regs : by_smem;
    if (blocks > SPLIT_WAVE_BLOCKS) blocks = SPLIT_WAVE_BLOCKS;
    return blocks < 1 ? 1 : blocks;
}

// Row splits of `items` (matrix, 64-column strip) pairs: as many splits of each strip as one wave of the partial-W
// kernel holds (a second wave with a few blocks costs nearly as much as a full one: 2 x 4096 had 590 blocks for 528
// places), each split at least SPLIT_MIN_ROWS rows (a few large matrices, where a block per strip walked all rows with
// SMs idle); 1 where that gives fewer than two.
int row_splits(int64_t items, int mr, int per_sm, const qr2_device* dev) {
    int64_t s = per_sm * (int64_t)dev->sms / items;
    if (s > mr / SPLIT_MIN_ROWS) s = mr / SPLIT_MIN_ROWS;
    if (s > MAX_SPLITS) s = MAX_SPLITS;
    return s < 2 ? 1 : (int)s;
}

// The 3xTF32 update's row splits: 1 while 32-column strips give every SM two blocks.
int update_splits(int64_t batch, int mr, int nc, int per_sm, const qr2_device* dev) {
    if (batch * ((nc + 31) / 32) >= 2 * (int64_t)dev->sms) return 1;
    return row_splits(batch * ((nc + 63) / 64), mr, per_sm, dev);
}

// Rows of one apply block: at most APPLY_ROWS, and the blocks as close below a whole number of waves as KC-row
// multiples allow.
int apply_rows(int64_t items, int mr, int per_sm, const qr2_device* dev) {
    const int64_t places = per_sm * (int64_t)dev->sms;
    const int64_t fewest = items * ((mr + APPLY_ROWS - 1) / APPLY_ROWS);
    const int64_t per_item = (fewest + places - 1) / places * places / items;  // >= the fewest splits of a strip
    const int64_t rows = (mr + per_item - 1) / per_item;
    return (int)((rows + KC - 1) / KC * KC);
}

// Rows of one partial W: splits of mr in whole chunks.
int split_rows_of(int mr, int splits) { return ((mr + splits - 1) / splits + KC - 1) / KC * KC; }

// The split update's middle launch: W' of every (matrix, 64-column strip) from its partial W's (split_rows rows each).
template <int WMAX>
int launch_wy_reduce(const WyArgs& a, int split_rows, const WySplitWork& sw, void* stream) {
    const int64_t strips = (a.nc + 63) / 64;
    Qr2Launch how;
    how.pdl = true;  // the kernel starts with qr2_follow_previous_kernel
    how.grid = dim3((unsigned)(a.batch * strips));
    how.block = dim3(REDUCE_THREADS);
    return qr2_launch(wy_reduce_kernel<WMAX, 64>, how, stream, "wy_reduce launch", strips,
                      (a.mr + split_rows - 1) / split_rows, a.w, a.t, a.t_rs, a.t_cs, a.t_bs, a.t_lower, sw, a.tail);
}

template <int WMAX>
int split_update(const WyArgs& a, int splits, const WySplitWork& sw, const qr2_device* dev, void* stream) {
    const int split_rows = split_rows_of(a.mr, splits);
    if (launch_wy_update<WMAX, 64, WyPart::partial_w>(a, split_rows, sw, stream)) return 1;
    if (launch_wy_reduce<WMAX>(a, split_rows, sw, stream)) return 1;
    const int per_sm = update_blocks_per_sm<WMAX, true, WyPart::apply>(dev);
    return launch_wy_update<WMAX, 64, WyPart::apply>(a, apply_rows(a.batch * ((a.nc + 63) / 64), a.mr, per_sm, dev),
                                                     sw, stream);
}

// The split update's regions for `parts` partial W's of wmax x 64 (see split_floats).
WySplitWork split_work(float* base, int64_t parts, int wmax, const qr2_device* dev) {
    WySplitWork sw;
    sw.scale = reinterpret_cast<int*>(base);
    sw.e_of = sw.scale + 6 * (int64_t)dev->sms * 64;
    sw.part = reinterpret_cast<float*>(sw.e_of + 2 * (int64_t)dev->sms * 64);
    sw.wq = sw.part + parts * wmax * 64;
    return sw;
}

// The split update reads C in place: a row-major source is copied into it first.
int source_into_c(const WyArgs& a, void* stream) {
    return a.cf && qr2_transpose_run(a.cf, a.cf_rs, 1, a.cf_bs, a.c, a.ldc, a.c_bs, a.mr, a.nc, a.batch, stream);
}

// 64-column strips; 32 where 64 would leave fewer than two blocks per SM and rows are too few to split.
int wy_update(const WyArgs& a, float* split_base, const qr2_device* dev, void* stream) {
    const int wmax = a.w <= 32 ? 32 : 64;
    const bool few = a.batch * ((a.nc + 31) / 32) < 2 * (int64_t)dev->sms;  // only then may rows be split
    const int per_sm = !few ? 0
                       : wmax == 32 ? update_blocks_per_sm<32, true, WyPart::partial_w>(dev)
                                    : update_blocks_per_sm<64, true, WyPart::partial_w>(dev);
    const int splits = update_splits(a.batch, a.mr, a.nc, per_sm, dev);
    const WySplitWork sw = split_work(split_base, a.batch * ((a.nc + 63) / 64) * splits, wmax, dev);
    if (splits > 1) {
        if (source_into_c(a, stream)) return 1;
        WyArgs in_c = a;
        in_c.cf = nullptr;
        return wmax == 32 ? split_update<32>(in_c, splits, sw, dev, stream)
                          : split_update<64>(in_c, splits, sw, dev, stream);
    }
    const bool narrow = a.nc <= 32 || a.batch * ((a.nc + 63) / 64) < 2 * (int64_t)dev->sms;
    if (a.w <= 32) {
        if (narrow) return launch_wy_update<32, 32, WyPart::whole>(a, a.mr, sw, stream);
        return launch_wy_update<32, 64, WyPart::whole>(a, a.mr, sw, stream);
    }
    if (narrow) return launch_wy_update<64, 32, WyPart::whole>(a, a.mr, sw, stream);
    return launch_wy_update<64, 64, WyPart::whole>(a, a.mr, sw, stream);
}

// The split update's workspace, after the batch's per-matrix regions: the scale exponents, one per column of 64 (at most
// 6 SMs partials, 2 SMs (matrix, strip) items: items < 2 SMs whenever rows are split, and items x splits < 4 SMs +
// items), then the partial W's and each item's W', WMAX x 64 each; before the update, gram_kernel's partial Grams
// (w x w) or merge_t's partial V1^T V2 (32 x 32) where they split rows. Sized for an m x n problem with outer panels of
// w columns.
int64_t split_floats(int64_t m, int64_t n, int w, int64_t batch, const qr2_device* dev) {
    const int64_t sms = dev->sms, splits = m / SPLIT_MIN_ROWS < MAX_SPLITS ? m / SPLIT_MIN_ROWS : MAX_SPLITS;
    const int64_t gram_split = gram_parts(batch, (int)(m < INT_MAX ? m : INT_MAX), dev), ww = w > MERGE_H ? w : MERGE_H;
    const int64_t gram = gram_split > 1 ? batch * gram_split * ww * ww : 0;
    if (batch >= 2 * sms || splits < 2 || n <= 0) return gram;
    const int64_t items = batch * ((n + 63) / 64) < 2 * sms ? batch * ((n + 63) / 64) : 2 * sms;
    const int64_t parts = items * splits < 6 * sms ? items * splits : 6 * sms;
    const int64_t update = 8 * sms * 64 + (parts + items) * (w <= 32 ? 32 : 64) * 64;
    return update > gram ? update : gram;  // the partial Grams are summed before the update starts
}

}  // namespace

// The three FP32 cuBLAS GEMMs, for updates too narrow to give every SM a strip: cuBLAS splits a long K there.
int cublas_update(const qr2_update_args* a, cublasHandle_t h, const float* T, int64_t t_bs, float* W, float* W2) {
    const int w = a->w, mr = a->mr, nc = a->nc;
    const int64_t ws = a->work_bs;
    if (gemm(h, CUBLAS_OP_T, CUBLAS_OP_N, w, nc, mr, 1.f, a->v, a->ldv, a->v_bs, a->c, a->ldc, a->c_bs, 0.f, W, w, ws,
             a->batch, "cublasGemmStridedBatchedEx(W = V^T C)"))
        return 1;
    if (gemm(h, a->apply_q ? CUBLAS_OP_N : CUBLAS_OP_T, CUBLAS_OP_N, w, nc, w, 1.f, T, w, t_bs, W, w, ws, 0.f, W2, w,
             ws, a->batch, "cublasGemmStridedBatchedEx(W = T^T W)"))
        return 1;
    return gemm(h, CUBLAS_OP_N, CUBLAS_OP_N, mr, nc, w, -1.f, a->v, a->ldv, a->v_bs, W2, w, ws, 1.f, a->c, a->ldc,
                a->c_bs, a->batch, "cublasGemmStridedBatchedEx(C -= V W)");
}

extern "C" int64_t qr2_update_work_floats(int w, int nc) {
    return 2 * (int64_t)w * w + 2 * (int64_t)w * nc;  // G and T when T is built here; W and W2 for cuBLAS
}

extern "C" int64_t qr2_update_split_floats(int64_t m, int64_t n, int w, int64_t batch, const qr2_device* dev) {
    return split_floats(m, n, w, batch, dev);
}

extern "C" int qr2_update_may_use_blas(int64_t m, int64_t batch, const qr2_device* dev) {
    return batch < dev->sms && m > SPLIT_MAX_ROWS;  // the rule of qr2_update_run's on_cublas, for any strip count
}

extern "C" int qr2_update_run(const qr2_update_args* a, void* blas_handle, const qr2_device* dev, void* stream) {
    if (a->batch <= 0 || a->w <= 0 || a->nc <= 0 || a->mr <= 0) return 0;
    if (a->w > QR2_UPDATE_MAX_W) return qr2_record_error("update", "block wider than QR2_UPDATE_MAX_W");
    const int w = a->w, mr = a->mr;
    const float* T = a->t;
    int64_t t_bs = a->t_bs;
    cublasHandle_t h = (cublasHandle_t)blas_handle;
    float* G = a->work;
    float* Tw = G + (int64_t)w * w;
    const int64_t ws = a->work_bs;
    // Fewer 32-column strips than SMs and rows so many that the partial W's would be summed from more than 16 splits
    // (wy_reduce_kernel adds them one after another): cuBLAS, which splits K. H200: the split update took 2 x 4096
    // 16.6 -> 15.4 ms, 1 x 4096^2 13.7 -> 12.9, 4 x 1500 x 1000 2.91 -> 2.72, and lost 1 x 100000 x 256 8.1 -> 8.3
    // (docs/results/2026-12-02-h200-update-waves.txt). Fewer rows: the update kernel (one launch instead of cuBLAS's
    // three GEMMs): 40 x 352 486-508 -> 451 us, 8 x 2048 6.42 -> 6.26 ms, 1 x 3000^2 7.06 -> 6.79
    // (docs/results/2026-12-03-h200-small-updates.txt).
    // (It ignores zero_from: sound since only register panels, at most 512 rows, skip a zero tail's panels, so no V or
    // T it reads is a skipped panel's.)
    const bool on_cublas = a->batch * ((a->nc + 31) / 32) < dev->sms && mr > SPLIT_MAX_ROWS;
    // Q = Q_1 Q_2 for the blocks of the first UPDATE_W reflectors and the rest: T's diagonal blocks are their T
    // factors, and the later block's reflectors are zero above its first row. Q^T applies Q_1^T first, Q applies Q_2.
    const int last = (w < mr ? w : mr) - 1;  // a block past the last row holds no reflector
    const int pieces = last / UPDATE_W + 1;
    // C's entries elsewhere: only the one-piece update kernel reads them from there; the rest start from C
    const float* from = a->c_from;
    if (from && (on_cublas || pieces > 1)) {
        if (qr2_transpose_run(from, a->from_rs, 1, a->from_bs, a->c, a->ldc, a->c_bs, mr, a->nc, a->batch, stream))
            return 1;
        from = nullptr;
    }
    if (on_cublas && !h) return qr2_record_error("update", "needs cuBLAS, and no handle is bound to this stream");
    if (on_cublas) {
        // torch's handle carries torch's math mode (TF32 when torch allows it); qr2 picks its own.
        if (check_cublas(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode")) return 1;
    }
    if (T == nullptr) {
        // G = V^T V in FP32 partial sums (in the call's split region where rows are split), then T from their sum
        const int parts = gram_parts(a->batch, mr, dev);
        float* g = parts == 1 ? G : a->work + a->batch * ws;
        const int64_t g_bs = parts == 1 ? ws : (int64_t)parts * w * w;
        const int split_rows = ((mr + parts - 1) / parts + GRAM_ROWS - 1) / GRAM_ROWS * GRAM_ROWS;
        Qr2Launch gram;
        gram.pdl = true;
        gram.grid = dim3((unsigned)(a->batch * parts));
        gram.block = dim3(GRAM_THREADS);
        auto kernel = w <= 32 ? gram_kernel<32> : w <= 64 ? gram_kernel<64> : gram_kernel<128>;
        if (qr2_launch(kernel, gram, stream, "gram launch", mr, w, split_rows, parts, a->v, a->ldv, a->v_bs, g, g_bs))
            return 1;
        Qr2Launch how;
        how.pdl = true;  // the kernel starts with qr2_follow_previous_kernel
        how.grid = dim3((unsigned)a->batch);
        how.block = dim3(T_THREADS);
        how.smem = 3 * (size_t)w * w * sizeof(float);
        how.smem_limit = 3 * (size_t)QR2_UPDATE_MAX_W * QR2_UPDATE_MAX_W * sizeof(float);  // one value for every call
        if (qr2_launch(larft_from_gram_kernel, how, stream, "larft_from_gram launch", (const float*)g, g_bs, parts,
                       a->tau, a->tau_bs, Tw, ws, w))
            return 1;
        T = Tw;
        t_bs = ws;
    }
    if (on_cublas) return cublas_update(a, h, T, t_bs, Tw + (int64_t)w * w, Tw + (int64_t)w * w + (int64_t)w * a->nc);
    for (int i = 0; i < pieces; ++i) {
        const int k = (a->apply_q ? pieces - 1 - i : i) * UPDATE_W;
        const int64_t t_rs = a->apply_q ? w : 1, t_cs = a->apply_q ? 1 : w;
        const WyArgs piece = {a->batch, mr - k, w - k < UPDATE_W ? w - k : UPDATE_W, a->nc, a->v + k * a->ldv + k,
                              a->ldv, a->v_bs, T + (int64_t)k * w + k, t_rs, t_cs, t_bs, a->apply_q != 0,
                              a->c + k, a->ldc, a->c_bs, from, a->from_rs, a->from_bs, {a->zero_from, a->col0}};
        if (wy_update(piece, a->work + a->batch * a->work_bs, dev, stream)) return 1;
    }
    return 0;
}

extern "C" int qr2_update_merge_t(int64_t batch, int mr, int w1, int w2, const float* v, int64_t ldv, int64_t v_bs,
                                  const float* t1, const float* t2, int64_t t_bs, float* t, int64_t out_bs,
                                  float* work, const qr2_device* dev, void* stream) {
    if (batch <= 0 || w1 <= 0 || w2 <= 0) return 0;
    if (w1 > MERGE_H || w2 > MERGE_H) return qr2_record_error("merge_t", "a half wider than QR2_PANEL_MAX_W");
    int split_rows;
    const int parts = merge_parts(batch, mr, w1, dev, &split_rows);
    if (parts > 1 && !work) return qr2_record_error("merge_t", "no workspace for the partial products");
    if (batch > INT_MAX / parts) return qr2_record_error("merge_t launch", "more than 2^31 - 1 thread blocks");
    Qr2Launch how;
    how.pdl = true;  // the kernels start with qr2_follow_previous_kernel
    how.grid = dim3((unsigned)(batch * parts));
    how.block = dim3(MERGE_THREADS);
    if (qr2_launch(merge_t_kernel, how, stream, "merge_t launch", parts, split_rows, mr, w1, w2, v, ldv, v_bs, t1, t2,
                   t_bs, t, out_bs, work))
        return 1;
    if (parts == 1) return 0;
    how.grid = dim3((unsigned)batch);
    return qr2_launch(merge_t_finish_kernel, how, stream, "merge_t_finish launch", parts, w1, w2, (const float*)work,
                      t1, t2, t_bs, t, out_bs);
}

extern "C" int qr2_update_merge_t_parts(int64_t batch, int mr, int w1, const qr2_device* dev) {
    int split_rows;
    return merge_parts(batch, mr, w1, dev, &split_rows);
}
