// quad.cu - Householder QR of small matrices (m, n <= 64), one thread block per matrix and one quad of four
// lanes per column: column c lives in lanes 4 (c % 8) .. 4 (c % 8) + 3 of warp c / 8, and lane q of the quad holds
// rows q, q + 4, q + 8, ... (R of them) in registers.
//
// Why quads: with a lane per column (warp.cu) one warp carries every dot of a reflector in its own FMAs, and a
// step costs ~460 cycles of issue and latency at 32 rows. A quad splits each dot over four lanes, and the columns
// over ceil(n / 8) warps (up to eight), so each lane has R = m / 4 rows of FMAs per step, at the price of
// two shuffles per dot and a block barrier per reflector.
//
// One step, reflector r: the quad of column r published it (after applying reflector r - 1) into its own slot of
// shared memory: each lane its quarter of the rows and its partial sum of squares below r. After the barrier every
// lane reads its quarter of u, the four partial sums and alpha, and computes slarfg's scalars itself; the dot over
// the rows below r does not wait for them. The reflector is applied unscaled as in warp.cu (u_r = alpha - beta,
// tau_u = tau / (alpha - beta)^2), the owner's scaling is deferred to the output. Every slot is written once (but
// for the rare FP64 reflector, which rescales its slot in place between two barriers of its own), so the barrier
// orders reads after writes and nothing else.
//
// Rows are interleaved over the quad (row 4 j + q in x[j] of lane q), so the four reflectors of group j = r / 4
// mask only x[j]; the groups are unrolled, the four reflectors of a group share code.
#include <float.h>

#include "launch.cuh"
#include "reduce.cuh"
#include "reflector.cuh"

namespace {

// Shared memory per column: its 4R rows quarter by quarter (lane q's x[j] at q R + j), then the quad's four
// partial sums of squares.
template <int R>
struct QuadSlot {
    static constexpr int FLOATS = 4 * R + 4;
};

template <int R>
__device__ __forceinline__ void load_quarter(float (&u)[R], const float* p) {
    static_assert(R == 2 || R % 4 == 0, "quarters of 2 or a multiple of 4 rows");
    if constexpr (R == 2) {
        const float2 v = *reinterpret_cast<const float2*>(p);
        u[0] = v.x, u[1] = v.y;
    } else {
#pragma unroll
        for (int k = 0; k < R; k += 4) {
            const float4 v = *reinterpret_cast<const float4*>(p + k);
            u[k] = v.x, u[k + 1] = v.y, u[k + 2] = v.z, u[k + 3] = v.w;
        }
    }
}

template <int R>
__device__ __forceinline__ void store_quarter(const float (&x)[R], float* p) {
    if constexpr (R == 2) {
        *reinterpret_cast<float2*>(p) = make_float2(x[0], x[1]);
    } else {
#pragma unroll
        for (int k = 0; k < R; k += 4)
            *reinterpret_cast<float4*>(p + k) = make_float4(x[k], x[k + 1], x[k + 2], x[k + 3]);
    }
}

// This lane's sum of squares of its rows below row s, where s lies in groups G or G + 1 (rows 4 G + q and
// 4 (G + 1) + q are compared at run time, the others are known above or below s at compile time).
template <int R, int G>
__device__ __forceinline__ float squares_below(const float (&x)[R], int s, int q) {
    float p0 = 0.f, p1 = 0.f;
#pragma unroll
    for (int j = G; j < R; ++j) {
        const float sq = j <= G + 1 && 4 * j + q <= s ? 0.f : x[j] * x[j];
        if (j & 1) p1 += sq;
        else p0 += sq;
    }
    return p0 + p1;
}

// The quad of column c publishes it for the reflector at row s (s in groups G or G + 1).
template <int R, int G>
__device__ __forceinline__ void publish(const float (&x)[R], float* slot, int s, int q) {
    store_quarter(x, slot + q * R);
    slot[4 * R + q] = squares_below<R, G>(x, s, q);
}

// The rare reflector whose tail's FP32 squares lose precision (below 2^-100 of a matrix scaled to max 1) or vanish:
// its scalars in FP64 from the published column (rows r + 1 .. m - 1), and v scaled there in place by the owner quad
// (its scale may not fit FP32). Returns (tau, beta); a zero tail gives tau = 0 and leaves the column as it is
// (LAPACK). Block-uniform: every thread summed the same partials. Out of line: it is cold and would grow each step.
__device__ __noinline__ float2 tiny_reflector(float* slot, int R, int r, int m, float alpha, bool own, int q) {
    double ss = 0.0;
    for (int i = r + 1; i < m; ++i) {
        const double v = slot[(i & 3) * R + (i >> 2)];
        ss = fma(v, v, ss);
    }
    if (ss == 0.0) return make_float2(0.f, alpha);
    double beta, tau, scal;
    householder_scalars((double)alpha, ss, beta, tau, scal);
    __syncthreads();  // every thread has read the column
    if (own)
        for (int j = 0; j < R; ++j)
            if (4 * j + q > r) slot[q * R + j] = (float)(slot[q * R + j] * scal);
    __syncthreads();
    return make_float2((float)tau, (float)beta);
}

// What a lane keeps of its column c: x (its quarter), and from reflector c: the diagonal, the scale of v and tau.
template <int R>
struct QuadState {
    float x[R];
    float diag, scale, tau;
};

// Reflectors 4 G .. 4 G + 3 (those below K): G is a compile-time constant, r a run-time one.
template <int R, int G>
__device__ __forceinline__ void group_steps(QuadState<R>& st, float* pub, int lane, int c, int m, int K) {
    if constexpr (G < R) {
        constexpr int SLOT = QuadSlot<R>::FLOATS;
        const int q = lane & 3;
        const int end = K < 4 * G + 4 ? K : 4 * G + 4;
#pragma unroll 1
        for (int r = 4 * G; r < end; ++r) {
            __syncthreads();  // column r is published
            float* slot = pub + r * SLOT;
            const float4 parts = *reinterpret_cast<const float4*>(slot + 4 * R);
            const float alpha = slot[(r & 3) * R + G];
            float u[R];
            load_quarter(u, slot + q * R);
            const bool below = 4 * G + q > r;  // this lane's row in group G lies below r
            if (!below) u[G] = 0.f;
            // the dot over the rows below r, and this column's row r, while the scalars are computed
            float d0 = 0.f, d1 = 0.f;
#pragma unroll
            for (int j = G; j < R; ++j) {
                if (j & 1) d1 = fmaf(u[j], st.x[j], d1);
                else d0 = fmaf(u[j], st.x[j], d0);
            }
            float d = d0 + d1;
            const float ar = __shfl_sync(0xffffffffu, st.x[G], (lane & ~3) | (r & 3));
            d += __shfl_xor_sync(0xffffffffu, d, 1);
            d += __shfl_xor_sync(0xffffffffu, d, 2);
            const float ss = (parts.x + parts.y) + (parts.z + parts.w);
            const bool own = c == r;
            float beta, dd, tau, tau_u, rd;
            if (ss >= QR2_TINY_SUM_OF_SQUARES) {
                const UnscaledReflector f = unscaled_reflector(alpha, ss);
                beta = f.beta, dd = f.dd, tau = f.tau, tau_u = f.tau_u, rd = f.rd;
            } else {  // block-uniform
                const float2 tb = tiny_reflector(slot, R, r, m, alpha, own, q);
                tau = tau_u = tb.x;
                beta = tb.y;
                dd = rd = 1.f;
                load_quarter(u, slot + q * R);  // v, scaled
                if (!below) u[G] = 0.f;
                if (own) {
#pragma unroll
                    for (int j = G; j < R; ++j) st.x[j] = j > G || below ? u[j] : st.x[j];
                }
                // d must be the dot with v: recompute it
                d0 = d1 = 0.f;
#pragma unroll
                for (int j = G; j < R; ++j) {
                    if (j & 1) d1 = fmaf(u[j], st.x[j], d1);
                    else d0 = fmaf(u[j], st.x[j], d0);
                }
                d = d0 + d1;
                d += __shfl_xor_sync(0xffffffffu, d, 1);
                d += __shfl_xor_sync(0xffffffffu, d, 2);
            }
            if (own) st.diag = beta, st.scale = rd, st.tau = tau;
            const float s = c > r ? tau_u * fmaf(dd, ar, d) : 0.f;
            if (4 * G + q == r) u[G] = dd;
#pragma unroll
            for (int j = G; j < R; ++j) st.x[j] = fmaf(-s, u[j], st.x[j]);
            if (r + 1 < K && c == r + 1) publish<R, G>(st.x, pub + (r + 1) * SLOT, r + 1, q);
        }
        group_steps<R, G + 1>(st, pub, lane, c, m, K);
    }
}

template <int R>
__global__ void __launch_bounds__(256) quad_kernel(qr2_whole_qr_args a) {
    constexpr int SLOT = QuadSlot<R>::FLOATS;
    __shared__ __align__(16) float pub[4 * R * SLOT];  // a slot per reflector: K <= m <= 4 R
    __shared__ float warp_max[8];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    const int q = lane & 3, c = 8 * warp + (lane >> 2);
    const int m = a.m, n = a.n, K = m < n ? m : n;
    const int64_t mat = blockIdx.x;

    // in: straight into registers (any strides)
    const float* src = a.src + mat * a.src_bs;
    QuadState<R> st;
    float amax = 0.f;
#pragma unroll
    for (int j = 0; j < R; ++j) {
        const int row = 4 * j + q;
        st.x[j] = row < m && c < n ? src[row * a.src_rs + c * a.src_cs] : 0.f;
        amax = fmaxf(amax, fabsf(st.x[j]));
    }
    // power-of-two scaling from the matrix's max |a| (NaN and Inf inputs: no scaling)
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    if (warps > 1) {
        if (lane == 0) warp_max[warp] = amax;
        __syncthreads();
        for (int w = 0; w < warps; ++w) amax = fmaxf(amax, warp_max[w]);
    }
    int expo = 0;
    if (amax > 0.f && amax <= FLT_MAX) frexpf(amax, &expo);
    const Pow2 down = pow2(-expo), up = pow2(expo);
#pragma unroll
    for (int j = 0; j < R; ++j) st.x[j] = times(st.x[j], down);
    st.diag = 0.f, st.scale = 1.f, st.tau = 0.f;
    if (c == 0) publish<R, 0>(st.x, pub, 0, q);
    group_steps<R, 0>(st, pub, lane, c, m, K);

    // out: R above the diagonal and beta on it scaled back, v = x * scale below it (columns right of the last
    // reflector, in wide matrices, are all R)
    if (c >= n) return;
    const bool factored = c < K;
    float* h = a.h + mat * (int64_t)m * n + (int64_t)c * m;
#pragma unroll
    for (int j = 0; j < R; ++j) {
        const int row = 4 * j + q;
        if (row >= m) continue;
        const float v = row < c || !factored ? times(st.x[j], up) : st.x[j] * st.scale;
        h[row] = row == c && factored ? times(st.diag, up) : v;
    }
    if (factored && q == 0) a.tau[mat * K + c] = st.tau;
}

template <int R>
int launch(const qr2_whole_qr_args* a, void* stream) {
    Qr2Launch how;
    how.grid = dim3((unsigned)a->batch);
    how.block = dim3(32 * ((a->n + 7) / 8));
    how.replay = true;
    return qr2_launch(quad_kernel<R>, how, stream, "quad launch", *a);
}

}  // namespace

extern "C" int qr2_quad_holds(int64_t m, int64_t n, int cluster, const qr2_device* dev) {
    (void)dev;
    return cluster == 1 && m >= 1 && n >= 1 && m <= QR2_QUAD_MAX && n <= QR2_QUAD_MAX;
}

extern "C" int qr2_quad_run(const qr2_whole_qr_args* a, int cluster, const qr2_device* dev, void* stream) {
    if (a->batch <= 0 || a->m <= 0 || a->n <= 0) return 0;
    if (!qr2_quad_holds(a->m, a->n, cluster, dev)) return qr2_record_error("quad", "matrix larger than 64 x 64");
    if (a->batch > 0x7fffffff) return qr2_record_error("quad", "more blocks than a grid holds");
    if (a->m <= 8) return launch<2>(a, stream);
    if (a->m <= 16) return launch<4>(a, stream);
    if (a->m <= 32) return launch<8>(a, stream);
    return launch<16>(a, stream);
}
