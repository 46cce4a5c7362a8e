// shared_memory.cu - the shared_memory family: unblocked Householder QR (LAPACK sgeqr2) of an m x w matrix held in one thread
// block's shared memory, one block per matrix: the `shared_memory` configuration (tall matrices of a few columns),
// the entire factorisation in one launch.
//
// Storage: column-major with an odd leading dimension (fewer bank conflicts when a warp touches several
// columns).
//
// Reflector j (all threads agree on every scalar because they read the same reduced values):
//   1. alpha = P[j][j]; sigma = ||P[j+1:, j]||^2, accumulated in FP64 so that no finite FP32 input
//      overflows or underflows; beta = -sign(alpha) sqrt(alpha^2 + sigma), tau = (beta - alpha)/beta,
//      v = x / (alpha - beta) (slarfg). sigma == 0 gives tau = 0 and leaves the column alone.
//   2. Barrier. Columns c > j are updated by column groups of R lanes (R a power of two <= 32,
//      picked so that every group has a column): each group forms s = tau (v . P[:, c]) with a
//      partial warp shuffle over its R lanes and applies P[:, c] -= s v. The group that owns column
//      j+1 also accumulates that column's next sigma, so step 1 of the next reflector needs no
//      reduction of its own.
//   3. Barrier.
// Two barriers per reflector; one extra block reduction only when a reflector is the identity.
#include "launch.cuh"
#include "reduce.cuh"

namespace {

// The matrix as read (any strides) and as written (column-major, ld ldd).
struct Panel {
    int64_t batch;
    int m, w;
    const float* src;
    int64_t src_rs, src_cs, src_bs;
    float* dst;
    int64_t ldd, dst_bs;
    float* tau;
    int64_t tau_bs;
};

constexpr int MAX_THREADS = 512;

__device__ __forceinline__ int64_t panel_ld(int m) { return (int64_t)(m | 1); }

// Sum of squares of P[i0:m] (FP64), reduced over the whole block; every thread gets the result.
__device__ double block_sum_squares(const float* p, int i0, int m, double* red) {
    const int tid = threadIdx.x, nwarps = blockDim.x >> 5;
    double ss = 0.0;
    for (int i = i0 + tid; i < m; i += blockDim.x) {
        const double x = p[i];
        ss += x * x;
    }
    ss = warp_sum(ss);
    if ((tid & 31) == 0) red[tid >> 5] = ss;
    __syncthreads();
    double total = 0.0;
    for (int k = 0; k < nwarps; ++k) total += red[k];
    __syncthreads();  // red is reused by the caller's next write
    return total;
}

// Reduction over the R consecutive lanes of a column group (R a power of two <= 32).
__device__ __forceinline__ float group_sum(float x, int R) {
    for (int off = R >> 1; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
    return x;
}
__device__ __forceinline__ double group_sum(double x, int R) {
    for (int off = R >> 1; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
    return x;
}

__global__ void __launch_bounds__(MAX_THREADS) shared_memory_kernel(Panel a) {
    extern __shared__ float smem[];
    __shared__ double red[MAX_THREADS / 32];

    const int tid = threadIdx.x;
    const int nthreads = blockDim.x;
    const int64_t b = blockIdx.x;
    const int m = a.m, w = a.w, kk = min(m, w);
    const float* src = a.src + b * a.src_bs;
    float* dst = a.dst + b * a.dst_bs;
    float* P = smem;
    const int64_t ld = panel_ld(m);

    for (int64_t idx = tid; idx < (int64_t)m * w; idx += nthreads) {
        const int64_t c = idx / m, i = idx - c * m;
        P[c * ld + i] = src[i * a.src_rs + c * a.src_cs];
    }
    __syncthreads();

    double sigma = kk > 0 ? block_sum_squares(P, 1, m, red) : 0.0;

    for (int j = 0; j < kk; ++j) {
        float* pj = P + j * ld;
        const double alpha = pj[j];
        double beta = alpha, tau = 0.0, scal = 0.0;
        if (sigma > 0.0) {  // false for sigma == 0 and for NaN: the column is left as it is
            beta = -copysign(sqrt(alpha * alpha + sigma), alpha);
            tau = (beta - alpha) / beta;
            scal = 1.0 / (alpha - beta);
            for (int i = j + 1 + tid; i < m; i += nthreads) pj[i] = (float)(pj[i] * scal);
        }
        if (tid == 0) a.tau[b * a.tau_bs + j] = (float)tau;
        __syncthreads();

        const int ncols = w - j - 1;
        bool next_sigma_ready = false;
        if (tau != 0.0 && ncols > 0) {
            // R lanes per column group: as many groups as columns, at most 32 lanes per column.
            int R = 32;
            while (R > 1 && nthreads / R < ncols) R >>= 1;
            const int ngroups = nthreads / R;
            const int r = tid & (R - 1), g = tid / R;
            const float ftau = (float)tau;
            for (int c0 = j + 1; c0 < w; c0 += ngroups) {
                const int c = c0 + g;
                const bool active = c < w;
                float* pc = P + (int64_t)(active ? c : j) * ld;
                float s = 0.f;
                if (active) {
                    if (r == 0) s = pc[j];
                    for (int i = j + 1 + r; i < m; i += R) s += pj[i] * pc[i];
                }
                s = group_sum(s, R) * ftau;
                double ss = 0.0;
                if (active) {
                    if (r == 0) pc[j] -= s;
                    for (int i = j + 1 + r; i < m; i += R) {
                        const float x = pc[i] - s * pj[i];
                        pc[i] = x;
                        if (c == j + 1 && i > j + 1) ss += (double)x * x;
                    }
                }
                if (c0 == j + 1) {  // round 0: group 0 owns column j+1
                    ss = group_sum(ss, R);
                    if (tid == 0) red[0] = ss;
                }
            }
            next_sigma_ready = true;
        }
        if (tid == 0) pj[j] = (float)beta;
        __syncthreads();

        if (j + 1 < kk) sigma = next_sigma_ready ? red[0] : block_sum_squares(P + (j + 1) * ld, j + 2, m, red);
    }

    for (int64_t idx = tid; idx < (int64_t)m * w; idx += nthreads) {
        const int64_t c = idx / m, i = idx - c * m;
        dst[c * a.ldd + i] = P[c * ld + i];
    }
}

}  // namespace

static constexpr int64_t STATIC_SMEM_BYTES = sizeof(double) * (MAX_THREADS / 32);  // the kernel's `red`

static int64_t panel_smem_bytes(int64_t m, int64_t w) { return (m | 1) * w * (int64_t)sizeof(float); }

// Static shared memory of the kernel (the reduction scratch) comes out of the same opt-in budget.
extern "C" int qr2_shared_memory_holds(int64_t m, int64_t n, int cluster, const qr2_device* dev) {
    return cluster == 1 && m >= 1 && n >= 1 && panel_smem_bytes(m, n) + STATIC_SMEM_BYTES <= dev->smem_optin;
}

extern "C" int qr2_shared_memory_run(const qr2_whole_qr_args* w, int cluster, const qr2_device* dev, void* stream) {
    if (w->batch <= 0 || w->m <= 0 || w->n <= 0) return 0;
    if (!qr2_shared_memory_holds(w->m, w->n, cluster, dev))
        return qr2_record_error("shared_memory", "matrix too large for one block's shared memory");
    const int kmin = w->m < w->n ? w->m : w->n;
    Panel a = {};
    a.batch = w->batch, a.m = w->m, a.w = w->n;
    a.src = w->src, a.src_rs = w->src_rs, a.src_cs = w->src_cs, a.src_bs = w->src_bs;
    a.dst = w->h, a.ldd = w->m, a.dst_bs = (int64_t)w->m * w->n;
    a.tau = w->tau, a.tau_bs = kmin;
    const int64_t cells = (int64_t)w->m * w->n;
    Qr2Launch how;
    how.grid = dim3((unsigned)w->batch);
    how.block = dim3(cells >= 8192 ? 512 : cells >= 2048 ? 256 : 128);
    how.smem = (size_t)panel_smem_bytes(w->m, w->n);
    how.static_smem = STATIC_SMEM_BYTES;
    return qr2_launch(shared_memory_kernel, how, stream, "shared_memory launch", a);
}
