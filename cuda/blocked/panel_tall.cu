// panel_tall.cu - the blocked route's tall panel: Householder factorisation (LAPACK sgeqr2) of an m x w panel
// (w <= 32) too tall for one cluster's registers, by many thread blocks per matrix, so that a panel of 100000 rows
// is read at the GPU's bandwidth instead of one SM's: one launch a panel where the batch's blocks fit on the GPU at
// once with their rows in shared memory (the resident form, below), else one launch per reflector:
//
// Block k of a matrix owns rows [k rows_per_block, (k + 1) rows_per_block) of all w columns. Launch j:
//   1. (j > 0) reflector j - 1: every block sums the other blocks' partials of launch j - 1 in the same
//      order (so all blocks agree bit for bit) into sigma = ||x_tail||^2 and the dots d_c = x_tail . P[:, c]
//      (x = column j - 1), reads alpha and row j - 1 from H, and forms slarfg's beta, tau, scal = 1 / (alpha -
//      beta) and s_c = tau (P[j-1][c] + scal d_c), all in FP64. It then updates its rows: v = x scal,
//      P[:, c] -= s_c v, and row j - 1 of R; V (explicit) and tau are written as it goes.
//   2. (j < min(m, w)) partials of reflector j over its rows, from the values it just updated: the tail's
//      sum of squares and the tail's dots with the columns right of j.
// Partials are double-buffered by the parity of j (launch j reads j - 1's and writes j's). Each launch
// reads and writes only columns >= j - 1 of its rows.
#include "launch.cuh"
#include "reduce.cuh"
#include "reflector.cuh"

namespace {

constexpr int THREADS = 256;
constexpr int W = 32;
constexpr int SLOTS = W + 1;              // per block: the tail's sum of squares, then its dots with columns 0..W-1
constexpr int GROUPS = THREADS / SLOTS;   // thread groups that share the sum over blocks

struct TallArgs {
    qr2_panel_job p;
    double* part;  // [batch][2][blocks + 1][SLOTS]: the blocks' partials, then row j (alpha and R's row)
    int blocks;    // per matrix
    int rows_per_block;
    int j;  // this launch's step
};

// Row i of the panel (x: its columns, registers indexed at compile time only; those >= r change) updated with
// reflector r, whose scal, beta and coefficients s_c the step formed: H's column r becomes v (below the diagonal),
// beta (on it) or stays R (above); columns right of r lose s_c v. Returns v (V's entry: 1 on the diagonal, 0 above).
__device__ __forceinline__ double apply_reflector(float (&x)[W], int i, int r, int w, double scal, double beta,
                                                  const double* coef) {
    float xr = 0.f;
#pragma unroll
    for (int c = 0; c < W; ++c) xr = c == r ? x[c] : xr;
    const double v = i > r ? xr * scal : i == r ? 1.0 : 0.0;
    const float hr = i > r ? (float)v : i == r ? (float)beta : xr;
#pragma unroll
    for (int c = 0; c < W; ++c) {
        if (c == r) x[c] = hr;
        if (c > r && c < w) x[c] = (float)(x[c] - coef[c] * v);
    }
    return v;
}

// Row i's share (i > j) of reflector j's partials: the tail's sum of squares and its dots with the columns right of j;
// with `left`, also with the columns left of j (the earlier reflectors there, for T).
__device__ __forceinline__ void add_partials(const float (&x)[W], int j, int w, bool left, double& ss,
                                             double (&acc)[W]) {
    float xf = 0.f;
#pragma unroll
    for (int c = 0; c < W; ++c) xf = c == j ? x[c] : xf;
    ss = fma((double)xf, (double)xf, ss);
#pragma unroll
    for (int c = 0; c < W; ++c)
        if ((c > j || (left && c < j)) && c < w) acc[c] = fma((double)xf, (double)x[c], acc[c]);
}

__global__ void __launch_bounds__(THREADS) panel_tall_kernel(TallArgs a) {
    qr2_follow_previous_kernel();  // launched with Qr2Launch::pdl
    __shared__ double red[THREADS / 32 > GROUPS ? THREADS / 32 : GROUPS][SLOTS];
    __shared__ double coef[W];  // s_c of reflector j - 1
    __shared__ double scalars[2];  // scal and beta of reflector j - 1
    const int64_t b = blockIdx.x / a.blocks;
    const int k = (int)(blockIdx.x % a.blocks), t = threadIdx.x, lane = t & 31, wid = t >> 5;
    if (a.p.done && a.p.done[b]) return;  // the CholeskyQR panel factored it
    const int m = a.p.m, w = a.p.w, kk = min(m, w), j = a.j;
    float* P = a.p.h + b * a.p.h_bs;
    const int64_t ld = a.p.ldh;
    const int64_t stride = (int64_t)(a.blocks + 1) * SLOTS;  // one parity's partials
    double* part = a.part + b * 2 * stride;
    const int row0 = k * a.rows_per_block, row1 = min(m, row0 + a.rows_per_block);

    // 1. the scalars of reflector r = j - 1, from launch r's partials summed in a fixed order (every block
    // gets the same bits): group g sums blocks g, g + GROUPS, ...; then thread s adds the groups in order
    const int r = j - 1;
    const double* prev = part + (r & 1) * stride;
    if (r >= 0 && t < GROUPS * SLOTS) {
        const int g = t / SLOTS, slot = t % SLOTS;
        double s = 0.0;
        for (int q = g; q < a.blocks; q += GROUPS) s += prev[(int64_t)q * SLOTS + slot];
        red[g][slot] = s;
    }
    __syncthreads();
    if (r >= 0) {
        double sum = 0.0;
        if (t < SLOTS)
            for (int g = 0; g < GROUPS; ++g) sum += red[g][t];
        const double* row = prev + (int64_t)a.blocks * SLOTS + 1;  // row r as launch r saw it: row[c] = P[r][c]
        __syncthreads();
        if (t < SLOTS) red[0][t] = sum;
        __syncthreads();
        const double sigma = red[0][0], alpha = row[r];
        double beta = alpha, tau = 0.0, scal = 0.0;
        if (sigma > 0.0) householder_scalars(alpha, sigma, beta, tau, scal);  // false for 0 and NaN
        if (t == 0) scalars[0] = scal, scalars[1] = beta;
        if (t > r && t < w) coef[t] = tau * (row[t] + scal * red[0][1 + t]);
        if (k == 0 && t == 0) a.p.tau[b * a.p.tau_bs + r] = (float)tau;
    }
    if (j == 0 && k == 0 && a.p.v)  // rows of V above the panel's reflectors
        for (int i = t; i < a.p.v_row0 * w; i += THREADS)
            a.p.v[b * a.p.v_bs + (int64_t)(i / a.p.v_row0) * a.p.ldv + i % a.p.v_row0] = 0.f;
    __syncthreads();  // coef and scalars ready
    const double scal = r >= 0 ? scalars[0] : 0.0, beta = r >= 0 ? scalars[1] : 0.0;

    // 2. update this block's rows with reflector r, then accumulate the partials of reflector j in FP64
    // (products of FP32 values neither overflow nor underflow there; the panel is not scaled). FP32 dots
    // at <= 128 registers measured 1.4x faster at 1 x 100000 x 32 but overflow for entries above ~1e19.
    double ss = 0.0;
    double acc[W];
#pragma unroll
    for (int c = 0; c < W; ++c) acc[c] = 0.0;
    float* V = a.p.v ? a.p.v + b * a.p.v_bs + a.p.v_row0 : nullptr;
    double* next = part + (j & 1) * stride;
    for (int i = row0 + t; i < row1; i += THREADS) {
        float x[W];
#pragma unroll
        for (int c = 0; c < W; ++c) x[c] = c >= r && c < w ? P[(int64_t)c * ld + i] : 0.f;
        if (r >= 0) {
            const double v = apply_reflector(x, i, r, w, scal, beta, coef);
            if (V) V[(int64_t)r * a.p.ldv + i] = (float)v;
#pragma unroll
            for (int c = 0; c < W; ++c)  // columns >= r changed: write them back
                if (c >= r && c < w) P[(int64_t)c * ld + i] = x[c];
        }
        if (j < kk && i == j)  // row j, for launch j + 1 (whose owner overwrites it there)
#pragma unroll
            for (int c = 0; c < W; ++c)
                if (c >= j && c < w) next[(int64_t)a.blocks * SLOTS + 1 + c] = x[c];
        if (j < kk && i > j) add_partials(x, j, w, false, ss, acc);
    }
    if (j >= kk) return;

    // block reduction of the partials, for launch j + 1
    ss = warp_sum(ss);
#pragma unroll
    for (int c = 0; c < W; ++c) acc[c] = c > j && c < w ? warp_sum(acc[c]) : 0.0;
    __syncthreads();  // red is free again
    if (lane == 0) {
        red[wid][0] = ss;
#pragma unroll
        for (int c = 0; c < W; ++c) red[wid][1 + c] = acc[c];
    }
    __syncthreads();
    if (t < SLOTS) {
        double s = 0.0;
        for (int q = 0; q < THREADS / 32; ++q) s += red[q][t];
        next[(int64_t)k * SLOTS + t] = s;
    }
}

// ---- The resident form: the whole panel in one launch ----
// Where every block of the batch fits on the GPU at once (a cooperative launch guarantees it, or fails) and a block's
// rows fit in its shared memory, the launches above become one: each block reads its rows of the panel once, keeps
// them in shared memory through all the steps and writes them back at the end, and the step boundaries are a
// barrier of the matrix's blocks in global memory. At step j every block writes its partials of reflector j (the
// owner of row j also that row) and arrives on the matrix's counter; the last to arrive sums the partials in block
// order (the same bits whichever block it is) and publishes the sums by arriving once more; the others wait for that.
// Each step is then a few microseconds of arithmetic and one barrier, instead of a launch that reads and writes the
// panel, and a matrix the CholeskyQR panel already factored costs one launch whose blocks return at once.

struct ResidentArgs {
    qr2_panel_job p;
    double* part;        // per matrix: [2][blocks][SLOTS] partials, [2][SLOTS] their sums, [2][W] row j
    unsigned* arrived;   // per matrix: arrivals and publications so far (zero before the launch)
    int blocks;          // per matrix
    int rows_per_block;  // the stride of a column in shared memory
};

// doubles of one matrix's partials, sums and rows in the resident form's work
__host__ __device__ constexpr int64_t resident_part_doubles(int blocks) {
    return 2 * ((int64_t)blocks + 1) * SLOTS + 2 * W;
}

// Row i of T's column r (slarft, forward, columnwise), from row i's earlier entries and step r's sums (slot 1 + q:
// x_r's dot with column q below row r; slot SLOTS + q: row r's entry in column q).
__device__ __forceinline__ void t_column(double* t_row, int i, int r, double tau, double scal, const double* sums) {
    double s = 0.0;
    for (int q = i; q < r; ++q) s = fma(t_row[q], sums[SLOTS + q] + scal * sums[1 + q], s);
    t_row[r] = i == r ? tau : -tau * s;
}

__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__global__ void __launch_bounds__(THREADS) panel_tall_resident_kernel(ResidentArgs a) {
    extern __shared__ float tile[];  // the block's rows, column c from c rows_per_block
    __shared__ double red[THREADS / 32][SLOTS];
    __shared__ double sums[SLOTS + W];  // step r's: the tail's sum of squares, its dots, then row r
    __shared__ double coef[W];
    __shared__ double tsh[W][W + 1];  // block 0: T, row i by thread 32 + i
    __shared__ int last;
    const int64_t b = blockIdx.x / a.blocks;
    const int k = (int)(blockIdx.x % a.blocks), t = threadIdx.x, lane = t & 31, wid = t >> 5;
    if (a.p.done && a.p.done[b]) return;  // every block of the matrix returns: none of its barriers is reached
    const int m = a.p.m, w = a.p.w, kk = min(m, w), rpb = a.rows_per_block;
    const int row0 = (int)min((int64_t)m, (int64_t)k * rpb), rows = min(m - row0, rpb);  // blocks past m: no rows
    float* P = a.p.h + b * a.p.h_bs;
    const int64_t ld = a.p.ldh;
    double* part = a.part + b * resident_part_doubles(a.blocks);
    double* total = part + 2 * (int64_t)a.blocks * SLOTS;
    double* rowj = total + 2 * SLOTS;
    unsigned* arrived = a.arrived + b;

    for (int e = t; e < w * rows; e += THREADS) {
        const int c = e / rows, il = e % rows;
        tile[c * rpb + il] = P[(int64_t)c * ld + row0 + il];
    }
    if (k == 0 && a.p.v)  // rows of V above the panel's reflectors
        for (int i = t; i < a.p.v_row0 * w; i += THREADS)
            a.p.v[b * a.p.v_bs + (int64_t)(i / a.p.v_row0) * a.p.ldv + i % a.p.v_row0] = 0.f;
    __syncthreads();

    for (int j = 0; j <= kk; ++j) {
        // 1. reflector r = j - 1 from step r's published sums, as the per-launch form forms it
        const int r = j - 1;
        double scal = 0.0, beta = 0.0, tau = 0.0;
        if (r >= 0) {
            if (t < SLOTS + W)
                sums[t] = t < SLOTS ? __ldcg(total + (r & 1) * SLOTS + t) : __ldcg(rowj + (r & 1) * W + t - SLOTS);
            __syncthreads();
            const double sigma = sums[0], alpha = sums[SLOTS + r];
            beta = alpha;
            if (sigma > 0.0) householder_scalars(alpha, sigma, beta, tau, scal);  // false for 0 and NaN
            if (t > r && t < w) coef[t] = tau * (sums[SLOTS + t] + scal * sums[1 + t]);
            if (k == 0 && t == 0) a.p.tau[b * a.p.tau_bs + r] = (float)tau;
            __syncthreads();  // coef ready
        }

        // 2. this block's rows updated with reflector r, then the partials of reflector j in FP64
        double ss = 0.0;
        double acc[W];
#pragma unroll
        for (int c = 0; c < W; ++c) acc[c] = 0.0;
        for (int il = t; il < rows; il += THREADS) {
            const int i = row0 + il;
            float x[W];
#pragma unroll
            for (int c = 0; c < W; ++c) x[c] = c < w ? tile[c * rpb + il] : 0.f;  // the left ones for T
            if (r >= 0) {
                apply_reflector(x, i, r, w, scal, beta, coef);  // V is written from H's column at the end
#pragma unroll
                for (int c = 0; c < W; ++c)
                    if (c >= r && c < w) tile[c * rpb + il] = x[c];
            }
            if (j < kk && i == j)  // row j, for step j + 1
#pragma unroll
                for (int c = 0; c < W; ++c)
                    if (c < w) rowj[(j & 1) * W + c] = x[c];
            if (j < kk && i > j) add_partials(x, j, w, true, ss, acc);
        }
        // T's column r (slarft) in block 0, row i by thread 32 + i (warp 1, while warp 0 waits at the barrier below):
        // T[i][r] = -tau_r sum_q T[i][q] G[q][r] over i <= q < r, where G[q][r] = v_q . v_r = v_q's entry in row r
        // + scal_r (v_q . x_r below row r), from step r's sums (rewritten only after the barrier); T[r][r] = tau_r
        const bool t_builder = k == 0 && a.p.t && r >= 0 && t >= 32 && t - 32 <= r;
        if (t_builder && j == kk) t_column(tsh[t - 32], t - 32, r, tau, scal, sums);
        if (j == kk) break;

        // 3. the block's partials, then the matrix's barrier
        ss = warp_sum(ss);
#pragma unroll
        for (int c = 0; c < W; ++c) acc[c] = c != j && c < w ? warp_sum(acc[c]) : 0.0;
        if (lane == 0) {
            red[wid][0] = ss;
#pragma unroll
            for (int c = 0; c < W; ++c) red[wid][1 + c] = acc[c];
        }
        __syncthreads();
        double* mine = part + ((int64_t)(j & 1) * a.blocks + k) * SLOTS;
        if (t < SLOTS) {
            double s = 0.0;
            for (int q = 0; q < THREADS / 32; ++q) s += red[q][t];
            mine[t] = s;
        }
        const unsigned base = (unsigned)j * (unsigned)(a.blocks + 1);  // arrivals of the steps before
        __syncthreads();  // the partials and row j written (thread 0's fence below orders them for the GPU)
        if (t_builder) t_column(tsh[t - 32], t - 32, r, tau, scal, sums);
        if (t == 0) {
            __threadfence();
            last = atomicAdd(arrived, 1u) == base + a.blocks - 1;
            if (!last)
                while (load_acquire(arrived) < base + a.blocks + 1) __nanosleep(64);
            __threadfence();
        }
        __syncthreads();
        if (last) {  // sum every block's partials in block order and publish
            if (t < SLOTS) {
                const double* all = part + (int64_t)(j & 1) * a.blocks * SLOTS;
                double s = 0.0;
                for (int q = 0; q < a.blocks; ++q) s += __ldcg(all + (int64_t)q * SLOTS + t);
                total[(j & 1) * SLOTS + t] = s;
            }
            __syncthreads();
            if (t == 0) {
                __threadfence();
                atomicAdd(arrived, 1u);
            }
        }
    }

    __syncthreads();  // the last step's column, which other threads write back

    // 4. the block's rows into H, and V: v below the diagonal, 1 on it, 0 above
    float* V = a.p.v ? a.p.v + b * a.p.v_bs + a.p.v_row0 : nullptr;
    for (int e = t; e < w * rows; e += THREADS) {
        const int c = e / rows, i = row0 + e % rows;
        const float h = tile[c * rpb + e % rows];
        P[(int64_t)c * ld + i] = h;
        if (V && c < kk) V[(int64_t)c * a.p.ldv + i] = i > c ? h : i == c ? 1.f : 0.f;
    }
    if (k == 0 && a.p.t)  // T (ld w), zeros below its diagonal
        for (int e = t; e < w * w; e += THREADS) {
            const int i = e % w, c = e / w;
            a.p.t[b * a.p.t_bs + e] = i <= c && c < kk ? (float)tsh[i][c] : 0.f;
        }
}

// Blocks per matrix: about two waves over the GPU for the whole batch, none shorter than 512 rows (shorter
// chunks would spend their launch summing the other blocks' partials).
void plan(int64_t m, int64_t batch, int sms, int* blocks, int* rows_per_block) {
    int64_t nb = (2 * (int64_t)sms + batch - 1) / batch;
    const int64_t by_rows = (m + 511) / 512;
    if (nb > by_rows) nb = by_rows;
    if (nb > QR2_PANEL_TALL_MAX_BLOCKS) nb = QR2_PANEL_TALL_MAX_BLOCKS;
    if (nb < 1) nb = 1;
    // nb blocks even when the last ones get no rows (they add zeros): the count never falls as m falls, so
    // a workspace sized for a matrix's tallest panel holds every later panel's partials
    *rows_per_block = (int)((m + nb - 1) / nb);
    *blocks = (int)nb;
}

}  // namespace

extern "C" int qr2_panel_tall_holds(int64_t m, int64_t w, const qr2_device* dev) {
    (void)dev;
    return w >= 1 && w <= W && w <= m;
}

extern "C" int64_t qr2_panel_tall_work_floats(int64_t m, int64_t batch, const qr2_device* dev) {
    int blocks, rows;
    plan(m, batch, dev->sms, &blocks, &rows);
    // the resident form's (doubles, counted in floats, then a counter a matrix), which holds the per-launch form's;
    // a multiple of 4 floats, so that what the caller places after it stays 16-byte aligned
    return batch * resident_part_doubles(blocks) * 2 + (batch + 3) / 4 * 4;
}

namespace {

// The resident form's dynamic shared memory limit: what a block may opt in to, less the kernel's static arrays (one
// value for every call on a device).
size_t resident_smem_limit(const qr2_device* dev) {
    cudaFuncAttributes attr = {};
    if (cudaFuncGetAttributes(&attr, panel_tall_resident_kernel) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return (size_t)dev->smem_optin > attr.sharedSizeBytes ? (size_t)dev->smem_optin - attr.sharedSizeBytes : 0;
}

// The resident form's blocks a matrix where the batch's blocks all fit on the GPU at once with their rows in shared
// memory (at most `blocks`, the per-launch form's count, so the same work holds it), and its dynamic shared memory;
// 0 where not. A query CUDA refuses means 0 too, its error cleared (the next launch would report it as its own).
int resident_plan(const qr2_panel_job* p, int blocks, const qr2_device* dev, size_t* smem) {
    int coop = 0, per_sm = 0;
    if (cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev->index) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    const size_t limit = coop ? resident_smem_limit(dev) : 0;
    if (!limit) return 0;
    if (cudaFuncSetAttribute(panel_tall_resident_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)limit) !=
        cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    for (int tries = 0; tries < 4 && blocks >= 1; ++tries) {
        const int64_t rows = (p->m + blocks - 1) / blocks;
        *smem = sizeof(float) * (size_t)p->w * (size_t)rows;
        if (*smem > limit) return 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, panel_tall_resident_kernel, THREADS, *smem) !=
            cudaSuccess) {
            (void)cudaGetLastError();
            return 0;
        }
        const int64_t resident = (int64_t)per_sm * dev->sms;
        if (p->batch * blocks <= resident) return blocks;
        blocks = (int)(resident / p->batch);  // fewer, taller blocks: more shared memory each, so check again
    }
    return 0;
}

}  // namespace

extern "C" int qr2_panel_tall_resident_blocks(const qr2_panel_job* p, const qr2_device* dev) {
    int blocks, rows;
    size_t smem;
    plan(p->m, p->batch, dev->sms, &blocks, &rows);
    return resident_plan(p, blocks, dev, &smem);
}

extern "C" int qr2_panel_tall_builds_t(const qr2_panel_job* p, const qr2_device* dev) {
    return p->t && p->batch > 0 && p->m > 0 && p->w > 0 && qr2_panel_tall_holds(p->m, p->w, dev) &&
           qr2_panel_tall_resident_blocks(p, dev) > 0;
}

namespace {

int run_tall(const qr2_panel_job* p, void* work, const qr2_device* dev, void* stream, bool resident) {
    if (p->batch <= 0 || p->m <= 0 || p->w <= 0) return 0;
    if (!qr2_panel_tall_holds(p->m, p->w, dev))
        return qr2_record_error("panel_tall", "panel wider than 32 columns or than tall");
    TallArgs a = {};
    a.p = *p;
    a.part = (double*)work;
    plan(p->m, p->batch, dev->sms, &a.blocks, &a.rows_per_block);
    size_t smem = 0;
    if (const int blocks = resident ? resident_plan(p, a.blocks, dev, &smem) : 0) {
        ResidentArgs r = {};
        r.p = *p;
        r.part = (double*)work;
        r.arrived = (unsigned*)(r.part + p->batch * resident_part_doubles(blocks));
        r.blocks = blocks;
        r.rows_per_block = (int)((p->m + blocks - 1) / blocks);
        QR2_CHECK_CUDA(cudaMemsetAsync(r.arrived, 0, sizeof(unsigned) * (size_t)p->batch, (cudaStream_t)stream),
                       "panel_tall counters");
        Qr2Launch how;
        how.cooperative = true;
        how.grid = dim3((unsigned)(p->batch * blocks));
        how.block = dim3(THREADS);
        how.smem = smem;
        how.smem_limit = resident_smem_limit(dev);
        return qr2_launch(panel_tall_resident_kernel, how, stream, "panel_tall resident launch", r);
    }
    const int kk = p->m < p->w ? p->m : p->w;
    Qr2Launch how;
    how.pdl = true;  // the kernel starts with qr2_follow_previous_kernel
    how.grid = dim3((unsigned)(p->batch * a.blocks));
    how.block = dim3(THREADS);
    for (int j = 0; j <= kk; ++j) {
        a.j = j;
        if (qr2_launch(panel_tall_kernel, how, stream, "panel_tall launch", a)) return 1;
    }
    return 0;
}

}  // namespace

extern "C" int qr2_panel_tall_run(const qr2_panel_job* p, void* work, const qr2_device* dev, void* stream) {
    return run_tall(p, work, dev, stream, true);
}

extern "C" int qr2_panel_tall_run_launches(const qr2_panel_job* p, void* work, const qr2_device* dev, void* stream) {
    return run_tall(p, work, dev, stream, false);
}
