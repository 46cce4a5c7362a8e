// panel_cholqr.cu - the blocked route's CholeskyQR panel: a 32-column panel factored by CholeskyQR2 in FP64 and
// turned back into LAPACK's Householder form (H, tau) plus the explicit V and T the update needs, with a guard that
// leaves each matrix it cannot vouch for to the Householder panel kinds.
//
// Why: a Householder panel is a chain of 32 reflectors, each waiting on a reduction over the panel's rows; this one
// is a few block-wide products on FP64 tensor cores and a few 32 x 32 steps, spread over a cluster of up to 16
// blocks, so one matrix's panel keeps many SMs busy and its critical path does not grow with the panel's height.
//
// A cluster of C blocks holds the panel's m rows (at most 256 or 512 a block) in shared memory as FP64, and per matrix:
//   1. G1 = P^T P (DMMA; each entry of the blocks' partials summed by one block in rank order and stored into every
//      block, so all get the same bits), normalised by its diagonal D, Cholesky R~ (R1 = R~ D), R1^-1;
//   2. Y = P R1^-1 and G2 = Y^T Y, summed into every block likewise. The guard: every pivot positive and finite, |G2 - I| <=
//      GUARD_G2 entrywise, and every column non-zero somewhere below its diagonal (LAPACK gives a column that is
//      already zero there tau = 0, which the reconstruction cannot). A matrix that fails (rank-deficient or badly
//      conditioned panel, zero column, triangular structure, NaN or Inf) is written nothing and flagged in done[] for
//      the Householder kind that runs next. Where |G2 - I| > EXACT_G2 the second CholeskyQR pass is taken: R2 =
//      chol(G2), Q = Y R2^-1; else Q = Y (its error is then far below FP32's);
//   3. R = R2 R1. Householder reconstruction (LAPACK sorhr_col): Q's top 32 x 32 block minus S = diag(-sign) is
//      factored L U without pivoting (S chosen during elimination so no pivot has magnitude below 1); then the
//      reflectors are V = [L; Q_bottom U^-1], tau_j = -S_j U_jj (in [1, 2]), T = -U S L^-T, and R's rows take S.
//      Every block rebuilds Y's top block from the panel's top rows and computes the guard, the reconstruction and
//      N = R2^-1 U^-1 itself (the same bits everywhere: sending N from one block cost more), then writes its rows of
//      V as Y N; the last block builds T, block 0 writes R.
// FP64 throughout: CholeskyQR's loss of orthogonality (FP64 rounding times the panel's condition squared) stays far
// below FP32's for any panel the guard passes.
// With the previous panel's reflectors in the job (prev_v, lookahead), the panel first applies them to its own columns,
// from the W rows above its top (C -= V T^T V^T C: V^T C summed over the cluster like G1, in FP64, rounded to FP32 as
// the update would store it), instead of an update of those columns in three launches before it.
#include <cooperative_groups.h>

#include "cluster.cuh"
#include "launch.cuh"

namespace cg = cooperative_groups;

namespace {

constexpr int W = QR2_PANEL_MAX_W;  // the panel's width: exactly 32 columns
constexpr int THREADS = 256;
constexpr int NWARPS = THREADS / 32;
constexpr int LD = 36;               // FP64 row stride: the DMMA fragments' 16 lanes hit 16 distinct 8-byte banks
constexpr int MAX_CLUSTER = 16;      // non-portable cluster size
constexpr int ROWS = 256;            // rows a block holds at most (one block an SM) ...
constexpr int WIDE_ROWS = 512;       // ... or, where that saves waves of SMs, this many (215 KB of shared memory)
constexpr double GUARD_G2 = 0.25;    // |G2 - I| entrywise: how far from orthogonal the first pass's Q may be
constexpr double EXACT_G2 = 1e-10;   // |G2 - I| below this: R2 = I to far better than FP32, the second pass is skipped
constexpr unsigned FULL = 0xffffffffu;

struct Small {             // 32 x 32 FP64 matrices, row-major, ld LD
    double g[W * LD];      // G1 summed, then R~ (upper)
    double r1inv[W * LD];  // R1^-1 = D^-1 R~^-1: the B operand of Y = P R1^-1
    double g2[W * LD];     // G2 summed, then R2 (upper)
    double r2inv[W * LD];  // R2^-1; in the last block then U S
    double z[W * LD];      // the panel's top block, then Y's, then Q's, then its L U (U on and above the diagonal)
    double n[W * LD];      // N = R2^-1 U^-1; in the last block then U S L^-T
    double part[2][W * W];  // this block's partial G1 and G2 (read by every block); then scratch x (U^-1, and in
                            // block 0 R2 R~), once no block reads them
    double d[W];           // D: G1's diagonal, square-rooted
    double s[W];           // S: the reconstruction's signs
    double inv[W];         // the reciprocals of a triangular factor's diagonal, published step by step
    unsigned progress[3];  // steps published: R~, R2, L U
    int ok, second_pass;   // the guard's verdict; whether R2 != I
    unsigned below;        // bit c: column c has a non-zero entry below the diagonal in this block's rows
    unsigned below_all;    // the same over the cluster's rows
};

__device__ __forceinline__ void dmma(double (&c)[2], double a, double b) {
    asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};"
                 : "+d"(c[0]), "+d"(c[1])
                 : "d"(a), "d"(b));
}

// part = A^T X over X's first `rows` rows (a multiple of 4; the rows past the block's last are zero), A's entry (k, c)
// given by a_at(k, c): warp w computes tiles (w / 2, 2 (w % 2) + {0, 1}) of the 4 x 4 tiles of 8 x 8.
template <class AAt>
__device__ void at_times_x(AAt a_at, const double* X, int rows, double* part, int warp, int lane) {
    const int a = warp >> 1, b0 = 2 * (warp & 1);
    double c[2][2] = {};
    const int kr = lane & 3, col = lane >> 2;
    for (int k0 = 0; k0 < rows; k0 += 4) {
        const double* row = X + (k0 + kr) * LD + col;
        const double fa = a_at(k0 + kr, 8 * a + col);
        dmma(c[0], fa, row[8 * b0]);
        dmma(c[1], fa, row[8 * (b0 + 1)]);
    }
#pragma unroll
    for (int e = 0; e < 2; ++e) {
        double* out = part + (8 * a + col) * W + 8 * (b0 + e) + 2 * kr;
        out[0] = c[e][0];
        out[1] = c[e][1];
    }
}

// part = X^T X over X's first `rows` rows.
__device__ void gram(const double* X, int rows, double* part, int warp, int lane) {
    at_times_x([X](int k, int c) { return X[k * LD + c]; }, X, rows, part, warp, lane);
}

// out[0, rows) = X[0, rows) B (rows a multiple of 8; out may be X: a warp reads a tile's rows before writing them).
__device__ void times(const double* X, int rows, const double* B, double* out, int warp, int lane) {
    const int kr = lane & 3, r = lane >> 2;
    for (int t0 = 8 * warp; t0 < rows; t0 += 8 * NWARPS) {
        double c[4][2] = {};
#pragma unroll
        for (int k0 = 0; k0 < W; k0 += 4) {
            const double a = X[(t0 + r) * LD + k0 + kr];
#pragma unroll
            for (int cb = 0; cb < 4; ++cb) dmma(c[cb], a, B[(k0 + kr) * LD + 8 * cb + r]);
        }
        __syncwarp();
#pragma unroll
        for (int cb = 0; cb < 4; ++cb) {
            double* o = out + (t0 + r) * LD + 8 * cb + 2 * kr;
            o[0] = c[cb][0];
            o[1] = c[cb][1];
        }
    }
}

// part = V^T X over the first `rows` rows (a multiple of 4). V: FP32 in global memory, column-major (ld ldv), its rows
// from `valid` on read as zeros. (Staged in shared memory, V kept update blocks off the panel's SMs.)
__device__ void cross(const float* V, int64_t ldv, int valid, const double* X, int rows, double* part, int warp,
                      int lane) {
    at_times_x([V, ldv, valid](int k, int c) { return k < valid ? (double)V[(int64_t)c * ldv + k] : 0.0; }, X, rows,
               part, warp, lane);
}

// X[0, rows) -= V[0, rows) B (rows a multiple of 8; V as in cross).
__device__ void minus_times(const float* V, int64_t ldv, int valid, double* X, int rows, const double* B, int warp,
                            int lane) {
    const int kr = lane & 3, r = lane >> 2;
    for (int t0 = 8 * warp; t0 < rows; t0 += 8 * NWARPS) {
        double c[4][2] = {};
#pragma unroll
        for (int k0 = 0; k0 < W; k0 += 4) {
            const double a = t0 + r < valid ? V[(int64_t)(k0 + kr) * ldv + t0 + r] : 0.0;
#pragma unroll
            for (int cb = 0; cb < 4; ++cb) dmma(c[cb], a, B[(k0 + kr) * LD + 8 * cb + r]);
        }
#pragma unroll
        for (int cb = 0; cb < 4; ++cb) {
            double* o = X + (t0 + r) * LD + 8 * cb + 2 * kr;
            o[0] -= c[cb][0];
            o[1] -= c[cb][1];
        }
    }
}

// The sum over the cluster's blocks of their part[which], each entry summed by one block (a slice of 1024 / C
// entries each, the C loads in flight together, added in rank order) and stored into matrix `dst` (ld LD) of every
// block. A cluster.sync must follow before dst is read.
__device__ void cluster_sum(cg::cluster_group& cluster, Small& sm, int which, double* dst, int t, int C, int q) {
    const int slice = W * W / C;
    for (int e = t; e < slice; e += THREADS) {
        const int entry = q * slice + e;
        double v[MAX_CLUSTER];
#pragma unroll
        for (int r = 0; r < MAX_CLUSTER; ++r)
            v[r] = r < C ? cluster.map_shared_rank(sm.part[which], r)[entry] : 0.0;
        double sum = 0.0;
#pragma unroll
        for (int r = 0; r < MAX_CLUSTER; ++r) sum += v[r];
        const int at = (entry / W) * LD + entry % W;
        for (int r = 0; r < C; ++r) cluster.map_shared_rank(dst, r)[at] = sum;
    }
}

// The 32 x 32 steps below run on one warp each, a lane's row or column in 32 registers, in a rolled loop over the
// steps whose registers rotate (the active entry always in register 0), so that every index is known at compile time:
// unrolled, each routine would be thousands of instructions run once per block, paced by instruction fetch. Rows of
// the other operand come from shared memory as broadcasts.
//
// A factorisation (the producer) and the inverses of its factors (consumers, on other warps) run as a pipeline: step k
// of an inverse needs only row or column k of the factor, which the producer publishes at its step k (a release of
// the step count in shared memory; the consumer acquires it). One step is a chain of a shuffle, a reciprocal or
// square root, a shared-memory round trip and an FMA, so the consumers and the rest of the producer's step fill the
// gaps in it instead of running after it.

__device__ __forceinline__ void publish_step(unsigned* progress, unsigned steps, int lane) {
    __syncwarp();  // orders every lane's stores of the step before lane 0's release
    if (lane == 0) asm volatile("st.release.cta.shared::cta.u32 [%0], %1;" ::"r"(smem_addr(progress)), "r"(steps) : "memory");
}

__device__ __forceinline__ void wait_step(const unsigned* progress, unsigned steps) {
    unsigned seen;
    do {
        asm volatile("ld.acquire.cta.shared::cta.u32 %0, [%1];" : "=r"(seen) : "r"(smem_addr(progress)) : "memory");
    } while (seen < steps);
}

// Producer: the upper Cholesky factor R of the symmetric 32 x 32 matrix in `a`, written over it row by row (zeros
// below the diagonal); lane j holds column j. With `normalise`, of a divided by its diagonal's square roots (kept in
// d) on both sides. Publishes R's row k and inv[k] = 1 / R_kk at step k. Returns whether every pivot was positive
// and finite (the same on every lane).
__device__ bool warp_cholesky(double* a, bool normalise, double* d, double* inv, unsigned* progress, int lane) {
    double c[W];
#pragma unroll
    for (int s = 0; s < W; ++s) c[s] = a[s * LD + lane];
    bool ok = true;
    if (normalise) {
        const double dj = sqrt(a[lane * LD + lane]);
        ok = dj > 0.0 && dj < INFINITY;
        d[lane] = dj;
        inv[lane] = 1.0 / dj;
        __syncwarp();
        const double rj = inv[lane];
#pragma unroll
        for (int s = 0; s < W; ++s) c[s] *= rj * inv[s];
        __syncwarp();  // inv is rewritten below
    }
    double piv = __shfl_sync(FULL, c[0], 0);
#pragma unroll 1
    for (int k = 0; k < W; ++k) {  // c[s] holds row k + s
        ok = ok && piv > 0.0 && piv < INFINITY;
        const double rs = rsqrt(piv);
        const double r = lane >= k ? c[0] * rs : 0.0;
        a[k * LD + lane] = r;  // R[k][lane]
        if (lane == 0) inv[k] = rs;
        publish_step(progress, k + 1, lane);
        const double* rk = a + k * LD + k;
        c[0] = c[1] - (k + 1 < W ? rk[1] : 0.0) * r;
        piv = __shfl_sync(FULL, c[0], (k + 1) & (W - 1));  // the next pivot's chain starts before the rest
#pragma unroll
        for (int s = 2; s < W; ++s) c[s - 1] = c[s] - (k + s < W ? rk[s] : 0.0) * r;
        c[W - 1] = 0.0;
    }
    __syncwarp();
    return __all_sync(FULL, ok);
}

// Consumer: out = the inverse of the upper triangular u that a producer publishes row by row with inv[j] = 1 / u_jj
// (row-major X, lane i computing row i: x_j finished in increasing j, the rest updated in axpy form). out may not be u.
__device__ void warp_upper_inverse(const double* u, double* out, const double* inv, const unsigned* progress,
                                   int lane) {
    double acc[W];  // acc[s]: column j + s of row `lane`
#pragma unroll
    for (int s = 0; s < W; ++s) acc[s] = s == lane ? 1.0 : 0.0;
#pragma unroll 1
    for (int j = 0; j < W; ++j) {
        wait_step(progress, j + 1);
        const double xj = acc[0] * inv[j];
        out[lane * LD + j] = xj;
        const double* uj = u + j * LD + j;
#pragma unroll
        for (int s = 1; s < W; ++s) acc[s - 1] = acc[s] - xj * (j + s < W ? uj[s] : 0.0);
        acc[W - 1] = 0.0;
    }
    __syncwarp();
}

// Producer: z - diag(s) = L U without pivoting, s_k = -sign of the k-th pivot (so |U_kk| >= 1); in place, lane j
// holding column j. Publishes at step k U's row k, inv[k] = 1 / U_kk and L's column k unscaled (U_kk L_ik: lane k
// stores its registers as they are, and every lane folds 1 / U_kk into its multiplier); scale_lower() finishes L.
__device__ void warp_signed_lu(double* z, double* s, double* inv, unsigned* progress, int lane) {
    double c[W];
#pragma unroll
    for (int i = 0; i < W; ++i) c[i] = z[i * LD + lane];
    double p = __shfl_sync(FULL, c[0], 0);
#pragma unroll 1
    for (int k = 0; k < W; ++k) {  // c[i] holds row k + i
        const double sk = p >= 0.0 ? -1.0 : 1.0;
        const double ukk = p - sk;
        const double r = __drcp_rn(ukk);
        if (lane == k) {
            c[0] = ukk;
#pragma unroll
            for (int i = 1; i < W; ++i)
                if (k + i < W) z[(k + i) * LD + k] = c[i];
        }
        if (lane >= k) z[k * LD + lane] = c[0];  // U's row k
        if (lane == 0) s[k] = sk, inv[k] = r;
        publish_step(progress, k + 1, lane);
        const double t = c[0] * r;  // U_k,lane / U_kk
        const double* zk = z + k * LD + k;
        c[0] = lane > k && k + 1 < W ? c[1] - zk[LD] * t : c[1];
        p = __shfl_sync(FULL, c[0], (k + 1) & (W - 1));
#pragma unroll
        for (int i = 2; i < W; ++i) c[i - 1] = lane > k && k + i < W ? c[i] - zk[i * LD] * t : c[i];
        c[W - 1] = 0.0;
    }
    __syncwarp();
}

// Consumer of warp_signed_lu: out = L^-T (row-major; lane j computes column j of L^-1, row j of out, by forward
// substitution, y_k finished at step k).
__device__ void warp_unit_lower_inverse(const double* z, double* out, const double* inv, const unsigned* progress,
                                        int lane) {
    double y[W];  // y[s]: row k + s of column `lane`
#pragma unroll
    for (int s = 0; s < W; ++s) y[s] = s == lane ? 1.0 : 0.0;
#pragma unroll 1
    for (int k = 0; k < W; ++k) {
        wait_step(progress, k + 1);
        const double yk = y[0];
        out[lane * LD + k] = yk;
        const double t = yk * inv[k];  // L_ik = z_ik / U_kk
        const double* zk = z + k * LD + k;
#pragma unroll
        for (int s = 1; s < W; ++s) y[s - 1] = y[s] - (k + s < W ? zk[s * LD] : 0.0) * t;
        y[W - 1] = 0.0;
    }
    __syncwarp();
}

// L's columns, left unscaled by warp_signed_lu, divided by U's diagonal (all the block's threads).
__device__ void scale_lower(double* z, const double* inv, int t) {
    for (int e = t; e < W * W; e += THREADS) {
        const int i = e / W, j = e % W;
        if (i > j) z[i * LD + j] *= inv[j];
    }
}

// 1. G1 (sm.g) into R~ (in place) and D, and R1^-1 = D^-1 R~^-1 into sm.r1inv; whether every pivot was positive and
// finite (every thread, past a barrier).
__device__ bool factor_g1(Small& sm, int warp, int lane) {
    __shared__ int ok1;
    if (warp == 0) {
        const bool ok = warp_cholesky(sm.g, true, sm.d, sm.inv, &sm.progress[0], lane);
        if (lane == 0) ok1 = ok;
    } else if (warp == 1) {
        warp_upper_inverse(sm.g, sm.r1inv, sm.inv, &sm.progress[0], lane);
        const double rd = 1.0 / sm.d[lane];  // d is in before the first step's release
#pragma unroll
        for (int i = 0; i < W; ++i) sm.r1inv[lane * LD + i] *= rd;  // row `lane` by 1 / d
    }
    __syncthreads();
    return ok1 != 0;
}

// 3. Given G2 (sm.g2), Y's top block (sm.z), R~ and D (sm.g, sm.d) and whether the first Cholesky passed (ok1), on
// every thread of the block: the guard, R2 where the first pass left Q short of orthogonal, the reconstruction and
// N = R2^-1 U^-1 into sm.n (sm.ok and sm.second_pass say what happened; sm.r1inv then holds L^-T; x: scratch).
__device__ void reconstruct(Small& sm, double* x, bool ok1, int t, int warp, int lane) {
    __shared__ int near_identity, exact;
    if (t == 0) near_identity = exact = 1;
    __syncthreads();
#pragma unroll
    for (int u = 0; u < 4; ++u) {
        const int i = (t + THREADS * u) / W, j = t % W;
        const double dev = fabs(sm.g2[i * LD + j] - (i == j ? 1.0 : 0.0));
        if (!(dev <= GUARD_G2)) near_identity = 0;
        if (!(dev <= EXACT_G2)) exact = 0;
    }
    __syncthreads();
    const bool second = !exact;
    if (warp == 0) {
        // a column already zero below its diagonal gets tau = 0 from LAPACK (H_c = I): a Householder panel's job
        bool ok = ok1 && near_identity && sm.below_all == 0xffffffffu;
        if (second) ok = warp_cholesky(sm.g2, false, nullptr, sm.inv, &sm.progress[1], lane) && ok;
        if (lane == 0) sm.ok = ok, sm.second_pass = second;
    } else if (warp == 1 && second) {
        warp_upper_inverse(sm.g2, sm.r2inv, sm.inv, &sm.progress[1], lane);
    }
    __syncthreads();
    if (sm.ok) {
        if (second) {
            times(sm.z, W, sm.r2inv, sm.z, warp, lane);  // Q's top block (warps 0-3); else Y's is Q's
            __syncthreads();
        }
        if (warp == 0) warp_signed_lu(sm.z, sm.s, sm.inv, &sm.progress[2], lane);
        if (warp == 1) warp_upper_inverse(sm.z, second ? x : sm.n, sm.inv, &sm.progress[2], lane);  // reads U only
        if (warp == 2) warp_unit_lower_inverse(sm.z, sm.r1inv, sm.inv, &sm.progress[2], lane);  // L^-T, for T
        __syncthreads();
        scale_lower(sm.z, sm.inv, t);
        if (second) times(sm.r2inv, 32, x, sm.n, warp, lane);  // N = R2^-1 U^-1
        __syncthreads();
    }
}

// After reconstruct: T = -U S L^-T (U on and above sm.z's diagonal, L^-T in sm.r1inv) into a.t and its diagonal into
// a.tau, for matrix b (overwrites sm.r2inv and sm.n).
__device__ void write_t(Small& sm, const qr2_panel_job& a, int64_t b, int t, int warp, int lane) {
    for (int e = t; e < W * W; e += THREADS) {
        const int i = e / W, k = e % W;
        sm.r2inv[i * LD + k] = k >= i ? sm.z[i * LD + k] * sm.s[k] : 0.0;  // R2^-1 and N are done with
    }
    __syncthreads();
    times(sm.r2inv, W, sm.r1inv, sm.n, warp, lane);
    __syncthreads();
    float* T = a.t + b * a.t_bs;
    for (int e = t; e < W * W; e += THREADS) {  // T column-major, ld W
        const int i = e % W, j = e / W;
        const float tij = i <= j ? (float)-sm.n[i * LD + j] : 0.f;
        T[j * W + i] = tij;
        if (i == j) a.tau[b * a.tau_bs + j] = tij;
    }
}

// After reconstruct: the panel's top 32 rows (R = R2 R~ D with S on its rows, L below it) and V's (zeros above row
// a.v_row0, the unit diagonal, L), for matrix b (x: scratch).
__device__ void write_top(Small& sm, const qr2_panel_job& a, int64_t b, double* x, int warp, int lane) {
    float* panel = a.h + b * a.h_bs;
    float* v = a.v + b * a.v_bs;
    const bool second = sm.second_pass;
    if (second) times(sm.g2, 32, sm.g, x, warp, lane);  // R2 R~ (both upper)
    __syncthreads();
    const double* r = second ? x : sm.g;
    for (int c = warp; c < W; c += NWARPS) {
        const int i = lane;
        const float h = i <= c ? (float)(sm.s[i] * r[i * LD + c] * sm.d[c]) : (float)sm.z[i * LD + c];
        panel[(int64_t)c * a.ldh + i] = h;
        v[(int64_t)c * a.ldv + a.v_row0 + i] = i < c ? 0.f : (i == c ? 1.f : h);
    }
    for (int c = warp; c < W; c += NWARPS)
        for (int i = lane; i < a.v_row0; i += 32) v[(int64_t)c * a.ldv + i] = 0.f;
}

// The previous panel's reflectors applied to this block's rows of the panel (and block 0's W rows above it), which X
// holds as loaded; then those rows rounded to FP32 into H and X, the panel's top W rows into every block's sm.z, and
// the columns non-zero below their diagonal into sm.below (AHEAD: the load leaves these to this).
__device__ void apply_previous(cg::cluster_group& cluster, const qr2_panel_job& a, int64_t b, double* X, Small& sm,
                               int row0, int rows, int C, int q, int t, int warp, int lane) {
    const int rows8 = (rows + 7) & ~7, top = q == 0 ? W : 0;  // block 0 also holds the W rows above the panel
    const float* v = a.prev_v + b * a.prev_v_bs + W + row0 - top;  // V's row for X's row -top
    const float* T = a.prev_t + b * a.prev_t_bs;
    float* panel = a.h + b * a.h_bs;
    if (q == 0)
        for (int e = t; e < W * W; e += THREADS) X[(e % W - W) * LD + e / W] = (double)panel[(int64_t)(e / W) * a.ldh + e % W - W];
    for (int e = t; e < W * W; e += THREADS) sm.r1inv[(e / W) * LD + e % W] = (double)T[e];  // T^T, row-major
    __syncthreads();
    cross(v, a.prev_ldv, top + rows, X - top * LD, top + rows8, sm.part[0], warp, lane);  // this block's V^T C
    cluster.sync();
    cluster_sum(cluster, sm, 0, sm.g, t, C, q);
    cluster.sync();
    times(sm.r1inv, W, sm.g, sm.n, warp, lane);  // T^T V^T C
    __syncthreads();
    minus_times(v, a.prev_ldv, top + rows, X - top * LD, top + rows8, sm.n, warp, lane);
    __syncthreads();
    unsigned below = 0u;
    for (int c = warp; c < W; c += NWARPS)
        for (int i = lane - top; i < rows; i += 32) {
            const float y = (float)X[i * LD + c];
            X[i * LD + c] = (double)y;
            panel[(int64_t)c * a.ldh + row0 + i] = y;  // the Householder kinds read these where the guard fails
            if (i >= 0 && y != 0.f && row0 + i > c) below |= 1u << c;  // NaN counts as non-zero
        }
    below = __reduce_or_sync(FULL, below);
    if (lane == 0 && below) atomicOr(&sm.below, below);
    __syncthreads();
    if (q == 0)  // read by the other blocks after the cluster barriers of step 1
        for (int e = t; e < W * W; e += THREADS) {
            const double z = X[(e / W) * LD + e % W];
            for (int r = 0; r < C; ++r) cluster.map_shared_rank(sm.z, r)[(e / W) * LD + e % W] = z;
        }
}

// BLOCK_ROWS: the rows a block holds at most. AHEAD: the previous panel's reflectors first (apply_previous).
template <int BLOCK_ROWS, bool AHEAD>
__global__ void __launch_bounds__(THREADS, 1) panel_cholqr_kernel(qr2_panel_job a, int* done) {
    qr2_follow_previous_kernel();  // launched with Qr2Launch::pdl
    extern __shared__ __align__(16) unsigned char smem[];
    // this block's rows: P, then Y, then V's rows (AHEAD: after W rows for those above the panel)
    double* X = reinterpret_cast<double*>(smem) + (AHEAD ? W * LD : 0);
    Small& sm = *reinterpret_cast<Small*>(smem + sizeof(double) * (BLOCK_ROWS + (AHEAD ? W : 0)) * LD);
    double* x = sm.part[0];  // scratch, once the partial Gram matrices are summed
    cg::cluster_group cluster = cg::this_cluster();
    const int C = (int)cluster.num_blocks(), q = (int)cluster.block_rank();
    const int64_t b = blockIdx.x / C;
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const int m = a.m;
    const int mc = (m + C - 1) / C;
    const int row0 = q * mc, rows = max(0, min(m, row0 + mc) - row0);
    const int rows8 = (rows + 7) & ~7;
    float* panel = a.h + b * a.h_bs;

    if (t == 0) sm.below = 0u, sm.progress[0] = sm.progress[1] = sm.progress[2] = 0u;
    __syncthreads();
    // the block's rows into shared memory, zeros to the next multiple of 8 (every load issued before the stores)
    {
        unsigned below = 0u;
        float in[W / NWARPS][BLOCK_ROWS / 32];
#pragma unroll
        for (int u = 0; u < W / NWARPS; ++u)
#pragma unroll
            for (int k = 0; k < BLOCK_ROWS / 32; ++k) {
                const int c = warp + NWARPS * u, i = lane + 32 * k;
                in[u][k] = i < rows ? panel[(int64_t)c * a.ldh + row0 + i] : 0.f;
            }
#pragma unroll
        for (int u = 0; u < W / NWARPS; ++u)
#pragma unroll
            for (int k = 0; k < BLOCK_ROWS / 32; ++k) {
                const int c = warp + NWARPS * u, i = lane + 32 * k;
                if (i < rows8) X[i * LD + c] = (double)in[u][k];
                if (!AHEAD && in[u][k] != 0.f && row0 + i > c) below |= 1u << c;  // NaN counts as non-zero
            }
        below = __reduce_or_sync(FULL, below);
        if (lane == 0 && below) atomicOr(&sm.below, below);
        // the panel's top 32 rows, from which every block rebuilds Q's top block (block 0 writes them only at the end,
        // after the cluster barriers below)
        if (!AHEAD)
            for (int e = t; e < W * W; e += THREADS) sm.z[(e % W) * LD + e / W] = (double)panel[(int64_t)(e / W) * a.ldh + e % W];
    }
    __syncthreads();
    if (AHEAD) apply_previous(cluster, a, b, X, sm, row0, rows, C, q, t, warp, lane);

    // 1. G1, summed over the cluster; R~ and D; R1^-1 = D^-1 R~^-1 (every block, the same bits)
    gram(X, rows8, sm.part[0], warp, lane);
    cluster.sync();
    cluster_sum(cluster, sm, 0, sm.g, t, C, q);
    if (warp == 0) {  // whether every column has a non-zero below its diagonal, over the cluster's rows
        unsigned below = lane < C ? cluster.map_shared_rank(&sm, lane)->below : 0u;
        below = __reduce_or_sync(FULL, below);
        if (lane == 0) sm.below_all = below;
    }
    cluster.sync();
    const bool ok1 = factor_g1(sm, warp, lane);

    // 2. Y = P R1^-1 (and Y's top block from the panel's top rows) and its Gram matrix, summed into every block
    times(X, rows8, sm.r1inv, X, warp, lane);
    times(sm.z, W, sm.r1inv, sm.z, warp, lane);
    __syncthreads();
    gram(X, rows8, sm.part[1], warp, lane);
    cluster.sync();
    cluster_sum(cluster, sm, 1, sm.g2, t, C, q);
    cluster.sync();  // the last access to another block's shared memory is behind this

    // 3. every block, on the same bits: the guard, R2 where the first pass left Q short of orthogonal, the
    // reconstruction, N = R2^-1 U^-1 (computing them everywhere is quicker than sending N from one block)
    reconstruct(sm, x, ok1, t, warp, lane);
    const bool ok = sm.ok;
    if (q == 0 && t == 0) done[b] = ok;
    if (!ok) return;

    // 4. V's rows = Y N, written to H (below the top block) and to V
    times(X, rows8, sm.n, X, warp, lane);
    __syncthreads();
    float* v = a.v + b * a.v_bs;
    const int first = q == 0 ? W : 0;  // block 0's top rows come from the reconstruction
    for (int c = warp; c < W; c += NWARPS)
        for (int i = first + lane; i < rows; i += 32) {
            const float y = (float)X[i * LD + c];
            panel[(int64_t)c * a.ldh + row0 + i] = y;
            v[(int64_t)c * a.ldv + a.v_row0 + row0 + i] = y;
        }
    if (q == C - 1) write_t(sm, a, b, t, warp, lane);  // the last block: T and tau
    if (q != 0) return;

    // block 0: R, L and V's top block
    write_top(sm, a, b, x, warp, lane);
}

constexpr size_t smem_bytes(int block_rows, bool ahead = false) {
    return sizeof(double) * (block_rows + (ahead ? W : 0)) * LD + sizeof(Small);
}

// Blocks per matrix: the fewest (a power of two) that hold the rows at block_rows a block; 0 where none do. Spreading
// a panel over more, smaller blocks measured slower at every batch (H200, docs/tuning.md): 128-row blocks, two an SM,
// with the cluster doubled while the batch left SMs idle, took 60 x 1024 x 1024 to 6.27 ms against 5.29 and
// 8 x 2048 x 2048 to 7.63 against 7.16.
int blocks_per_matrix(int64_t m, int block_rows) {
    int c = 1;
    while (c < MAX_CLUSTER && (m + c - 1) / c > block_rows) c *= 2;
    return (m + c - 1) / c <= block_rows ? c : 0;
}

// The rows a block of this launch holds: WIDE_ROWS where the batch's clusters of ROWS-row blocks need more waves of
// SMs than those of WIDE_ROWS-row blocks (one block an SM either way), else ROWS, whose more blocks a matrix shorten
// the block-wide products. H200 (docs/results/2026-12-02-h200-update-waves.txt): 512-row blocks took 60 x 1024 5.39
// -> 4.68 ms and 100 x 768 4.29 -> 3.73, but where 256-row clusters fit one wave they lost (8 x 2048 7.25 -> 7.60,
// 2 x 4096 15.5 -> 16.3, 1 x 3000^2 8.3 -> 8.9).
int block_rows_for(int64_t batch, int64_t m, const qr2_device* dev) {
    const int narrow = blocks_per_matrix(m, ROWS), wide = blocks_per_matrix(m, WIDE_ROWS);
    if (wide == 0 || smem_bytes(WIDE_ROWS) > (size_t)dev->smem_optin) return ROWS;
    auto waves = [&](int per_matrix) { return (batch * per_matrix + dev->sms - 1) / dev->sms; };
    return narrow == 0 || waves(wide) < waves(narrow) ? WIDE_ROWS : ROWS;
}

template <int BLOCK_ROWS, bool AHEAD>
int launch(const qr2_panel_job* a, int* done, void* stream) {
    const int c = blocks_per_matrix(a->m, BLOCK_ROWS);
    if (c > 8)
        QR2_CHECK_CUDA(cudaFuncSetAttribute(panel_cholqr_kernel<BLOCK_ROWS, AHEAD>,
                                            cudaFuncAttributeNonPortableClusterSizeAllowed, 1),
                       "panel_cholqr cluster size");
    Qr2Launch how;
    how.grid = dim3((unsigned)(a->batch * c));
    how.block = dim3(THREADS);
    how.smem = smem_bytes(BLOCK_ROWS, AHEAD);
    how.cluster = (unsigned)c;
    how.pdl = how.cluster == 1;  // the kernel starts with qr2_follow_previous_kernel (not with clusters: slower)
    return qr2_launch(panel_cholqr_kernel<BLOCK_ROWS, AHEAD>, how, stream, "panel_cholqr launch", *a, done);
}

// ---- The grid form: panels taller than a cluster holds (one 32-column panel of m > GRID_MIN_ROWS rows a launch
// chain). The same steps over ROWS-row blocks of the grid, with the panel read from global memory each time instead
// of kept in shared memory, and the 32 x 32 steps on one block a matrix:
//   grid_gram (blocks): partial G1 of each block's rows and which columns are non-zero below their diagonal there;
//   grid_first (a block a matrix): G1 summed in the order of the blocks, R~, D, R1^-1, into the matrix's GridState;
//   grid_gram again with R1^-1: partial G2 of Y = P R1^-1 (Y is not stored);
//   grid_second (a block a matrix): G2 summed, then step 3 and T, tau, R, L and V's top block as the cluster form
//     does them, and M = R1^-1 N; done[b];
//   grid_v (blocks): V's rows below the top block, P M, into H and V.
// Past SUM_ALONE parts a matrix, grid_sum sums each pass's partials over 16 blocks a matrix first.
// Why: past a cluster's rows the Householder panel is the tall kind, a launch a reflector (about 0.85 ms a 32-column
// panel of 100000 rows); this is five to seven launches whatever the height.
constexpr int GRID_MIN_ROWS = 8192;  // up to this the cluster panel holds the rows (panel_cluster.cu)

struct GridState {
    double g[W * LD];      // R~
    double r1inv[W * LD];  // R1^-1
    double m[W * LD];      // M = R1^-1 N
    double d[W];
    int ok1;
    unsigned below_all;
};

// The rows [row0, row0 + rows) of matrix b's panel into X as FP64, zeros to the next multiple of 8; the columns with a
// non-zero entry below their diagonal there, as bits (NaN counts as non-zero), returned to every thread.
__device__ unsigned load_rows(double* X, const float* panel, int64_t ldh, int row0, int rows, int t, int warp,
                              int lane) {
    __shared__ unsigned below;
    if (t == 0) below = 0u;
    __syncthreads();
    const int rows8 = (rows + 7) & ~7;
    unsigned mine = 0u;
    for (int c = warp; c < W; c += NWARPS)
        for (int i = lane; i < rows8; i += 32) {
            const float x = i < rows ? panel[(int64_t)c * ldh + row0 + i] : 0.f;
            X[i * LD + c] = (double)x;
            if (x != 0.f && row0 + i > c) mine |= 1u << c;
        }
    mine = __reduce_or_sync(FULL, mine);
    if (lane == 0 && mine) atomicOr(&below, mine);
    __syncthreads();
    return below;
}

// Block x: matrix x / parts, the ROWS-row chunks x % parts, + parts, ... of its panel. The sum of their Gram
// matrices (in the order of the chunks) of the panel's rows (first pass: state NULL) or of Y = P R1^-1 (second pass)
// into partial[x W W], and (first pass) their below bits into below[x].
__global__ void __launch_bounds__(THREADS) grid_gram_kernel(qr2_panel_job a, int parts, const GridState* state,
                                                           double* partial, unsigned* below) {
    qr2_follow_previous_kernel();  // launched with Qr2Launch::pdl
    extern __shared__ __align__(16) unsigned char smem[];
    double* X = reinterpret_cast<double*>(smem);  // ROWS x LD
    double* B = X + ROWS * LD;                    // R1^-1, W x LD
    double* G = B + W * LD;                       // a chunk's Gram matrix, W x W
    const int64_t b = blockIdx.x / parts;
    const int part = (int)(blockIdx.x - b * parts), t = threadIdx.x, lane = t & 31, warp = t >> 5;
    if (state) {
        for (int e = t; e < W * LD; e += THREADS) B[e] = state[b].r1inv[e];
    }
    double sum[W * W / THREADS] = {};
    unsigned bits = 0u;
    for (int64_t next = (int64_t)part * ROWS; next < a.m; next += (int64_t)parts * ROWS) {  // no overflow near 2^31
        const int row0 = (int)next, rows = min(a.m - row0, ROWS), rows8 = (rows + 7) & ~7;
        bits |= load_rows(X, a.h + b * a.h_bs, a.ldh, row0, rows, t, warp, lane);  // ends in a barrier
        if (state) {
            times(X, rows8, B, X, warp, lane);
            __syncthreads();
        }
        gram(X, rows8, G, warp, lane);
        __syncthreads();
#pragma unroll
        for (int u = 0; u < W * W / THREADS; ++u) sum[u] += G[t + THREADS * u];
    }
    double* out = partial + (int64_t)blockIdx.x * W * W;
#pragma unroll
    for (int u = 0; u < W * W / THREADS; ++u) out[t + THREADS * u] = sum[u];
    if (!state && t == 0) below[blockIdx.x] = bits;
}

// The sum of matrix b's partial Gram matrices, in the order of the parts, into dst (ld LD): a thread's four entries
// of SUM_AHEAD parts loaded together before they are added (one block reads them all).
constexpr int SUM_AHEAD = 8;
__device__ void sum_parts(const double* partial, int64_t b, int parts, double* dst, int t) {
    constexpr int PER = W * W / THREADS;
    const double* p = partial + b * parts * W * W + t;
    double sum[PER] = {};
    for (int q0 = 0; q0 < parts; q0 += SUM_AHEAD) {
        double x[SUM_AHEAD][PER];
#pragma unroll
        for (int k = 0; k < SUM_AHEAD; ++k)
#pragma unroll
            for (int u = 0; u < PER; ++u) x[k][u] = q0 + k < parts ? p[(int64_t)(q0 + k) * W * W + THREADS * u] : 0.0;
#pragma unroll
        for (int k = 0; k < SUM_AHEAD; ++k)
#pragma unroll
            for (int u = 0; u < PER; ++u)
                if (q0 + k < parts) sum[u] += x[k][u];
    }
#pragma unroll
    for (int u = 0; u < PER; ++u) {
        const int e = t + THREADS * u;
        dst[(e / W) * LD + e % W] = sum[u];
    }
}

// Past SUM_ALONE parts a matrix, one block summing them all is what grid_first and grid_second wait on (1 x 100000 x
// 256: 264 parts, 27 and 37 us a launch): block x sums entries [E s, E s + E) of matrix b = x / SUM_BLOCKS (s = x %
// SUM_BLOCKS) over its parts into sums[b W W + entry], each of a slice's entries by THREADS / E threads that sum
// consecutive runs of the parts, the runs then added in order (the same bits every call).
constexpr int SUM_ALONE = 32, SUM_BLOCKS = 16, E = W * W / SUM_BLOCKS, RUNS = THREADS / E;
__global__ void __launch_bounds__(THREADS) grid_sum_kernel(int parts, const double* partial, double* sums) {
    qr2_follow_previous_kernel();  // launched with Qr2Launch::pdl
    __shared__ double run[THREADS];
    const int64_t b = blockIdx.x / SUM_BLOCKS;
    const int t = threadIdx.x, e = t % E, r = t / E, entry = (int)(blockIdx.x % SUM_BLOCKS) * E + e;
    const int per = (parts + RUNS - 1) / RUNS, p0 = min(parts, r * per), p1 = min(parts, p0 + per);
    const double* p = partial + b * parts * W * W + entry;
    double sum = 0.0;
    for (int q0 = p0; q0 < p1; q0 += SUM_AHEAD) {
        double x[SUM_AHEAD];
#pragma unroll
        for (int k = 0; k < SUM_AHEAD; ++k) x[k] = q0 + k < p1 ? p[(int64_t)(q0 + k) * W * W] : 0.0;
#pragma unroll
        for (int k = 0; k < SUM_AHEAD; ++k)
            if (q0 + k < p1) sum += x[k];
    }
    run[t] = sum;
    __syncthreads();
    if (r == 0) {
        double total = run[e];
        for (int k = 1; k < RUNS; ++k) total += run[e + k * E];
        sums[b * W * W + entry] = total;
    }
}

// partial: partial_parts partial Gram matrices a matrix (1: summed by grid_sum); below: `parts` words a matrix.
__global__ void __launch_bounds__(THREADS, 1) grid_first_kernel(int parts, const double* partial, int partial_parts,
                                                                const unsigned* below, GridState* state) {
    qr2_follow_previous_kernel();  // launched with Qr2Launch::pdl
    extern __shared__ __align__(16) unsigned char smem[];
    Small& sm = *reinterpret_cast<Small*>(smem);
    const int64_t b = blockIdx.x;
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    if (t == 0) sm.progress[0] = 0u;
    sum_parts(partial, b, partial_parts, sm.g, t);
    if (warp == 0) {
        unsigned bits = 0u;
        for (int q = lane; q < parts; q += 32) bits |= below[b * parts + q];
        bits = __reduce_or_sync(FULL, bits);
        if (lane == 0) state[b].below_all = bits;
    }
    __syncthreads();
    const bool ok1 = factor_g1(sm, warp, lane);
    GridState& out = state[b];
    for (int e = t; e < W * LD; e += THREADS) out.g[e] = sm.g[e], out.r1inv[e] = sm.r1inv[e];
    if (t < W) out.d[t] = sm.d[t];
    if (t == 0) out.ok1 = ok1;
}

__global__ void __launch_bounds__(THREADS, 1) grid_second_kernel(qr2_panel_job a, int parts, const double* partial,
                                                                 GridState* state, int* done) {
    qr2_follow_previous_kernel();  // launched with Qr2Launch::pdl
    extern __shared__ __align__(16) unsigned char smem[];
    Small& sm = *reinterpret_cast<Small*>(smem);
    double* x = sm.part[0];  // scratch
    const int64_t b = blockIdx.x;
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    GridState& st = state[b];
    const float* panel = a.h + b * a.h_bs;
    if (t == 0) sm.progress[1] = sm.progress[2] = 0u, sm.below_all = st.below_all;
    sum_parts(partial, b, parts, sm.g2, t);
    for (int e = t; e < W * LD; e += THREADS) sm.g[e] = st.g[e], sm.r1inv[e] = st.r1inv[e];
    if (t < W) sm.d[t] = st.d[t];
    for (int e = t; e < W * W; e += THREADS) sm.z[(e % W) * LD + e / W] = (double)panel[(int64_t)(e / W) * a.ldh + e % W];
    __syncthreads();
    times(sm.z, W, sm.r1inv, sm.z, warp, lane);  // Y's top block
    __syncthreads();
    reconstruct(sm, x, st.ok1 != 0, t, warp, lane);
    const bool ok = sm.ok;
    if (t == 0) done[b] = ok;
    if (!ok) return;
    // M = R1^-1 N for grid_v (sm.r1inv holds L^-T now: R1^-1 again from the state)
    for (int e = t; e < W * LD; e += THREADS) sm.r2inv[e] = st.r1inv[e];
    __syncthreads();
    times(sm.r2inv, W, sm.n, x, warp, lane);
    __syncthreads();
    for (int e = t; e < W * LD; e += THREADS) st.m[e] = x[e];
    __syncthreads();
    write_t(sm, a, b, t, warp, lane);
    __syncthreads();
    write_top(sm, a, b, x, warp, lane);
}

// Block x: matrix x / parts, rows ROWS (x % parts) .. + ROWS: V's rows below the panel's top 32, P M, into H and V
// (matrices done[b] == 1 only).
__global__ void __launch_bounds__(THREADS) grid_v_kernel(qr2_panel_job a, int parts, const GridState* state,
                                                        const int* done) {
    qr2_follow_previous_kernel();  // launched with Qr2Launch::pdl
    extern __shared__ __align__(16) unsigned char smem[];
    double* X = reinterpret_cast<double*>(smem);
    double* B = X + ROWS * LD;
    const int64_t b = blockIdx.x / parts;
    if (!done[b]) return;
    const int part = (int)(blockIdx.x - b * parts), t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const int row0 = part * ROWS, rows = min(a.m - row0, ROWS), rows8 = (rows + 7) & ~7;
    float* panel = a.h + b * a.h_bs;
    load_rows(X, panel, a.ldh, row0, rows, t, warp, lane);
    for (int e = t; e < W * LD; e += THREADS) B[e] = state[b].m[e];
    __syncthreads();
    times(X, rows8, B, X, warp, lane);  // rows of the top block too; those stay as grid_second wrote them
    __syncthreads();
    float* v = a.v + b * a.v_bs;
    const int first = row0 == 0 ? W : 0;
    for (int c = warp; c < W; c += NWARPS)
        for (int i = first + lane; i < rows; i += 32) {
            const float y = (float)X[i * LD + c];
            panel[(int64_t)c * a.ldh + row0 + i] = y;
            v[(int64_t)c * a.ldv + a.v_row0 + row0 + i] = y;
        }
}

// Blocks a matrix for the grid passes: every 256-row chunk its own while the chunks fit two waves of blocks (two an SM),
// else two waves' worth, each walking several chunks (fewer partials for the one block a matrix that sums them).
int grid_parts(int64_t m, int64_t batch, const qr2_device* dev) {
    const int64_t chunks = (m + ROWS - 1) / ROWS, wave = (2 * (int64_t)dev->sms + batch - 1) / batch;
    return (int)(chunks < wave ? chunks : wave > 1 ? wave : 1);
}
constexpr size_t grid_rows_smem() { return sizeof(double) * ((ROWS + W) * LD + W * W); }

}  // namespace

extern "C" int qr2_panel_cholqr_holds(int64_t m, int64_t w, const qr2_device* dev) {
    const int c = blocks_per_matrix(m, ROWS);
    return w == W && m >= 2 * W && c > 0 && (c == 1 || dev->clusters) && smem_bytes(ROWS) <= (size_t)dev->smem_optin;
}

extern "C" int qr2_panel_cholqr_applies_previous(int64_t m, int64_t w, const qr2_device* dev) {
    return qr2_panel_cholqr_holds(m, w, dev) && smem_bytes(ROWS, true) <= (size_t)dev->smem_optin;
}

extern "C" int qr2_panel_cholqr_run(const qr2_panel_job* a, int* done, const qr2_device* dev, void* stream) {
    if (a->batch <= 0) return 0;
    if (!qr2_panel_cholqr_holds(a->m, a->w, dev)) return qr2_record_error("panel_cholqr", "panel shape not held");
    // block 0 holds the top 32 rows: a panel has at least 64, and past a block's rows the fewest blocks hold more
    // than half of them each
    if (a->prev_v) {  // ROWS-row blocks only (lookahead's few matrices fit one wave of them)
        if (!a->prev_t || !qr2_panel_cholqr_applies_previous(a->m, a->w, dev))
            return qr2_record_error("panel_cholqr", "previous reflectors without T, or no shared memory for them");
        return launch<ROWS, true>(a, done, stream);
    }
    if (block_rows_for(a->batch, a->m, dev) == WIDE_ROWS) return launch<WIDE_ROWS, false>(a, done, stream);
    return launch<ROWS, false>(a, done, stream);
}

// The grid form's workspace: per matrix its parts' partial Gram matrices, their sum (grid_sum) and below bits, and its
// GridState.
extern "C" int64_t qr2_panel_cholqr_grid_work_floats(int64_t m, int64_t batch, const qr2_device* dev) {
    const int64_t parts = grid_parts(m, batch, dev);
    const int64_t bytes = batch * ((parts + 1) * W * W * (int64_t)sizeof(double) + parts * (int64_t)sizeof(unsigned) +
                                   (int64_t)sizeof(GridState)) + 64;
    return (bytes + 3) / 4;
}

extern "C" int qr2_panel_cholqr_grid_holds(int64_t m, int64_t w, const qr2_device* dev) {
    return w == W && m > GRID_MIN_ROWS && m <= INT_MAX && sizeof(Small) <= (size_t)dev->smem_optin &&
           grid_rows_smem() <= (size_t)dev->smem_optin;
}

extern "C" int qr2_panel_cholqr_grid_run(const qr2_panel_job* a, int* done, void* work, const qr2_device* dev,
                                         void* stream) {
    if (a->batch <= 0) return 0;
    if (!qr2_panel_cholqr_grid_holds(a->m, a->w, dev)) return qr2_record_error("panel_cholqr_grid", "panel shape not held");
    const int parts = grid_parts(a->m, a->batch, dev);
    if (a->batch > INT_MAX / parts) return qr2_record_error("panel_cholqr_grid", "more than 2^31 - 1 thread blocks");
    // work: the partials (doubles), their sums, then the below bits, then the states (8-byte aligned)
    double* partial = static_cast<double*>(work);
    double* sums = partial + a->batch * parts * W * W;
    unsigned* below = reinterpret_cast<unsigned*>(sums + a->batch * W * W);
    const uintptr_t after = reinterpret_cast<uintptr_t>(below + a->batch * parts);
    GridState* state = reinterpret_cast<GridState*>((after + 15) / 16 * 16);
    Qr2Launch rows, one;
    rows.pdl = one.pdl = true;  // every kernel starts with qr2_follow_previous_kernel
    rows.grid = dim3((unsigned)(a->batch * parts));
    rows.block = one.block = dim3(THREADS);
    rows.smem = rows.smem_limit = grid_rows_smem();
    one.grid = dim3((unsigned)a->batch);
    const int chunks = (int)((a->m + ROWS - 1) / ROWS);  // grid_v: a block a chunk
    if (a->batch > INT_MAX / chunks) return qr2_record_error("panel_cholqr_grid", "more than 2^31 - 1 thread blocks");
    Qr2Launch vrows = rows;
    vrows.grid = dim3((unsigned)(a->batch * chunks));
    one.smem = one.smem_limit = sizeof(Small);
    Qr2Launch sum;
    sum.pdl = true;
    sum.grid = dim3((unsigned)(a->batch * SUM_BLOCKS));
    sum.block = dim3(THREADS);
    if (a->batch > INT_MAX / SUM_BLOCKS) return qr2_record_error("panel_cholqr_grid", "more than 2^31 - 1 thread blocks");
    // grid_first and grid_second sum the partials themselves, or read them summed by grid_sum (as one part)
    const bool apart = parts > SUM_ALONE;
    const double* summed = apart ? sums : partial;
    const int summed_parts = apart ? 1 : parts;
    const GridState* none = nullptr;
    return qr2_launch(grid_gram_kernel, rows, stream, "panel_cholqr_grid gram launch", *a, parts, none, partial,
                      below) ||
           (apart && qr2_launch(grid_sum_kernel, sum, stream, "panel_cholqr_grid sum launch", parts,
                                (const double*)partial, sums)) ||
           qr2_launch(grid_first_kernel, one, stream, "panel_cholqr_grid first launch", parts, summed, summed_parts,
                      (const unsigned*)below, state) ||
           qr2_launch(grid_gram_kernel, rows, stream, "panel_cholqr_grid gram launch", *a, parts,
                      (const GridState*)state, partial, below) ||
           (apart && qr2_launch(grid_sum_kernel, sum, stream, "panel_cholqr_grid sum launch", parts,
                                (const double*)partial, sums)) ||
           qr2_launch(grid_second_kernel, one, stream, "panel_cholqr_grid second launch", *a, summed_parts, summed,
                      state, done) ||
           qr2_launch(grid_v_kernel, vrows, stream, "panel_cholqr_grid v launch", *a, chunks,
                      (const GridState*)state, (const int*)done);
}
