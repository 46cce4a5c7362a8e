// warp.cu - Householder QR of small matrices (n <= 32 with m <= 96, n <= 64 with m <= 64), one warp per
// matrix and one lane per column: lane l holds columns l and l + 32 (CPL of them) whole, MR rows each, in
// registers.
//
// Why lanes own columns here: with rows across lanes (registers.cu) every reflector costs ~25 dependent
// warp shuffles (norm, look-ahead dot, the strip's dots). With columns in lanes the dots v . a_c are a
// lane's own FMAs, and the only cross-lane steps are the owner's tail sum of squares (one shuffle) and
// its column, which the owner publishes in shared memory and every lane reads as broadcasts. Every lane
// computes slarfg's scalars from those, so nothing else moves and one __syncwarp per reflector orders it
// all; the reflector is applied unscaled (u_r = alpha - beta, tau' = tau / (alpha - beta)^2) and the
// owner's scaling is deferred to the output.
//
// Rows are handled in groups of four (float4 in shared memory). The loop over groups is unrolled, so that
// every mask of a row group is known at compile time (only the reflector's own group takes selects); the
// four reflectors of a group share one copy of the code, which keeps the kernel small enough for the
// instruction cache. Measured at 20 x 32 x 32 (docs/worklog.md): a copy per reflector 15.6 us (with the FP64
// path still inline), a run-time loop 30.5 us, groups unrolled 11.0 us.
//
// H (column-major) is staged through shared memory so that its writes are coalesced.
// As in registers.cu the matrix is scaled by a power of two to max|a| in [0.5, 1) (exact), and a
// column so small that its FP32 squares lose precision gets its scalars in FP64.
#include <float.h>

#include "launch.cuh"
#include "reduce.cuh"
#include "reflector.cuh"

namespace {

constexpr unsigned FULL = 0xffffffffu;

// Shared memory per warp: one column of LD = MR + 4 floats per lane column (float4 rows; the stride of
// 4 mod 32 words keeps each 8-lane phase of a float4 store on distinct banks). Column c is where the owner
// of reflector c publishes it; at the end the tile stages H, so that the global writes are coalesced.
template <int MR, int CPL>
struct WarpSmem {
    static constexpr int LD = MR + 4;
    static constexpr int FLOATS = 32 * CPL * LD;
};

// Stores the row groups of four of a from group g0 on into its shared-memory column.
template <int MR>
__device__ __forceinline__ void store_column(const float (&a)[MR], float* col, int g0) {
#pragma unroll
    for (int g = 0; g < MR; g += 4)
        if (g >= g0) reinterpret_cast<float4*>(col)[g / 4] = make_float4(a[g], a[g + 1], a[g + 2], a[g + 3]);
}

// The helpers below take the reflector's row r and its group's first row g0 = r & ~3. Where the groups are
// unrolled g0 is a compile-time constant, so every group but g0's is resolved by the compiler.

// The published column of reflector r with rows r and above zero (alpha, row r, is read on its own): only
// the groups from g0 on are read, and the rows up to r in g0's group masked (so the owner stores whole groups).
template <int MR>
__device__ __forceinline__ void read_column(float (&u)[MR], const float* col, int r, int g0) {
#pragma unroll
    for (int g = 0; g < MR; g += 4) {
        if (g < g0) {
            u[g] = u[g + 1] = u[g + 2] = u[g + 3] = 0.f;
            continue;
        }
        const float4 q = reinterpret_cast<const float4*>(col)[g / 4];
        u[g] = q.x;
        u[g + 1] = q.y;
        u[g + 2] = q.z;
        u[g + 3] = q.w;
        if (g == g0) {
#pragma unroll
            for (int i = 0; i < 4; ++i) u[g + i] = g + i <= r ? 0.f : u[g + i];
        }
    }
}

// a[r].
template <int MR>
__device__ __forceinline__ float get_row(const float (&a)[MR], int r, int g0) {
    float v = 0.f;
#pragma unroll
    for (int g = 0; g < MR; g += 4) {
        if (g != g0) continue;
#pragma unroll
        for (int i = 0; i < 4; ++i) v = g + i == r ? a[g + i] : v;
    }
    return v;
}

// a[r] = value.
template <int MR>
__device__ __forceinline__ void set_row(float (&a)[MR], int r, int g0, float value) {
#pragma unroll
    for (int g = 0; g < MR; g += 4) {
        if (g != g0) continue;
#pragma unroll
        for (int i = 0; i < 4; ++i) a[g + i] = g + i == r ? value : a[g + i];
    }
}

// Sum of squares of a below row s, for s in groups g0 or g0 + 4 (rows of those two groups are masked).
template <int MR>
__device__ __forceinline__ float squares_below(const float (&a)[MR], int s, int g0) {
    float ss[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int g = 0; g < MR; g += 4) {
        if (g < g0) continue;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            if (g <= g0 + 4) ss[i] = g + i > s ? fmaf(a[g + i], a[g + i], ss[i]) : ss[i];
            else ss[i] = fmaf(a[g + i], a[g + i], ss[i]);
        }
    }
    return (ss[0] + ss[1]) + (ss[2] + ss[3]);
}

// a -= tau_u (u . a) u with u_r = dd and u's rows below r in u (zero at and above r). The dot over the rows
// below r does not wait for dd, so it overlaps the scalars that dd waits for. With NEXT, returns the updated
// a's sum of squares below row r + 1: the next reflector's tail, which its owner needs (every lane computes
// its own; SIMT makes that free).
template <int MR, bool NEXT>
__device__ __forceinline__ float apply_reflector(float (&a)[MR], const float (&u)[MR], float dd, float tau_u,
                                                 int r, int g0) {
    float d[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int g = 0; g < MR; g += 4) {
        if (g < g0) continue;
#pragma unroll
        for (int i = 0; i < 4; ++i) d[i] = fmaf(u[g + i], a[g + i], d[i]);
    }
    const float ar = get_row(a, r, g0);
    const float s = tau_u * fmaf(dd, ar, (d[0] + d[1]) + (d[2] + d[3]));
    set_row(a, r, g0, fmaf(-s, dd, ar));
#pragma unroll
    for (int g = 0; g < MR; g += 4) {
        if (g < g0) continue;
#pragma unroll
        for (int i = 0; i < 4; ++i) a[g + i] = fmaf(-s, u[g + i], a[g + i]);
    }
    return NEXT ? squares_below(a, r + 1, g0) : 0.f;
}

// The rare reflector whose tail's FP32 squares lose precision (below 2^-100 of a matrix scaled to max 1) or
// vanish: its scalars in FP64 from the published column of `rows` rows, and v scaled there in place by the
// owner (its scale may not fit FP32). Returns (tau, beta); a zero tail gives tau = 0 and leaves the column
// as it is (LAPACK). Kept out of line: it would double the size of the unrolled code.
__device__ __noinline__ float2 tiny_reflector(float* col, int r, int rows, float alpha, bool own) {
    double ss = 0.0, beta, tau, scal;
    for (int i = r + 1; i < rows; ++i) ss = fma((double)col[i], (double)col[i], ss);
    if (ss == 0.0) return make_float2(0.f, alpha);  // warp-uniform: every lane summed the same column
    householder_scalars((double)alpha, ss, beta, tau, scal);
    __syncwarp();  // every lane has read the column
    if (own)
        for (int i = r + 1; i < rows; ++i) col[i] = (float)(col[i] * scal);
    __syncwarp();
    return make_float2((float)tau, (float)beta);
}

// What a lane holds: its columns (slot p is column lane + 32 p), and per slot the owner's diagonal, scale,
// tau and whether v was scaled in shared memory (tiny); ss is its slot's column's sum of squares below the
// current reflector's row (the owner's is shuffled).
template <int MR, int CPL>
struct LaneState {
    float x[CPL][MR];
    float diag[CPL], scale[CPL], tau[CPL];
    bool tiny[CPL];
    float ss;
};

// Reflector r (column r: lane r & 31, slot P; g0 = r & ~3). Only its owner published the column (after
// applying reflector r - 1); every lane reads it, gets alpha from it and the tail's sum of squares from the
// owner (a shuffle), and computes the scalars itself. It is applied unscaled: u = the column with
// u_r = alpha - beta (dd), tau_u = tau / (alpha - beta)^2; the owner defers its own scaling to the output
// (scale) and keeps its diagonal (diag).
template <int MR, int CPL, int P>
__device__ __forceinline__ void reflector_step(LaneState<MR, CPL>& st, float* tile, int r, int g0, int lane, int K) {
    using S = WarpSmem<MR, CPL>;
    const int owner = r & 31;
    const bool own = lane == owner;
    float* col = tile + r * S::LD;
    __syncwarp();  // the owner's column is published
    const float ss_o = __shfl_sync(FULL, st.ss, owner);
    const float alpha = col[r];
    float u[MR];
    read_column(u, col, r, g0);
    float tau, tau_u, beta, dd;
    if (ss_o >= QR2_TINY_SUM_OF_SQUARES) {
        const UnscaledReflector f = unscaled_reflector(alpha, ss_o);
        beta = f.beta, dd = f.dd, tau = f.tau, tau_u = f.tau_u;
        if (own) st.scale[P] = f.rd;
    } else {  // warp-uniform: every lane holds the owner's ss
        const float2 tb = tiny_reflector(col, r, MR, alpha, own);
        tau = tau_u = tb.x;
        beta = tb.y;
        dd = 1.f;
        read_column(u, col, r, g0);  // v, scaled
        if (own) st.tiny[P] = true;
    }
    if (own) {
        st.diag[P] = beta;
        st.tau[P] = tau;
    }
    st.ss = apply_reflector<MR, true>(st.x[P], u, dd, lane > owner ? tau_u : 0.f, r, g0);
#pragma unroll
    for (int k = P + 1; k < CPL; ++k) apply_reflector<MR, false>(st.x[k], u, dd, tau_u, r, g0);
    // the next reflector's owner publishes its column, now up to date
    const int next = r + 1;
    if (next < K) {
        if (owner < 31) {
            if (lane == owner + 1) store_column(st.x[P], tile + next * S::LD, next & ~3);
        } else if (P + 1 < CPL && lane == 0) {
            store_column(st.x[P + 1 < CPL ? P + 1 : P], tile + next * S::LD, next);
        }
    }
}

// The reflectors of slot P, group of four by group of four: the groups are unrolled (G a compile-time
// constant), the four reflectors of a group share its code.
template <int MR, int CPL, int P, int G>
__device__ __forceinline__ void slot_steps(LaneState<MR, CPL>& st, float* tile, int lane, int K) {
    if constexpr (4 * G < 32 && 32 * P + 4 * G < MR) {  // no reflector starts below the last row
        constexpr int g0 = 32 * P + 4 * G;
        const int end = K < g0 + 4 ? K : g0 + 4;
#pragma unroll 1
        for (int r = g0; r < end; ++r) reflector_step<MR, CPL, P>(st, tile, r, g0, lane, K);
        slot_steps<MR, CPL, P, G + 1>(st, tile, lane, K);
    }
}

template <int MR, int CPL, int P>
__device__ __forceinline__ void all_steps(LaneState<MR, CPL>& st, float* tile, int lane, int K) {
    if constexpr (P < CPL) {
        st.ss = squares_below(st.x[P], 32 * P, 32 * P);
        slot_steps<MR, CPL, P, 0>(st, tile, lane, K);
        all_steps<MR, CPL, P + 1>(st, tile, lane, K);
    }
}

template <int MR, int CPL>
__global__ void __launch_bounds__(128) warp_kernel(qr2_whole_qr_args a) {
    extern __shared__ __align__(16) float smem[];
    using S = WarpSmem<MR, CPL>;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t mat = (int64_t)blockIdx.x * (blockDim.x >> 5) + warp;
    if (mat >= a.batch) return;  // whole warps only: nothing below synchronises more than one warp
    const int m = a.m, n = a.n, K = m < n ? m : n;
    float* tile = smem + warp * S::FLOATS;

    // in: straight into registers, every load in flight at once (any strides)
    const float* src = a.src + mat * a.src_bs;
    LaneState<MR, CPL> st;
    float(&x)[CPL][MR] = st.x;
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
    const Pow2 down = pow2(-expo), up = pow2(expo);
#pragma unroll
    for (int k = 0; k < CPL; ++k) {
#pragma unroll
        for (int i = 0; i < MR; ++i) x[k][i] = times(x[k][i], down);
        st.diag[k] = 0.f;
        st.scale[k] = 1.f;
        st.tau[k] = 0.f;
        st.tiny[k] = false;
    }
    if (lane == 0) store_column(x[0], tile, 0);  // reflector 0's column
    all_steps<MR, CPL, 0>(st, tile, lane, K);
    __syncwarp();  // every lane is done reading the last reflector before columns are overwritten

    // out: tau; R above the diagonal and beta on it scaled back, v = column * scale below it (columns
    // right of the last reflector, in wide matrices, are all R); staged for coalesced column-major H
    float* tau_out = a.tau + mat * K;
#pragma unroll
    for (int k = 0; k < CPL; ++k) {
        const int c = lane + 32 * k;
        const bool factored = c < K;
        float* own_col = tile + c * S::LD;
        if (factored) tau_out[c] = st.tau[k];
#pragma unroll
        for (int i = 0; i < MR; ++i) {
            float val = i < c || !factored ? times(x[k][i], up) : x[k][i] * st.scale[k];
            if (st.tiny[k] && i > c) val = own_col[i];  // its v was scaled in shared memory
            x[k][i] = i == c && factored ? times(st.diag[k], up) : val;
        }
        store_column(x[k], own_col, 0);
    }
    __syncwarp();
    float* h = a.h + mat * (int64_t)m * n;
    if ((m & 3) == 0) {  // whole float4s: each column's m rows are m / 4 of them, 16-byte aligned
        const int q = m >> 2;
        for (int e = lane; e < q * n; e += 32) {
            const int c = e / q, g = e - c * q;
            reinterpret_cast<float4*>(h)[e] = reinterpret_cast<const float4*>(tile + c * S::LD)[g];
        }
    } else {
#pragma unroll 4
        for (int c = 0; c < n; ++c)
            for (int i = lane; i < m; i += 32) h[(int64_t)c * m + i] = tile[c * S::LD + i];
    }
}

// Rows per lane column: m rounded up to the next instantiated size.
int rows_for(int64_t m, int cpl) {
    static const int sizes[] = {8, 16, 32, 48, 64, 96};
    for (int s : sizes)
        if (m <= s && s * cpl <= 128) return s;
    return 0;
}

template <int MR, int CPL>
int launch(const qr2_whole_qr_args* a, const qr2_device* dev, void* stream) {
    using S = WarpSmem<MR, CPL>;
    // One warp per block while the batch leaves SMs idle (one matrix per SM is the fastest); beyond
    // that, up to four matrices per block within the default 48 KB of shared memory.
    const int64_t per_warp = (int64_t)S::FLOATS * 4;
    int wpb = a->batch <= dev->sms ? 1 : a->batch <= 2 * dev->sms ? 2 : 4;
    while (wpb > 1 && wpb * per_warp > 48 * 1024) wpb /= 2;
    Qr2Launch how;
    how.grid = dim3((unsigned)((a->batch + wpb - 1) / wpb));
    how.block = dim3(32 * wpb);
    how.smem = (size_t)(wpb * per_warp);
    how.replay = true;
    return qr2_launch(warp_kernel<MR, CPL>, how, stream, "warp launch", *a);
}

template <int CPL>
int launch_rows(const qr2_whole_qr_args* a, const qr2_device* dev, void* stream) {
    switch (rows_for(a->m, CPL)) {
        case 8: return launch<8, CPL>(a, dev, stream);
        case 16: return launch<16, CPL>(a, dev, stream);
        case 32: return launch<32, CPL>(a, dev, stream);
        case 48: return launch<48, CPL>(a, dev, stream);
        case 64: return launch<64, CPL>(a, dev, stream);
        default:
            if constexpr (CPL == 1) return launch<96, 1>(a, dev, stream);
            return 1;  // unreachable: qr2_warp_holds
    }
}

}  // namespace

extern "C" int qr2_warp_holds(int64_t m, int64_t n, int cluster, const qr2_device* dev) {
    (void)dev;
    return cluster == 1 && m >= 1 && n >= 1 && n <= QR2_WARP_MAX_N && rows_for(m, n <= 32 ? 1 : 2) > 0;
}

extern "C" int qr2_warp_run(const qr2_whole_qr_args* a, int cluster, const qr2_device* dev, void* stream) {
    if (a->batch <= 0 || a->m <= 0 || a->n <= 0) return 0;
    if (!qr2_warp_holds(a->m, a->n, cluster, dev))
        return qr2_record_error("warp", "matrix too large for one warp's registers");
    return a->n <= 32 ? launch_rows<1>(a, dev, stream) : launch_rows<2>(a, dev, stream);
}
