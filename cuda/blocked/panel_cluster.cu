// panel_cluster.cu - the blocked route's cluster panel: Householder factorisation of an m x w panel (w <= 32) held in registers across a
// thread-block cluster, emitting H, tau, the explicit reflectors V and the compact-WY factor T.
//
// Layout: the cluster's C blocks split the panel's rows into C contiguous chunks; thread t of block q
// holds rows q*mc + t + k*THREADS (k < RPT) of all 32 columns in registers. Registers can only be
// indexed at compile time and the reflector loop must stay a compact runtime loop (a fully unrolled
// one is ~100 KB of code that runs once per block: instruction fetch then dominates), so the columns
// rotate: before reflector j the active column sits in slot 0, the columns right of it in slots
// 1..31-j, and the finished reflectors v_0..v_{j-1} in slots 32-j..31 (v_{j-1} last). Rows 0..31 live
// in warp 0 of block 0, lane = row.
//
// One cluster-wide reduction per reflector j, over 32 slots that mirror the register slots: with x the
// active column below the diagonal, slots 1..31-j get x . P[:, c] of the columns to its right and slots
// 32-j..30 get v_l . v_{j-1} (for T); sigma = sum x^2 travels separately in FP64. The slots are reduced
// across a warp by a butterfly reduce-scatter (31 shuffles; lane l ends with slot l), across warps in
// shared memory, and across the cluster through distributed shared memory (each block sums the C
// partials in the same order, so all blocks agree bit for bit). Then, with alpha and row j's entries
// published by their owner, every warp derives slarfg's beta, tau and 1/(alpha - beta) and
// s_c = tau (P[j][c] + (x . P[:, c]) / (alpha - beta)) itself, and updates its rows: v = x / (alpha - beta),
// P[:, c] -= s_c v. Partials are double-buffered by reflector parity, so a step costs one block barrier
// (plus one cluster barrier when C > 1). Block 0 keeps the reflector dots and builds
// T = larft(V, tau) after the last reflector by recursive doubling: T12 = -T11 G12 T22.
//
// The dots use x unscaled, so the panel is first scaled by a power of two (exact) to a max-abs in
// [0.5, 1); R is scaled back on the way out, V, tau and T are scale-invariant. With that scaling the
// reflector's scalars are FP32 (FP64 for columns far below the panel's largest); the sum of squares is
// accumulated in FP64.
#include <cooperative_groups.h>

#include "launch.cuh"
#include "reduce.cuh"
#include "reflector.cuh"

namespace cg = cooperative_groups;

namespace {

constexpr int W = QR2_PANEL_MAX_W;
constexpr int THREADS = 256;
constexpr int NWARPS = THREADS / 32;
constexpr unsigned FULL = 0xffffffffu;

struct Shared {
    float wred[2][NWARPS][W];  // per-warp slot sums (double-buffered by reflector parity)
    double wss[2][NWARPS];     // per-warp sums of squares
    float part[2][W];          // clusters: this block's slot sums, read by every block
    double part_ss[2];
    float rowv[2][W];          // block 0: row j of the panel (alpha and the entries to its right)
    float G[W][W + 1];         // block 0: reflector dots G[l][j] = v_l . v_j (l < j)
    float T[W][W + 1];         // block 0: T = larft(V, tau)
    float X[W][W + 1];         // block 0: scratch of the T doubling
    float taus[W];
    float cmax;
};

template <int RPT>
__global__ void __launch_bounds__(THREADS, 1) panel_cluster_kernel(qr2_panel_job a) {
    qr2_follow_previous_kernel();  // launched with Qr2Launch::pdl
    __shared__ Shared sh;
    cg::cluster_group cluster = cg::this_cluster();
    const int C = (int)cluster.num_blocks();
    const int q = (int)cluster.block_rank();
    const int64_t b = blockIdx.x / C;
    const int t = threadIdx.x, lane = t & 31, wid = t >> 5;
    const int m = a.m, w = a.w, kk = min(m, w);
    const int mc = (m + C - 1) / C;
    const int row0 = q * mc, row_end = min(m, row0 + mc);
    float* panel = a.h + b * a.h_bs;
    if (a.done && a.done[b]) return;  // the CholeskyQR panel factored it; every block of the cluster returns

    float p[RPT][W];
    float amax = 0.f;
#pragma unroll
    for (int k = 0; k < RPT; ++k) {
        const int i = row0 + t + k * THREADS;
        const bool ok = i < row_end;
#pragma unroll
        for (int c = 0; c < W; ++c) {
            p[k][c] = (ok && c < w) ? panel[(int64_t)c * a.ldh + i] : 0.f;
            amax = fmaxf(amax, fabsf(p[k][c]));
        }
    }
    for (int r = t; r < W * (W + 1); r += THREADS) (&sh.G[0][0])[r] = 0.f;
    // power-of-two scaling: one cluster-wide max (NaN propagates as "no scaling")
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(FULL, amax, off));
    if (lane == 0) sh.wred[0][wid][0] = amax;
    __syncthreads();
    if (t == 0) {
        float mx = 0.f;
        for (int k = 0; k < NWARPS; ++k) mx = fmaxf(mx, sh.wred[0][k][0]);
        sh.cmax = mx;
    }
    cluster.sync();
    float cmax = 0.f;
    for (int r = 0; r < C; ++r) cmax = fmaxf(cmax, cluster.map_shared_rank(&sh, r)->cmax);
    // 2^-expo spans 2^-128 .. 2^149 (subnormal panels, entries near FLT_MAX): one factor would overflow, two do not
    int expo = 0;
    if (cmax > 0.f && isfinite(cmax)) frexpf(cmax, &expo);
    const Pow2 down = pow2(-expo), up = pow2(expo);
#pragma unroll
    for (int k = 0; k < RPT; ++k)
#pragma unroll
        for (int c = 0; c < W; ++c) p[k][c] = times(p[k][c], down);
    cluster.sync();  // every block has read every cmax before wred is reused

    for (int j = 0; j <= kk; ++j) {  // step kk only completes the reflector dots
        const int buf = j & 1;
        const bool active = j < kk;
        const int nrem = W - 1 - j;  // columns right of the active one: slots 1..nrem
        const int first_v = W - j;   // v_l sits in slot first_v + l; v_{j-1} in slot W - 1

        // (a) partial sums over this thread's rows
        float d[W];
#pragma unroll
        for (int c = 0; c < W; ++c) d[c] = 0.f;
        double ss = 0.0;
#pragma unroll
        for (int k = 0; k < RPT; ++k) {
            const int i = row0 + t + k * THREADS;
            const bool ok = i < row_end;
            const float x = (active && ok && i > j) ? p[k][0] : 0.f;      // x = column j below the diagonal
            const float y = (j >= 1 && ok && i >= j) ? p[k][W - 1] : 0.f;  // v_{j-1}, rows where v_l are below
            ss += (double)x * x;
#pragma unroll
            for (int c = 0; c < W; ++c)
                d[c] += (c >= 1 && c <= nrem ? x : (c >= first_v && c < W - 1 ? y : 0.f)) * p[k][c];
        }
        if (j >= 1 && q == 0 && t == j - 1) {  // row j-1 holds v_l[j-1] (v_{j-1}[j-1] = 1)
#pragma unroll
            for (int c = 0; c < W - 1; ++c)
                if (c >= first_v) d[c] += p[0][c];
        }
        if (active && q == 0 && t == j) {  // row j: alpha and R's row, published as they are
#pragma unroll
            for (int c = 0; c < W; ++c)
                if (c <= nrem) sh.rowv[buf][c] = p[0][c];
        }

        // (b) reduce: warp (butterfly), block (shared memory), cluster (distributed shared memory)
        const float dsum = warp_reduce_scatter32(d, lane);  // W == 32: one slot per lane
        ss = warp_sum(ss);
        sh.wred[buf][wid][lane] = dsum;
        if (lane == 0) sh.wss[buf][wid] = ss;
        __syncthreads();
        float tot = 0.f;
        double sigma = 0.0;
        if (C == 1) {
#pragma unroll
            for (int k = 0; k < NWARPS; ++k) {
                tot += sh.wred[buf][k][lane];
                sigma += sh.wss[buf][k];
            }
        } else {
            if (wid == 0) {
                float s = 0.f;
                double s2 = 0.0;
#pragma unroll
                for (int k = 0; k < NWARPS; ++k) {
                    s += sh.wred[buf][k][lane];
                    s2 += sh.wss[buf][k];
                }
                sh.part[buf][lane] = s;
                if (lane == 0) sh.part_ss[buf] = s2;
            }
            cluster.sync();
            for (int r = 0; r < C; ++r) {
                const Shared* rs = cluster.map_shared_rank(&sh, r);
                tot += rs->part[buf][lane];
                sigma += rs->part_ss[buf];
            }
        }
        const Shared* s0 = C == 1 ? &sh : cluster.map_shared_rank(&sh, 0);

        // (c) every warp derives the reflector; block 0's warp 0 records tau and the reflector dots
        if (q == 0 && wid == 0 && j >= 1) {
            const int l = lane - first_v;
            if (l >= 0 && l < j - 1) sh.G[l][j - 1] = tot;
        }
        if (active) {
            // FP32 scalars (the panel is scaled to max-abs ~1, so only the FP64 sum of squares needs range),
            // but FP64 for tails whose squares sum below 2^-100: a column far smaller than the panel's largest
            // (alpha^2 would underflow, and v = x / (alpha - beta) needs x's bits, not FP32 products)
            const float alpha = s0->rowv[buf][0];
            const bool tiny = sigma > 0.0 && sigma < QR2_TINY_SUM_OF_SQUARES;
            float beta = alpha, tau = 0.f, scal = 0.f;
            double scal64 = 0.0;
            if (tiny) {
                double beta64, tau64;
                householder_scalars((double)alpha, sigma, beta64, tau64, scal64);
                beta = (float)beta64;
                tau = (float)tau64;
            } else if (sigma > 0.0) {  // false for 0 and NaN: the column is left as it is
                const float sig = (float)sigma;
                beta = -copysignf(sqrtf(fmaf(alpha, alpha, sig)), alpha);
                tau = (beta - alpha) / beta;
                scal = 1.f / (alpha - beta);
            }
            const bool right = lane >= 1 && lane <= nrem;
            const float s_lane = !right ? 0.f
                                 : tiny ? (float)(tau * fma(scal64, (double)tot, (double)s0->rowv[buf][lane]))
                                        : tau * fmaf(scal, tot, s0->rowv[buf][lane]);
            if (q == 0 && t == 0) {
                sh.taus[j] = tau;
                a.tau[b * a.tau_bs + j] = tau;
            }

            // (d) apply the reflector to this thread's rows, then rotate the slots
            float s[W];
#pragma unroll
            for (int c = 1; c < W; ++c) s[c] = __shfl_sync(FULL, s_lane, c);
#pragma unroll
            for (int k = 0; k < RPT; ++k) {
                const int i = row0 + t + k * THREADS;
                if (i < row_end && i > j) {
                    const float v = tiny ? (float)(p[k][0] * scal64) : p[k][0] * scal;
                    p[k][0] = v;
#pragma unroll
                    for (int c = 1; c < W; ++c)
                        if (c <= nrem) p[k][c] -= s[c] * v;
                }
            }
            if (q == 0 && t == j) {
#pragma unroll
                for (int c = 1; c < W; ++c)
                    if (c <= nrem) p[0][c] -= s[c];
                p[0][0] = beta;
            }
#pragma unroll
            for (int k = 0; k < RPT; ++k) {
                const float done = p[k][0];
#pragma unroll
                for (int c = 0; c < W - 1; ++c) p[k][c] = p[k][c + 1];
                p[k][W - 1] = done;
            }
        }
    }

    // write H (R scaled back) and V explicit. Column c sits in slot W - kk + c when it holds a
    // reflector (c < kk), else in slot c - kk.
    float* v = a.v + b * a.v_bs;
#pragma unroll
    for (int k = 0; k < RPT; ++k) {
        const int i = row0 + t + k * THREADS;
        if (i < row_end) {
#pragma unroll
            for (int slot = 0; slot < W; ++slot) {
                const int c = slot >= W - kk ? slot - (W - kk) : slot + kk;
                if (c < w) {
                    panel[(int64_t)c * a.ldh + i] = i <= c ? times(p[k][slot], up) : p[k][slot];
                    v[(int64_t)c * a.ldv + a.v_row0 + i] = i < c ? 0.f : (i == c ? 1.f : p[k][slot]);
                }
            }
        }
    }
    if (q == 0) {
        for (int r = t; r < a.v_row0 * w; r += THREADS) v[(int64_t)(r / a.v_row0) * a.ldv + r % a.v_row0] = 0.f;
        larft_doubling(sh.G, sh.taus, kk, sh.T, sh.X, t, THREADS);
        float* T = a.t + b * a.t_bs;
        for (int r = t; r < w * w; r += THREADS) T[r] = sh.T[r % w][r / w];
    }
    cluster.sync();  // no block may leave while another can still read its shared memory
}

template <int RPT>
int launch(const qr2_panel_job* a, int cluster, void* stream) {
    Qr2Launch how;
    how.grid = dim3((unsigned)(a->batch * cluster));
    how.block = dim3(THREADS);
    how.cluster = (unsigned)cluster;
    how.pdl = how.cluster == 1;  // the kernel starts with qr2_follow_previous_kernel (not with clusters: slower)
    return qr2_launch(panel_cluster_kernel<RPT>, how, stream, "panel_cluster launch", *a);
}

constexpr int MAX_CLUSTER = 8;
constexpr int MAX_RPT = 4;

// The cluster size and rows per thread for an m-row panel of a batch: the smallest cluster whose
// blocks hold the rows, grown while the batch alone leaves SMs idle (chunks stay >= 64 rows).
void plan(int64_t m, int64_t batch, int sms, int* cluster, int* rpt) {
    int c = 1;
    while (c < MAX_CLUSTER && ((m + c - 1) / c > (int64_t)THREADS * MAX_RPT ||
                               (batch * c < sms && (m + 2 * c - 1) / (2 * c) >= 64)))
        c *= 2;
    const int64_t mc = (m + c - 1) / c;
    int r = 1;
    while (r < MAX_RPT && mc > (int64_t)THREADS * r) r *= 2;
    *cluster = c;
    *rpt = mc <= (int64_t)THREADS * r ? r : 0;
}

}  // namespace

extern "C" int qr2_panel_cluster_holds(int64_t m, int64_t w, const qr2_device* dev) {
    int c, r;
    plan(m, 1, dev->sms, &c, &r);
    return w >= 1 && w <= W && r > 0 && (c == 1 || dev->clusters);
}

extern "C" int qr2_panel_cluster_run(const qr2_panel_job* a, void* work, const qr2_device* dev, void* stream) {
    (void)work;
    if (a->batch <= 0 || a->m <= 0 || a->w <= 0) return 0;
    int cluster, rpt;
    plan(a->m, a->batch, dev->sms, &cluster, &rpt);
    if (a->w > W || rpt == 0) return qr2_record_error("panel_cluster", "panel too wide or too tall for one cluster");
    if (cluster > 1 && !dev->clusters) return qr2_record_error("panel_cluster", "the device has no clusters");
    switch (rpt) {
        case 1: return launch<1>(a, cluster, stream);
        case 2: return launch<2>(a, cluster, stream);
        default: return launch<4>(a, cluster, stream);
    }
}
