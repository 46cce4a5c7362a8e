// warp_qr.cu - Householder QR of small matrices (n <= 32 with m <= 96, n <= 64 with m <= 64), one warp per
// matrix and one lane per column: lane l holds columns l and l + 32 (CPL of them) whole, MR rows each, in
// registers.
//
// Why lanes own columns here: with rows across lanes (register_qr.cu) every reflector costs ~25 dependent
// warp shuffles (norm, look-ahead dot, the strip's dots). With columns in lanes the dots v . a_c are a
// lane's own FMAs, and the only cross-lane steps are the owner's tail sum of squares (one shuffle) and
// its column, which every lane reads from shared memory as broadcasts (each lane republishes its column
// there after every update). Every lane computes slarfg's scalars from those, so nothing else moves; the
// reflector is applied unscaled (u_r = alpha - beta, tau' = tau / (alpha - beta)^2) and the owner's
// scaling is deferred to the output. Two __syncwarp per reflector order it. Rows wholly above the
// reflector are skipped in groups of four (the row index is warp-uniform: uniform branches).
//
// Measured (H200, docs/WORKLOG.md): ~900 cycles per reflector with one warp per SM (latency-bound), so
// the route table uses it only for large batches, where four matrices share a block.
//
// H (column-major) is staged through shared memory so that its writes are coalesced.
// As in register_qr.cu the matrix is scaled by a power of two to max|a| in [0.5, 1) (exact), and a
// column so small that its FP32 squares lose precision gets its scalars in FP64.
#include <float.h>

#include "common.cuh"

namespace {

constexpr unsigned FULL = 0xffffffffu;

// Shared memory per warp: one column of LD = MR + 4 floats per lane column (float4 rows; the stride of
// 4 mod 32 words keeps each 8-lane phase of a float4 store on distinct banks). Column c holds lane c's
// column as of its last update: that is how the owner of reflector c publishes it. At the end it stages
// H, so that the global writes are coalesced.
template <int MR, int CPL>
struct WarpSmem {
    static constexpr int LD = MR + 4;
    static constexpr int FLOATS = 32 * CPL * LD;
};

// Sum of squares of a below row r: the tail that reflector r annihilates.
template <int MR>
__device__ __forceinline__ float tail_squares(const float (&a)[MR], int r) {
    float ss[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int i = 0; i < MR; ++i)
        if ((i | 3) > r) ss[i & 3] = i > r ? fmaf(a[i], a[i], ss[i & 3]) : ss[i & 3];
    return (ss[0] + ss[1]) + (ss[2] + ss[3]);
}

// Stores the row groups of a that reach row `from` or below into its shared-memory column.
template <int MR>
__device__ __forceinline__ void store_column(const float (&a)[MR], float* col, int from) {
#pragma unroll
    for (int g = 0; g < MR; g += 4)
        if ((g | 3) >= from) reinterpret_cast<float4*>(col)[g / 4] = make_float4(a[g], a[g + 1], a[g + 2], a[g + 3]);
}

// a -= tau_u (u . a) u over rows >= r; u is the owner's column, zero above r within r's group of four
// (groups wholly above r are skipped), and u_r comes as an argument. With NEXT, returns the updated a's
// sum of squares below row r + 1: the next reflector's tail, which its owner needs (every lane computes
// its own; SIMT makes that free).
template <int MR, bool NEXT>
__device__ __forceinline__ float apply_reflector(float (&a)[MR], const float* u, float u_r, float tau_u, int r) {
    float d[4] = {0.f, 0.f, 0.f, 0.f};
    float4 w[MR / 4];
#pragma unroll
    for (int g = 0; g < MR; g += 4) {
        if ((g | 3) < r) continue;
        w[g / 4] = reinterpret_cast<const float4*>(u)[g / 4];
        if (g <= r) {  // u_r is not in shared memory (the column still holds alpha there): every lane has it
            w[g / 4].x = g == r ? u_r : w[g / 4].x;
            w[g / 4].y = g + 1 == r ? u_r : w[g / 4].y;
            w[g / 4].z = g + 2 == r ? u_r : w[g / 4].z;
            w[g / 4].w = g + 3 == r ? u_r : w[g / 4].w;
        }
        d[0] = fmaf(w[g / 4].x, a[g], d[0]);
        d[1] = fmaf(w[g / 4].y, a[g + 1], d[1]);
        d[2] = fmaf(w[g / 4].z, a[g + 2], d[2]);
        d[3] = fmaf(w[g / 4].w, a[g + 3], d[3]);
    }
    const float s = tau_u * ((d[0] + d[1]) + (d[2] + d[3]));
    float ss[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int g = 0; g < MR; g += 4) {
        if ((g | 3) < r) continue;
        a[g] = fmaf(-s, w[g / 4].x, a[g]);
        a[g + 1] = fmaf(-s, w[g / 4].y, a[g + 1]);
        a[g + 2] = fmaf(-s, w[g / 4].z, a[g + 2]);
        a[g + 3] = fmaf(-s, w[g / 4].w, a[g + 3]);
        if (NEXT) {
            if (g > r + 1) {
#pragma unroll
                for (int q = 0; q < 4; ++q) ss[q] = fmaf(a[g + q], a[g + q], ss[q]);
            } else {
#pragma unroll
                for (int q = 0; q < 4; ++q) ss[q] = g + q > r + 1 ? fmaf(a[g + q], a[g + q], ss[q]) : ss[q];
            }
        }
    }
    return (ss[0] + ss[1]) + (ss[2] + ss[3]);
}

template <int MR, int CPL>
__global__ void __launch_bounds__(128) warp_qr_kernel(qr2_whole_qr_args a) {
    extern __shared__ __align__(16) float smem[];
    using S = WarpSmem<MR, CPL>;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t mat = (int64_t)blockIdx.x * (blockDim.x >> 5) + warp;
    if (mat >= a.batch) return;  // whole warps only: nothing below synchronises more than one warp
    const int m = a.m, n = a.n, K = m < n ? m : n;
    float* tile = smem + warp * S::FLOATS;

    // in: straight into registers, every load in flight at once (any strides)
    const float* src = a.src + mat * a.src_bs;
    float x[CPL][MR];
    float amax = 0.f;
#pragma unroll
    for (int k = 0; k < CPL; ++k) {
        const int c = lane + 32 * k;
#pragma unroll
        for (int i = 0; i < MR; ++i) {
            x[k][i] = i < m && c < n ? src[i * a.src_rs + c * a.src_cs] : 0.f;
            amax = fmaxf(amax, fabsf(x[k][i]));
        }
    }
    // power-of-two scaling from the matrix's max |a| (NaN and Inf inputs: no scaling)
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(FULL, amax, off));
    int expo = 0;
    if (amax > 0.f && amax <= FLT_MAX) frexpf(amax, &expo);
#pragma unroll
    for (int k = 0; k < CPL; ++k) {
#pragma unroll
        for (int i = 0; i < MR; ++i) x[k][i] = scalbnf(x[k][i], -expo);
        store_column(x[k], tile + (lane + 32 * k) * S::LD, 0);
    }

    // Reflector r is LAPACK slarfg's on column r (lane r & 31, slot p = r / 32; p compile-time, so that
    // registers are never indexed at run time). Every lane computes its scalars from the owner's alpha
    // (its published column) and tail sum of squares (a shuffle), so nothing else is broadcast. It is
    // applied unscaled: u = the column with u_r = alpha - beta (dd, which every lane holds),
    // tau_u = tau / (alpha - beta)^2; the owner zeroes the rows above r in u's first group, defers its own
    // scaling to the output (scale[p]) and keeps its diagonal (diag[p]). Every lane then applies it to
    // its columns right of r and publishes them again.
    float diag[CPL], scale[CPL], tau_mine[CPL];
    bool tiny[CPL];
#pragma unroll
    for (int p = 0; p < CPL; ++p) {
        diag[p] = 0.f;
        scale[p] = 1.f;
        tau_mine[p] = 0.f;
        tiny[p] = false;
        float ss = tail_squares(x[p], 32 * p);
        const int r_end = K < 32 * (p + 1) ? K : 32 * (p + 1);
        for (int r = 32 * p; r < r_end; ++r) {
            const int owner = r & 31;
            const bool own = lane == owner;
            float* u = tile + r * S::LD;
            __syncwarp();  // the owner's column, published in the previous step
            const float ss_o = __shfl_sync(FULL, ss, owner);
            const float alpha = u[r];
            float tau, tau_u, beta, dd;
            if (ss_o >= 0x1p-100f) {
                const float t = fmaf(alpha, alpha, ss_o);
                const float rn = rsqrtf(t);
                beta = alpha >= 0.f ? -t * rn : t * rn;
                dd = alpha - beta;  // |dd| = |alpha| + ||x||: no cancellation
                const float rd = __fdividef(1.f, dd);
                tau = fabsf(dd) * rn;
                tau_u = rn * fabsf(rd);
                if (own) scale[p] = rd;
            } else {
                // Warp-uniform (every lane holds the owner's ss): a tail whose FP32 squares lose precision
                // (below 2^-100 of a matrix scaled to max 1), or a zero one. FP64 over the published
                // column, every lane alike; v is scaled in place there (its scale may not fit FP32). A
                // zero tail gives tau = 0 and leaves the column as it is (LAPACK).
                double ss64 = 0.0, beta64, tau64, scal64;
                for (int i = r + 1; i < MR; ++i) ss64 = fma((double)u[i], (double)u[i], ss64);
                tau = tau_u = 0.f;
                beta = alpha;
                if (ss64 > 0.0) {
                    householder_scalars((double)alpha, ss64, beta64, tau64, scal64);
                    __syncwarp();  // everyone has read u before the owner scales it
                    if (own)
                        for (int i = r + 1; i < MR; ++i) u[i] = (float)(u[i] * scal64);
                    tau = tau_u = (float)tau64;
                    beta = (float)beta64;
                    if (own) tiny[p] = true;
                }
                dd = 1.f;
            }
            if (own) {  // u above r in r's group of four reads as zero (nobody reads those rows before the
                        // next __syncwarp; u_r itself stays alpha, read above, and is passed as dd)
                const int g0 = r & ~3;
                if (g0 + 0 < r) u[g0] = 0.f;
                if (g0 + 1 < r) u[g0 + 1] = 0.f;
                if (g0 + 2 < r) u[g0 + 2] = 0.f;
                diag[p] = beta;
                tau_mine[p] = tau;
            }
            __syncwarp();
            const bool right = lane > owner;
            ss = apply_reflector<MR, true>(x[p], u, dd, right ? tau_u : 0.f, r);
            if (right) store_column(x[p], tile + (lane + 32 * p) * S::LD, r + 1);
#pragma unroll
            for (int k = p + 1; k < CPL; ++k) {
                apply_reflector<MR, false>(x[k], u, dd, tau_u, r);
                store_column(x[k], tile + (lane + 32 * k) * S::LD, r + 1);
            }
        }
    }
    __syncwarp();  // every lane is done reading the last reflector before columns are overwritten

    // out: tau; R above the diagonal and beta on it scaled back, v = column * scale below it (columns
    // right of the last reflector, in wide matrices, are all R); staged for coalesced column-major H
    float* tau_out = a.tau + mat * K;
#pragma unroll
    for (int k = 0; k < CPL; ++k) {
        const int c = lane + 32 * k;
        const bool factored = c < K;
        if (factored) tau_out[c] = tau_mine[k];
        if (tiny[k]) {  // its v was scaled in FP64, in shared memory
#pragma unroll
            for (int i = 0; i < MR; ++i)
                if (i > c) x[k][i] = tile[c * S::LD + i];
        }
#pragma unroll
        for (int i = 0; i < MR; ++i) {
            float val = i < c || !factored ? scalbnf(x[k][i], expo) : x[k][i] * scale[k];
            x[k][i] = i == c && factored ? scalbnf(diag[k], expo) : val;
        }
        store_column(x[k], tile + c * S::LD, 0);
    }
    __syncwarp();
    float* h = a.h + mat * (int64_t)m * n;
#pragma unroll 4
    for (int c = 0; c < n; ++c)
        for (int i = lane; i < m; i += 32) h[(int64_t)c * m + i] = tile[c * S::LD + i];
}

// Rows per lane column: m rounded up to the next instantiated size.
int rows_for(int64_t m, int cpl) {
    static const int sizes[] = {8, 16, 32, 48, 64, 96};
    for (int s : sizes)
        if (m <= s && s * cpl <= 128) return s;
    return 0;
}

template <int MR, int CPL>
int launch(const qr2_whole_qr_args* a, void* stream) {
    using S = WarpSmem<MR, CPL>;
    // One warp per block while the batch leaves SMs idle (one matrix per SM is the fastest); beyond
    // that, up to four matrices per block within the default 48 KB of shared memory.
    const int64_t per_warp = (int64_t)S::FLOATS * 4;
    int wpb = a->batch <= 132 ? 1 : a->batch <= 264 ? 2 : 4;
    while (wpb > 1 && wpb * per_warp > 48 * 1024) wpb /= 2;
    const int64_t blocks = (a->batch + wpb - 1) / wpb;
    warp_qr_kernel<MR, CPL><<<(unsigned)blocks, 32 * wpb, (size_t)(wpb * per_warp), (cudaStream_t)stream>>>(*a);
    QR2_CHECK_LAUNCH("warp_qr launch");
    return 0;
}

template <int CPL>
int launch_rows(const qr2_whole_qr_args* a, void* stream) {
    switch (rows_for(a->m, CPL)) {
        case 8: return launch<8, CPL>(a, stream);
        case 16: return launch<16, CPL>(a, stream);
        case 32: return launch<32, CPL>(a, stream);
        case 48: return launch<48, CPL>(a, stream);
        case 64: return launch<64, CPL>(a, stream);
        default:
            if constexpr (CPL == 1) return launch<96, 1>(a, stream);
            return 1;  // unreachable: qr2_warp_qr_supported
    }
}

}  // namespace

extern "C" int qr2_warp_qr_supported(int64_t m, int64_t n) {
    return m >= 1 && n >= 1 && n <= QR2_WARP_QR_MAX_N && rows_for(m, n <= 32 ? 1 : 2) > 0;
}

extern "C" int qr2_warp_qr(const qr2_whole_qr_args* a, void* stream) {
    if (a->batch <= 0 || a->m <= 0 || a->n <= 0) return 0;
    if (!qr2_warp_qr_supported(a->m, a->n))
        return qr2_record_error("warp_qr", "matrix too large for one warp's registers");
    return a->n <= 32 ? launch_rows<1>(a, stream) : launch_rows<2>(a, stream);
}
