// builder.cu - the builder family: Householder QR of whole matrices, one thread block per matrix or a cluster of two or three blocks
// that split its columns (up to 176 x 176 on one or two blocks, 256 x 256 on three): bulk warps owning columns apply
// the reflectors, one more warp builds them.
//
// Bulk layout: a bulk warp holds a block of 16 columns, two per thread (columns k and k + 8 of the block on lanes
// with l & 7 = k), each column over the four quarters q = l >> 3 of the warp. Rows come in groups of four dealt to
// the quarters in turn: group 4 j + q is the thread's local group j, rows 16 j + 4 q .. + 3. A thread reads each
// float4 of the reflector once, into registers, for both columns' dots and updates; a dot is the thread's FMAs and
// two shuffles. The blocks are dealt so that the bulk warps sharing the builder's scheduler get the first ones.
//
// The chain of a factorisation runs through one column per reflector: r + 1 must have reflector r applied before
// reflector r + 1 can be built from it. That work sits on one extra warp, the builder, which holds that single column
// across its 32 lanes (row i on lane i % 32), so its dot and norm are a few FMAs and one butterfly. Step r, between
// two block barriers:
//   builder: takes column r + 1 as published by its bulk owner (reflectors up to r - 1 applied), applies reflector
//            r (in its registers), builds reflector r + 1 (slarfg's scalars, FP64 when the tail is tiny) and
//            publishes it: u for all rows (0 above the diagonal, dd on it) into slot r + 1 of a shared-memory tile
//            (see tile_at), and its scalars.
//   bulk:    applies reflector r (published in step r - 1) to the columns right of r; the owner lanes of column
//            r + 2 then publish it for the builder's next step (buffers by step parity).
// One barrier a step is the only synchronisation, and nothing else sits on the builder's chain: the bulk warps do
// no masking (u is 0 above the diagonal) and no scalars (they read tau_u), and H's reflector columns go out at the
// end, from the tile (global stores before a block barrier would hold the barrier until they complete).
//
// As in warp.cu the matrix is scaled by a power of two to max|a| in [0.5, 1) (exact), the reflector is applied
// unscaled (u_r = alpha - beta, tau_u = tau / (alpha - beta)^2) with its beta and 1 / (alpha - beta) kept for the
// output (R's diagonal, v = u / (alpha - beta)), and a column so small that its FP32 squares lose precision gets its
// scalars in FP64 (u is then v itself). The local groups of a super-group of sixteen rows are unrolled at compile
// time, so the update skips the groups above the reflector for free.
#include <cooperative_groups.h>
#include <float.h>

#include <atomic>

#include "cluster.cuh"
#include "launch.cuh"
#include "reduce.cuh"
#include "reflector.cuh"

namespace cg = cooperative_groups;

namespace {

constexpr unsigned FULL = 0xffffffffu;
constexpr int MAX_WARPS = (QR2_BUILDER_MAX + 15) / 16 + 1;  // a lone block's; a cluster's blocks have fewer

// RQ rows per bulk thread: a column of 4 RQ rows over four threads; the builder's lanes hold BR = 4 RQ / 32 rows each
// (rounded up).
template <int RQ>
__host__ __device__ constexpr int builder_rows() { return (4 * RQ + 31) / 32; }

template <int RQ>
struct __align__(16) BuilderSmem {  // col is read and written as float4
    static constexpr int ROWS = 32 * builder_rows<RQ>();
    static constexpr int KMAX = 4 * RQ > QR2_BUILDER_MAX ? 4 * RQ : QR2_BUILDER_MAX;  // reflectors: K <= m <= 4 RQ
    float col[2][ROWS];  // column c for the builder in buffer c & 1 (rows from its super-group on)
    // reflector r's scalars: tau_u to apply it; beta (R's diagonal), rd (v = u rd) and tau for the output
    float tau_u[KMAX], beta[KMAX], rd[KMAX], tau[KMAX];
    float amax[MAX_WARPS];
};

// The tile holds reflector r in ROWS floats from tile_at(r) on (row i at tile_at(r) + i). Reflector r is 0 above its
// super-group's first row 16 (r >> 4) and nobody reads those rows, so the 256-row build (RQ = 64) stores only the
// rows from there on: 136 KiB at 256 x 256 where the square tile would take 256 KiB. Its tile_at(r) then lies
// 16 (r >> 4) floats before the first stored row, inside reflector r - 1's rows, which reflector r's writers must skip.
template <int RQ>
__host__ __device__ constexpr bool packed_tile() { return RQ == 64; }

template <int RQ>
__host__ __device__ constexpr int tile_at(int r) {
    constexpr int ROWS = BuilderSmem<RQ>::ROWS;
    if (!packed_tile<RQ>()) return r * ROWS;
    const int g = r >> 4;  // super-groups before r's: 16 reflectors of ROWS - 16 g' rows each
    return 16 * (g * ROWS - 8 * g * (g - 1)) + (r & 15) * (ROWS - 16 * g) - 16 * g;
}

// Floats of the tile for reflectors 0 .. k - 1.
template <int RQ>
__host__ __device__ constexpr int tile_floats(int k) {
    return tile_at<RQ>(k) + (packed_tile<RQ>() ? 16 * (k >> 4) : 0);
}

// The step barrier of the `threads` threads that take part in the steps. The builder and the bulk warps reach it from
// different code: barrier.sync without .aligned (__syncthreads is bar.sync, which PTX defines as .aligned: one code
// location for the whole block).
__device__ __forceinline__ void step_barrier(int threads) {
    asm volatile("barrier.sync 1, %0;" ::"r"(threads) : "memory");
}

// Row of the column held in local row i by quarter q.
__device__ __forceinline__ int global_row(int i, int q) { return 16 * (i >> 2) + 4 * q + (i & 3); }

// ---- the builder warp ----

template <int BR>
struct Builder {
    float y[BR];   // the column being turned into the next reflector: row 32 i + lane
    float uu[BR];  // the last reflector built, as published
    float tau_u;
};

// Sum over the warp.
template <typename T>
__device__ __forceinline__ T warp_sum(T x) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(FULL, x, off);
    return x;
}

// Column c (published with reflectors up to c - 2 applied) gets reflector c - 1 (in b.uu, when c > 0) and becomes
// reflector c, published as slot c of the tile (u for every stored row: 0 above row c, dd on it) and its scalars. The
// column is read without masks: u_{c-1} is 0 above row c - 1, rows past the matrix are 0, and rows the owner did not
// publish hold finite values of earlier columns (or the zeros they were cleared to).
//
// The builder's registers hold rows 32 i + lane; those of i < I0 (all above row c - 1, so u_{c-1} and the tail are 0
// there, and nobody reads them from the tile) are skipped: I0 = (c - 1) >> 5, a compile-time constant for the 32
// columns of a band (see builder_steps), which takes most of the rows off the chain late in the matrix.
template <int RQ, int BR, int I0>
__device__ __forceinline__ void build_reflector(Builder<BR>& b, BuilderSmem<RQ>& sm, float* tile, int c, int lane) {
    const float* col = sm.col[c & 1];
#pragma unroll
    for (int i = I0; i < BR; ++i) b.y[i] = col[32 * i + lane];
    // One butterfly for reflector c - 1's dot with the column and the updated tail's sum of squares: with y' = y - s u
    // (s = tau_u (u . y)), |y'_tail|^2 = |y_tail|^2 - 2 s (u . y)_tail + s^2 |u_tail|^2, four sums at once. That
    // difference cancels when y' is much shorter than y or s u; then the tail's squares are summed again from y'.
    const float alpha0 = col[c];  // row c: broadcast loads
    const float uc = c > 0 ? tile[tile_at<RQ>(c - 1) + c] : 0.f;
    float sum[4] = {0.f, 0.f, 0.f, 0.f};  // u . y, then over the tail rows > c: y . y, u . y, u . u
#pragma unroll
    for (int i = I0; i < BR; ++i) {
        const bool tail = 32 * i + lane > c;
        sum[0] = fmaf(b.uu[i], b.y[i], sum[0]);
        sum[1] = tail ? fmaf(b.y[i], b.y[i], sum[1]) : sum[1];
        sum[2] = tail ? fmaf(b.uu[i], b.y[i], sum[2]) : sum[2];
        sum[3] = tail ? fmaf(b.uu[i], b.uu[i], sum[3]) : sum[3];
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
#pragma unroll
        for (int k = 0; k < 4; ++k) sum[k] += __shfl_xor_sync(FULL, sum[k], off);
    const float s = b.tau_u * sum[0];
    const float alpha = fmaf(-s, uc, alpha0);  // as row c of y' below, bit for bit; -0 stays -0 (R's diagonal)
    float ss = fmaf(s, fmaf(s, sum[3], -2.f * sum[2]), sum[1]);
#pragma unroll
    for (int i = I0; i < BR; ++i) b.y[i] = fmaf(-s, b.uu[i], b.y[i]);
    if (!(ss >= 0.5f * fmaf(s * s, sum[3], sum[1]))) {  // warp-uniform (a butterfly's sums agree on every lane)
        ss = 0.f;
#pragma unroll
        for (int i = I0; i < BR; ++i) ss = 32 * i + lane > c ? fmaf(b.y[i], b.y[i], ss) : ss;
        ss = warp_sum(ss);
    }
    float beta, tau, rd;
    if (ss >= QR2_TINY_SUM_OF_SQUARES) {  // warp-uniform
        const UnscaledReflector f = unscaled_reflector(alpha, ss);
        beta = f.beta, tau = f.tau, rd = f.rd;
        b.tau_u = f.tau_u;
#pragma unroll
        for (int i = I0; i < BR; ++i) {
            const int row = 32 * i + lane;
            b.uu[i] = row < c ? 0.f : row == c ? f.dd : b.y[i];
        }
    } else {
        // FP64 path: the tail's squares from the FP32 column; v = tail / (alpha - beta) in FP64 (its scale may not
        // fit FP32), applied as u = (1, v) with tau_u = tau. A zero tail: tau = 0, nothing changes (LAPACK), v = 0.
        double ss64 = 0.0;
#pragma unroll
        for (int i = I0; i < BR; ++i) ss64 = 32 * i + lane > c ? fma((double)b.y[i], (double)b.y[i], ss64) : ss64;
        ss64 = warp_sum(ss64);
        double beta64 = alpha, tau64 = 0.0, scal = 0.0;
        if (ss64 != 0.0) householder_scalars((double)alpha, ss64, beta64, tau64, scal);
        beta = (float)beta64, tau = (float)tau64, rd = 1.f;  // u is v itself
        b.tau_u = tau;
#pragma unroll
        for (int i = I0; i < BR; ++i) {
            const int row = 32 * i + lane;
            b.uu[i] = row < c ? 0.f : row == c ? 1.f : (float)((double)b.y[i] * scal);
        }
    }
    float* u = tile + tile_at<RQ>(c);
#pragma unroll
    for (int i = I0; i < BR; ++i)
        if (!packed_tile<RQ>() || 32 * i + lane >= 16 * (c >> 4)) u[32 * i + lane] = b.uu[i];
    if (lane == 0) sm.tau_u[c] = b.tau_u, sm.beta[c] = beta, sm.rd[c] = rd, sm.tau[c] = tau;
}

// The builder's steps r_lo .. r_hi - 1: step r waits at the step barrier, then applies reflector r to column r + 1 and
// builds reflector r + 1 from it; by bands of 32 steps, unrolled (I0 = r >> 5, see build_reflector).
template <int RQ, int BR, int I0>
__device__ __forceinline__ void builder_steps(Builder<BR>& b, BuilderSmem<RQ>& sm, float* tile, int r_lo, int r_hi,
                                              int lane, int threads) {
    if constexpr (I0 < BR) {
        const int end = r_hi < 32 * I0 + 32 ? r_hi : 32 * I0 + 32;
#pragma unroll 1
        for (int r = r_lo > 32 * I0 ? r_lo : 32 * I0; r < end; ++r) {
            step_barrier(threads);
            if (r + 1 < r_hi) build_reflector<RQ, BR, I0>(b, sm, tile, r + 1, lane);
        }
        if (end == 32 * I0 + 32) builder_steps<RQ, BR, I0 + 1>(b, sm, tile, r_lo, r_hi, lane, threads);
    }
}

// ---- the bulk warps ----

// Reflector r (r in super-group J, rows 16 J .. 16 J + 15) applied to the thread's two columns from local group J on
// (u is 0 above row r). u is read once, into registers, for both columns' dots and updates. tau_u is 0 for columns at
// or left of r.
template <int RQ, int J>
__device__ __forceinline__ void apply_reflector(float (&x0)[RQ], float (&x1)[RQ], const float4* u, int q, float tau0,
                                                float tau1) {
    float4 uq[RQ / 4];
    float d0[4] = {0.f, 0.f, 0.f, 0.f}, d1[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int j = J; j < RQ / 4; ++j) {
        uq[j] = u[4 * j + q];
        d0[0] = fmaf(uq[j].x, x0[4 * j], d0[0]);
        d0[1] = fmaf(uq[j].y, x0[4 * j + 1], d0[1]);
        d0[2] = fmaf(uq[j].z, x0[4 * j + 2], d0[2]);
        d0[3] = fmaf(uq[j].w, x0[4 * j + 3], d0[3]);
        d1[0] = fmaf(uq[j].x, x1[4 * j], d1[0]);
        d1[1] = fmaf(uq[j].y, x1[4 * j + 1], d1[1]);
        d1[2] = fmaf(uq[j].z, x1[4 * j + 2], d1[2]);
        d1[3] = fmaf(uq[j].w, x1[4 * j + 3], d1[3]);
    }
    float dot0 = (d0[0] + d0[1]) + (d0[2] + d0[3]), dot1 = (d1[0] + d1[1]) + (d1[2] + d1[3]);
    dot0 += __shfl_xor_sync(FULL, dot0, 8);  // the column's other three quarters
    dot1 += __shfl_xor_sync(FULL, dot1, 8);
    dot0 += __shfl_xor_sync(FULL, dot0, 16);
    dot1 += __shfl_xor_sync(FULL, dot1, 16);
    const float s0 = tau0 * dot0, s1 = tau1 * dot1;
#pragma unroll
    for (int j = J; j < RQ / 4; ++j) {
        x0[4 * j] = fmaf(-s0, uq[j].x, x0[4 * j]);
        x0[4 * j + 1] = fmaf(-s0, uq[j].y, x0[4 * j + 1]);
        x0[4 * j + 2] = fmaf(-s0, uq[j].z, x0[4 * j + 2]);
        x0[4 * j + 3] = fmaf(-s0, uq[j].w, x0[4 * j + 3]);
        x1[4 * j] = fmaf(-s1, uq[j].x, x1[4 * j]);
        x1[4 * j + 1] = fmaf(-s1, uq[j].y, x1[4 * j + 1]);
        x1[4 * j + 2] = fmaf(-s1, uq[j].z, x1[4 * j + 2]);
        x1[4 * j + 3] = fmaf(-s1, uq[j].w, x1[4 * j + 3]);
    }
}

// The four owner lanes of column `next` store its rows from super-group J on for the builder.
template <int RQ, int J>
__device__ __forceinline__ void publish_column(const float (&x)[RQ], BuilderSmem<RQ>& sm, int next, int q) {
    float4* col = reinterpret_cast<float4*>(sm.col[next & 1]);
#pragma unroll
    for (int j = J; j < RQ / 4; ++j) col[4 * j + q] = make_float4(x[4 * j], x[4 * j + 1], x[4 * j + 2], x[4 * j + 3]);
}

// Column `next`, held by this lane as slot (next >> 3) & 1, to the builder (the slot picked by a branch: indexing the
// register arrays at run time would put them in local memory).
template <int RQ, int J>
__device__ __forceinline__ void publish_slot(const float (&x0)[RQ], const float (&x1)[RQ], BuilderSmem<RQ>& sm, int next,
                                             int q) {
    if (next & 8)
        publish_column<RQ, J>(x1, sm, next, q);
    else
        publish_column<RQ, J>(x0, sm, next, q);
}

// Step r of a bulk warp (r in super-group J).
template <int RQ, int J>
__device__ __forceinline__ void bulk_step(float (&x0)[RQ], float (&x1)[RQ], BuilderSmem<RQ>& sm, const float* tile, int r,
                                          int c0, int q, int blk, int K, int threads) {
    step_barrier(threads);  // reflector r and its tau_u are published
    if (16 * blk + 15 > r) {  // warp-uniform: some column of this warp is right of r
        const float tau_u = sm.tau_u[r];
        apply_reflector<RQ, J>(x0, x1, reinterpret_cast<const float4*>(tile + tile_at<RQ>(r)), q,
                               c0 > r ? tau_u : 0.f, c0 + 8 > r ? tau_u : 0.f);
    }
    const int next = r + 2;
    if (next < K && blk == next >> 4 && (c0 & 7) == (next & 7)) publish_slot<RQ, J>(x0, x1, sm, next, q);
}

// In a cluster, a later block's step r of its first phase: reflector r, built in an earlier block, once its bytes
// have landed here. Every column of this block is right of it.
template <int RQ, int J>
__device__ __forceinline__ void remote_step(float (&x0)[RQ], float (&x1)[RQ], const BuilderSmem<RQ>& sm,
                                            const float* tile, uint64_t* bars, int r, int q) {
    bar_wait(&bars[r]);
    const float tau_u = sm.tau_u[r];
    apply_reflector<RQ, J>(x0, x1, reinterpret_cast<const float4*>(tile + tile_at<RQ>(r)), q, tau_u, tau_u);
}

// Steps r0 .. K - 1: bulk_step, or (REMOTE) remote_step in a later block's first phase; by super-groups of sixteen
// rows, unrolled: the sixteen reflectors of one share its code.
template <int RQ, int J, bool REMOTE>
__device__ __forceinline__ void bulk_steps(float (&x0)[RQ], float (&x1)[RQ], BuilderSmem<RQ>& sm, const float* tile,
                                           uint64_t* bars, int c0, int q, int blk, int r0, int K, int threads) {
    if constexpr (J < RQ / 4) {
        const int end = K < 16 * J + 16 ? K : 16 * J + 16;
#pragma unroll 1
        for (int r = r0 > 16 * J ? r0 : 16 * J; r < end; ++r) {
            if constexpr (REMOTE)
                remote_step<RQ, J>(x0, x1, sm, tile, bars, r, q);
            else
                bulk_step<RQ, J>(x0, x1, sm, tile, r, c0, q, blk, K, threads);
        }
        if (end == 16 * J + 16) bulk_steps<RQ, J + 1, REMOTE>(x0, x1, sm, tile, bars, c0, q, blk, r0, K, threads);
    }
}

// In a cluster, a block's courier warp: reflector r (from its super-group's first row on) and its tau_u into a later
// block's shared memory, by st.async stores that complete that block's mbarrier for r by their bytes.
template <int RQ>
__device__ __forceinline__ void send_reflector(const BuilderSmem<RQ>& sm, const float* tile, unsigned remote_tile,
                                               unsigned remote_tau_u, unsigned remote_bars, int r, int lane) {
    constexpr int ROWS = BuilderSmem<RQ>::ROWS;
    const int g0 = 4 * (r >> 4), n4 = ROWS / 4 - g0;
    const unsigned bar = remote_bars + 8 * r;
    const float4* u = reinterpret_cast<const float4*>(tile + tile_at<RQ>(r)) + g0;
    const unsigned dst = remote_tile + 4 * (tile_at<RQ>(r) + 4 * g0);
    for (int i = lane; i < n4; i += 32) store_remote4(dst + 16 * i, u[i], bar);
    if (lane == 0) store_remote(remote_tau_u + 4 * r, sm.tau_u[r], bar);
}

// The bytes send_reflector delivers for reflector r.
template <int RQ>
__device__ __forceinline__ unsigned sent_bytes(int r) { return 4 * (BuilderSmem<RQ>::ROWS - 16 * (r >> 4)) + 4; }

// Column c's rows held by this thread, out to H: R above the diagonal (scaled back), and for a factored column beta
// on it and v = u rd below it, from the reflector as published (the very u the bulk warps applied: their own copy of
// the column may round differently, which a nearly dependent column would turn into a v that does not match).
template <int RQ>
__device__ __forceinline__ void store_column(const float (&x)[RQ], const BuilderSmem<RQ>& sm, const float* tile,
                                             float* h_out, int c, int q, int m, int n, int K, Pow2 up) {
    if (c >= n) return;
    float* hc = h_out + (int64_t)c * m;
    const bool factored = c < K;
    const float rd = factored ? sm.rd[c] : 0.f, diag = factored ? times(sm.beta[c], up) : 0.f;
    const float4* u = reinterpret_cast<const float4*>(tile + tile_at<RQ>(factored ? c : 0));
#pragma unroll
    for (int j = 0; j < RQ / 4; ++j) {
        const int row = global_row(4 * j, q);
        if (row >= m) break;
        float h[4];
        if (factored && row + 3 >= c) {  // the group holds the diagonal or rows below it
            const float4 uq = u[4 * j + q];
            const float uk[4] = {uq.x, uq.y, uq.z, uq.w};
#pragma unroll
            for (int k = 0; k < 4; ++k)
                h[k] = row + k < c ? times(x[4 * j + k], up) : row + k == c ? diag : uk[k] * rd;
        } else {
#pragma unroll
            for (int k = 0; k < 4; ++k) h[k] = times(x[4 * j + k], up);
        }
        if (row + 3 < m && (m & 3) == 0) {  // float4 stores, 16-byte aligned
            *reinterpret_cast<float4*>(hc + row) = make_float4(h[0], h[1], h[2], h[3]);
        } else {
#pragma unroll
            for (int k = 0; k < 4; ++k)
                if (row + k < m) hc[row + k] = h[k];
        }
    }
}

// Block `rank` of a cluster of CL blocks per matrix holds columns [first_column(rank), first_column(rank + 1)): the
// column blocks of sixteen dealt in order, as evenly as they go (a lone block: CL = 1, all of them).
__host__ __device__ inline int first_column(int n, int CL, int rank) {
    const int nb = (n + 15) / 16;
    return 16 * (rank * nb / CL);
}

// Warps a block takes: its bulk warps, the builder and, in every block of a cluster but the last, the courier.
__host__ __device__ inline int role_warps(int n, int CL, int rank) {
    return (first_column(n, CL, rank + 1) - first_column(n, CL, rank)) / 16 + 1 + (rank < CL - 1);
}

// Launched with 9-12 warps (n > 128), a block's warps count as 12 against the SM's 65,536 registers (warps are
// counted in fours: one quarter of the register file per warp scheduler), so at most 170 registers a thread. A block
// of a cluster has at most 7 warps (8 would still fit, two a scheduler), so up to 255 registers: the 256-row build's
// two columns of 64 rows a thread need them.
//
// Cluster of CL blocks, for one matrix on CL SMs: block k holds the k-th range of columns. It first applies the
// reflectors of the blocks before it as they land (no barrier between its warps), then factors its own columns (rows
// from its first column on) as a lone block would, while its courier warp forwards each reflector to every block
// after it. A step then applies its reflector to a CL-th of the columns at most, so the bulk warps' share of a step,
// which sets the early steps of a lone block, shrinks by CL. Up to 176 x 176 two blocks (three: 1 x 176 67.1
// against 68.0 us, and 40 x 176 no longer fit one wave: 91.4 us); past that three, for registers (four measured no
// faster: 40 x 256 205 against 175 us, 20 x 192 93.8 against 95.3).
template <int RQ, int CL>
__global__ void __maxnreg__(CL > 1 ? 255 : 168) builder_kernel(qr2_whole_qr_args a) {
    constexpr int BR = builder_rows<RQ>(), ROWS = BuilderSmem<RQ>::ROWS;
    __shared__ BuilderSmem<RQ> sm;
    __shared__ uint64_t bars[CL > 1 ? BuilderSmem<RQ>::KMAX : 1];  // reflector r from an earlier block has landed
    __shared__ float peer_amax[CL];
    extern __shared__ float4 tile4[];  // u of reflector r at tile_at(r) (0 above r, dd on it, the tail below)
    float* tile = reinterpret_cast<float*>(tile4);
    static_assert(CL >= 1 && CL <= 3, "one block, or a cluster of two or three");
    // a cluster's blocks may touch each other's shared memory once all have started: arrive now, wait before that
    if constexpr (CL > 1) asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
    // programmatic dependent launch: the next kernel on the stream may start its prologue now; this one reads
    // global memory only once the previous kernel has completed
    asm volatile("griddepcontrol.launch_dependents;");
    const int rank = CL > 1 ? (int)cg::this_cluster().block_rank() : 0;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, q = lane >> 3;
    const int m = a.m, n = a.n, K = m < n ? m : n;
    const int col_lo = first_column(n, CL, rank), col_hi = first_column(n, CL, rank + 1);
    const int nbl = (col_hi - col_lo) / 16, roles = role_warps(n, CL, rank), threads = 32 * roles;
    const int builder = nbl, courier = rank < CL - 1 ? nbl + 1 : -1;
    // reflectors from the blocks before: [0, r_lo); built here: [r_lo, r_hi)
    const int r_lo = K < col_lo ? K : col_lo, r_hi = K < col_hi ? K : col_hi;
    // column blocks of 16 dealt so that the bulk warps sharing the builder's scheduler (warp % 4) get the first ones:
    // they are done first, and then leave the builder's scheduler to it
    const int sb = builder & 3, ns = builder > sb ? (builder - sb + 3) / 4 : 0;
    const int blk =
        col_lo / 16 + ((warp & 3) == sb ? (warp - sb) / 4 : ns + warp - (warp > sb ? (warp - sb + 3) / 4 : 0));
    const int c0 = 16 * blk + (lane & 7), c1 = c0 + 8;
    const int64_t mat = blockIdx.x / CL;
    float* tau_out = a.tau + mat * K;
    float* h_out = a.h + mat * (int64_t)m * n;

    // in: straight into registers, every load in flight at once (any strides)
    asm volatile("griddepcontrol.wait;" ::: "memory");
    const float* src = a.src + mat * a.src_bs;
    float x0[RQ], x1[RQ];
    float amax = 0.f;
#pragma unroll
    for (int i = 0; i < RQ; ++i) {
        const int row = global_row(i, q);
        const float* s = src + (int64_t)row * a.src_rs;
        const bool in = warp < nbl && row < m;
        x0[i] = in && c0 < n ? s[(int64_t)c0 * a.src_cs] : 0.f;
        x1[i] = in && c1 < n ? s[(int64_t)c1 * a.src_cs] : 0.f;
        amax = fmaxf(amax, fmaxf(fabsf(x0[i]), fabsf(x1[i])));
    }
    for (int r = threadIdx.x; r < r_lo; r += blockDim.x) bar_init(&bars[r], 1);
    if (CL > 1) asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    // power-of-two scaling from the matrix's max |a| (NaN and Inf inputs: no scaling)
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(FULL, amax, off));
    if (lane == 0) sm.amax[warp] = amax;
    __syncthreads();
    for (int w = 0; w < (int)(blockDim.x >> 5); ++w) amax = fmaxf(amax, sm.amax[w]);
    if constexpr (CL > 1) {
        // armed after the __syncthreads above, which orders every mbarrier's init before it
        for (int r = threadIdx.x; r < r_lo; r += blockDim.x) bar_expect_bytes(&bars[r], sent_bytes<RQ>(r));
        asm volatile("barrier.cluster.wait.aligned;" ::: "memory");  // every block of the cluster has started
        if (threadIdx.x < CL) *cg::this_cluster().map_shared_rank(&peer_amax[rank], threadIdx.x) = amax;
        cg::this_cluster().sync();  // also: every block's mbarriers are armed before any block sends
        for (int k = 0; k < CL; ++k) amax = fmaxf(amax, peer_amax[k]);
    }
    if (warp >= roles) return;  // a cluster's blocks launch with the larger one's warps
    int expo = 0;
    if (amax > 0.f && amax <= FLT_MAX) frexpf(amax, &expo);
    const Pow2 down = pow2(-expo), up = pow2(expo);
#pragma unroll
    for (int i = 0; i < RQ; ++i) {
        x0[i] = times(x0[i], down);
        x1[i] = times(x1[i], down);
    }
    // the rows of the column buffers past the matrix's column height, never published, cleared (the builder reads
    // every row)
    if ((int)threadIdx.x < ROWS - 4 * RQ) sm.col[0][4 * RQ + threadIdx.x] = sm.col[1][4 * RQ + threadIdx.x] = 0.f;

    if constexpr (CL > 1)
        if (r_lo > 0 && warp < nbl) bulk_steps<RQ, 0, true>(x0, x1, sm, tile, bars, c0, q, blk, 0, r_lo, threads);
    if (r_hi > r_lo) {
        // columns r_lo and r_lo + 1 for the builder's first two reflectors (in a cluster: with the earlier blocks'
        // reflectors applied)
        if (c0 - r_lo < 2 && c0 >= r_lo && c0 < K && warp < nbl) publish_column<RQ, 0>(x0, sm, c0, q);
        step_barrier(threads);
        if (warp == builder) {
            // r_hi - r_lo + 1 barriers, as the bulk warps: the one above, then one a reflector
            Builder<BR> b;
            b.tau_u = 0.f;
#pragma unroll
            for (int i = 0; i < BR; ++i) b.uu[i] = 0.f;
            build_reflector<RQ, BR, 0>(b, sm, tile, r_lo, lane);
            builder_steps<RQ, BR, 0>(b, sm, tile, r_lo, r_hi, lane, threads);
            return;
        }
        if (warp == courier) {
            if constexpr (CL > 1) {  // to every later block
                unsigned rt[CL - 1], ru[CL - 1], rb[CL - 1];
#pragma unroll
                for (int k = 0; k < CL - 1; ++k) {
                    const unsigned to = rank + 1 + k < CL ? rank + 1 + k : rank;
                    rt[k] = remote_addr(tile, to), ru[k] = remote_addr(sm.tau_u, to), rb[k] = remote_addr(bars, to);
                }
#pragma unroll 1
                for (int r = r_lo; r < r_hi; ++r) {
                    step_barrier(threads);
#pragma unroll
                    for (int k = 0; k < CL - 1; ++k)
                        if (rank + 1 + k < CL) send_reflector<RQ>(sm, tile, rt[k], ru[k], rb[k], r, lane);
                }
            }
            return;
        }
        bulk_steps<RQ, 0, false>(x0, x1, sm, tile, bars, c0, q, blk, r_lo, r_hi, threads);
    }
    if (warp >= nbl) return;  // the builder and courier of a block with nothing to build

    // out: H column by column, the block's share of tau from its first warp
    store_column<RQ>(x0, sm, tile, h_out, c0, q, m, n, K, up);
    store_column<RQ>(x1, sm, tile, h_out, c1, q, m, n, K, up);
    if (warp == 0)
        for (int i = r_lo + lane; i < r_hi; i += 32) tau_out[i] = sm.tau[i];
}

// Launches builder_kernel<RQ, CL> on `batch` x CL blocks (the kernel waits for the previous one on the stream
// before it reads global memory, so it may be a programmatic dependent launch).
template <int RQ, int CL>
int launch(const qr2_whole_qr_args* a, void* stream) {
    int warps = 0;
    for (int k = 0; k < CL; ++k) warps = role_warps(a->n, CL, k) > warps ? role_warps(a->n, CL, k) : warps;
    const int64_t K = a->m < a->n ? a->m : a->n, bytes = tile_floats<RQ>((int)K) * (int64_t)sizeof(float);
    // programmatic dependent launch only when two of these blocks cannot share an SM: otherwise, between back-to-back
    // calls, this launch's blocks start early beside the previous launch's and share their SMs (measured per call,
    // the cluster at 40 x 128: 52.9 us with it, 47.5 without; 40 x 176, one block per SM: 69.9 with it, 70.9
    // without). Registers (65,536 an SM) or shared memory (228 KB an SM, 1 KB of it reserved per block) decide.
    static std::atomic<int> regs{-1}, static_smem{0};  // per instantiation
    if (regs.load(std::memory_order_acquire) < 0) {
        cudaFuncAttributes fa;
        QR2_CHECK_CUDA(cudaFuncGetAttributes(&fa, builder_kernel<RQ, CL>), "builder: cudaFuncGetAttributes");
        static_smem.store((int)fa.sharedSizeBytes, std::memory_order_relaxed);
        regs.store(fa.numRegs, std::memory_order_release);  // after static_smem: readers that see regs see it too
    }
    const int64_t smem = bytes + static_smem.load(std::memory_order_relaxed) + 1024;
    Qr2Launch how;
    how.grid = dim3((unsigned)(CL * a->batch));
    how.block = dim3((unsigned)(32 * warps));
    how.smem = (size_t)bytes;
    how.smem_limit = tile_floats<RQ>(4 * RQ) * sizeof(float);  // this instantiation's largest matrix
    how.static_smem = sizeof(BuilderSmem<RQ>);
    how.cluster = CL;
    how.pdl = 2 * 32 * warps * regs.load(std::memory_order_acquire) > 65536 || 2 * smem > 228 * 1024;
    return qr2_launch(builder_kernel<RQ, CL>, how, stream, "builder launch", *a);
}

// The build (RQ: rows per quarter of a column) that holds m rows on `cluster` blocks: n > 176 (or m > 176) on three
// blocks takes the 176-row build or the 256-row one.
constexpr int build_rows(int64_t m, int cluster) {
    return cluster == 3 ? (m <= 176 ? 44 : 64) : m <= 64 ? 16 : m <= 128 ? 32 : 44;
}

// Shared memory a block of the build asks for: the tile opted in for its largest matrix (see launch), and the rest.
template <int RQ>
constexpr int64_t build_smem_bytes() {
    return tile_floats<RQ>(4 * RQ) * (int64_t)sizeof(float) + (int64_t)sizeof(BuilderSmem<RQ>);
}

int64_t smem_bytes(int64_t m, int cluster) {
    switch (build_rows(m, cluster)) {
        case 16: return build_smem_bytes<16>();
        case 32: return build_smem_bytes<32>();
        case 44: return build_smem_bytes<44>();
        default: return build_smem_bytes<64>();
    }
}

template <int CL>
int launch_rows(const qr2_whole_qr_args* a, void* stream) {
    const int rq = build_rows(a->m, CL);
    if constexpr (CL == 3) {
        return rq == 44 ? launch<44, CL>(a, stream) : launch<64, CL>(a, stream);
    } else {
        if (rq == 16) return launch<16, CL>(a, stream);
        return rq == 32 ? launch<32, CL>(a, stream) : launch<44, CL>(a, stream);
    }
}

// The shapes the kernel's builds hold, whatever the device.
int holds(int64_t m, int64_t n, int cluster) {
    if (cluster == 1 || cluster == 2)
        return m >= 1 && n >= 1 && m <= QR2_BUILDER_MAX && n <= QR2_BUILDER_MAX && (cluster == 1 || n > 16);
    // three blocks, each with a block of sixteen columns at least
    return cluster == 3 && m >= 1 && m <= QR2_BUILDER_CLUSTER3_MAX && n > 16 * (cluster - 1) &&
           n <= QR2_BUILDER_CLUSTER3_MAX;
}

}  // namespace

extern "C" int qr2_builder_holds(int64_t m, int64_t n, int cluster, const qr2_device* dev) {
    return holds(m, n, cluster) && smem_bytes(m, cluster) <= dev->smem_optin;
}

extern "C" int qr2_builder_run(const qr2_whole_qr_args* a, int cluster, const qr2_device* dev, void* stream) {
    if (a->batch <= 0 || a->m <= 0 || a->n <= 0) return 0;
    if (!qr2_builder_holds(a->m, a->n, cluster, dev))
        return qr2_record_error("builder", "matrix too large for the registers and shared memory of its blocks");
    if (a->batch > 0x7fffffff / cluster) return qr2_record_error("builder", "more blocks than a grid holds");
    switch (cluster) {
        case 2: return launch_rows<2>(a, stream);
        case 3: return launch_rows<3>(a, stream);
        default: return launch_rows<1>(a, stream);
    }
}
