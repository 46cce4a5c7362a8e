// block_qr.cu - Householder QR of whole matrices up to 176 x 176, one thread block per matrix, lanes owning
// columns: warp_qr.cu's structure spread over a block.
//
// Layout: warp w, lane l holds column c = 16 w + (l & 15) and half h = l >> 4 of its rows. The rows come in
// groups of four dealt to the halves alternately (group 2 j + h is the thread's local group j, rows
// 8 j + 4 h .. + 3), so that the two halves of a column mask the rows above a reflector alike. A column's dot
// with a reflector is its two lanes' FMAs and one shuffle. A reflector's column is published by its two owner
// lanes in shared memory (double-buffered, with their partial tail sums of squares) and every thread computes
// slarfg's scalars from it: one block barrier per reflector, no other exchange. Warps whose columns are all
// left of a reflector skip its update; only the next owner's warp sums the next tail.
//
// As in warp_qr.cu the matrix is scaled by a power of two to max|a| in [0.5, 1) (exact), the reflector is
// applied unscaled (u_r = alpha - beta, tau' = tau / (alpha - beta)^2) with its beta and 1 / (alpha - beta) kept in
// shared memory for the output (R's diagonal, v's scale), and a column so small that its FP32 squares lose
// precision gets its scalars in FP64 (out of line; its v goes straight to H). The local groups of a super-group of
// eight rows are unrolled at compile time, so every row mask but the reflector's own group's is free.
#include <float.h>

#include "common.cuh"

namespace {

constexpr unsigned FULL = 0xffffffffu;
constexpr int MAX_WARPS = (QR2_BLOCK_QR_MAX + 15) / 16;

// MR rows per thread: a column of 2 MR rows, MR / 2 groups of four.
template <int MR>
struct BlockSmem {
    float4 col[2][MR / 2];  // the published column of reflector r in buffer r & 1
    float tail[2][2];       // its owner lanes' partial sums of squares below row r, one per half
    float amax[MAX_WARPS];
    float beta[QR2_BLOCK_QR_MAX];  // reflector r's beta, R's diagonal (scaled)
    float rd[QR2_BLOCK_QR_MAX];    // 1 / dd: scales column r's tail into v
    bool v_in_h[QR2_BLOCK_QR_MAX]; // the FP64 path wrote v to H
};

template <int MR>
struct ThreadState {
    float x[MR];  // local row 4 j + q is row 8 j + 4 h + q of column c
};

// Row of the column held in local row i by half h.
__device__ __forceinline__ int global_row(int i, int h) { return 8 * (i >> 2) + 4 * h + (i & 3); }

// The rare reflector whose tail's FP32 squares lose precision (below 2^-100 of a matrix scaled to max 1) or
// vanish: its scalars in FP64 from the published column of m rows; v is scaled there in place and written to
// column r of H by one thread (its scale may not fit FP32). Returns (tau, beta); a zero tail gives tau = 0 and
// leaves the column as it is (LAPACK). Called by every thread (it synchronises the block); it works on shared
// memory only, in loops, so it stays small inline (a call would spill the registers that hold the matrix).
__device__ __forceinline__ float2 tiny_reflector(float* col, int r, int m, float alpha, float* h_col, bool writer) {
    double ss = 0.0, beta, tau, scal;
#pragma unroll 1
    for (int i = r + 1; i < m; ++i) ss = fma((double)col[i], (double)col[i], ss);
    if (ss == 0.0) return make_float2(0.f, alpha);  // block-uniform: every thread summed the same column
    householder_scalars((double)alpha, ss, beta, tau, scal);
    __syncthreads();  // every thread has read the column
    if (writer) {
#pragma unroll 1
        for (int i = r + 1; i < m; ++i) {
            const float v = (float)(col[i] * scal);
            col[i] = v;
            h_col[i] = v;
        }
    }
    __syncthreads();
    return make_float2((float)tau, (float)beta);
}

// Column r's reflector applied to the thread's rows, for r in super-group J (rows 8 J .. 8 J + 7): the
// published column below row r, u_r = dd (rows above r are 0: in local group J, where the published column still
// holds alpha and R, they are masked), scaled by tau_u (0 for columns left of r).
template <int MR, int J>
__device__ __forceinline__ void apply_reflector(float (&x)[MR], const float4* u, int r, int h, float dd,
                                                float tau_u) {
    const int t = r - (8 * J + 4 * h);  // row r is local row 4 J + t of this half when 0 <= t < 4
    float d[4] = {0.f, 0.f, 0.f, 0.f};
    float wj[4];  // group J's u, masked once for the dot and the update
#pragma unroll
    for (int j = MR / 4 - 1; j >= J; --j) {  // group J last: the other groups do not wait for dd
        const float4 q = u[2 * j + h];
        float w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            if (j == J) w[k] = wj[k] = k < t ? 0.f : k == t ? dd : w[k];
            d[k] = fmaf(w[k], x[4 * j + k], d[k]);
        }
    }
    float dot = (d[0] + d[1]) + (d[2] + d[3]);
    dot += __shfl_xor_sync(FULL, dot, 16);  // the column's other half
    const float s = tau_u * dot;
#pragma unroll
    for (int j = J; j < MR / 4; ++j) {
        const float4 q = u[2 * j + h];
        float w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            if (j == J) w[k] = wj[k];
            x[4 * j + k] = fmaf(-s, w[k], x[4 * j + k]);
        }
    }
}

// The owner lanes of column `next` (in super-group J or J + 1) publish it: local groups from J on, and each
// half's sum of squares below row `next`.
template <int MR, int J>
__device__ __forceinline__ void publish_column(const float (&x)[MR], BlockSmem<MR>& sm, int next, int h, bool owner) {
    const int t = next - (8 * J + 4 * h);  // local row 4 j + k is below `next` when 8 (j - J) + k > t
    float ss[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int j = J; j < MR / 4; ++j) {
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            if (j <= J + 1) ss[k] = 8 * (j - J) + k > t ? fmaf(x[4 * j + k], x[4 * j + k], ss[k]) : ss[k];
            else ss[k] = fmaf(x[4 * j + k], x[4 * j + k], ss[k]);
        }
    }
    if (owner) {
        float4* col = sm.col[next & 1];
#pragma unroll
        for (int j = J; j < MR / 4; ++j) col[2 * j + h] = make_float4(x[4 * j], x[4 * j + 1], x[4 * j + 2], x[4 * j + 3]);
        sm.tail[next & 1][h] = (ss[0] + ss[1]) + (ss[2] + ss[3]);
    }
}

// Reflector r of super-group J. Every thread reads column r and its tail sums, computes the scalars, and
// applies the reflector to its rows; then the owners of column r + 1 publish it.
template <int MR, int J>
__device__ __forceinline__ void reflector_step(ThreadState<MR>& st, BlockSmem<MR>& sm, int r, int c, int h, int warp,
                                               int m, int K, float* tau_out, float* h_out) {
    const int b = r & 1;
    __syncthreads();  // column r is published
    const float alpha = reinterpret_cast<const float*>(sm.col[b])[r];
    const float ss_o = sm.tail[b][0] + sm.tail[b][1];
    float tau, tau_u, beta, dd, rd;
    if (ss_o >= 0x1p-100f) {
        const UnscaledReflector f = unscaled_reflector(alpha, ss_o);
        beta = f.beta, dd = f.dd, tau = f.tau, tau_u = f.tau_u, rd = f.rd;
    } else {  // block-uniform: every thread read the same tail sums
        const float2 tb = tiny_reflector(reinterpret_cast<float*>(sm.col[b]), r, m, alpha, h_out + (int64_t)r * m,
                                         threadIdx.x == 0);
        tau = tau_u = tb.x;
        beta = tb.y;
        dd = 1.f;
        rd = 1.f;  // a zero tail wrote nothing to H: its zeros are output as usual
    }
    if (threadIdx.x == 0) {  // read at the output, after the last barrier
        tau_out[r] = tau;
        sm.beta[r] = beta;
        sm.rd[r] = rd;
        sm.v_in_h[r] = ss_o < 0x1p-100f && tau != 0.f;
    }
    if (16 * warp + 15 > r)  // warp-uniform: some column of this warp is right of r
        apply_reflector<MR, J>(st.x, sm.col[b], r, h, dd, c > r ? tau_u : 0.f);
    const int next = r + 1;
    if (next < K && warp == next >> 4) publish_column<MR, J>(st.x, sm, next, h, c == next);
}

// Super-groups of eight rows, unrolled: the eight reflectors of one share its code.
template <int MR, int J>
__device__ __forceinline__ void all_steps(ThreadState<MR>& st, BlockSmem<MR>& sm, int c, int h, int warp, int m, int K,
                                          float* tau_out, float* h_out) {
    if constexpr (J < MR / 4) {
        const int end = K < 8 * J + 8 ? K : 8 * J + 8;
#pragma unroll 1
        for (int r = 8 * J; r < end; ++r) reflector_step<MR, J>(st, sm, r, c, h, warp, m, K, tau_out, h_out);
        if (end == 8 * J + 8) all_steps<MR, J + 1>(st, sm, c, h, warp, m, K, tau_out, h_out);
    }
}

// A block's warps are counted in fours against the SM's 65,536 registers (one quarter of the register file per
// warp scheduler): 9-11 warps (n > 128) count as 12, so at most 170 registers a thread (at 184 the launch failed).
// The 64-row build compiles to 167 and also runs 9-11 warps (m <= 128 < n); the 88-row build spills at 168.
template <int MR>
__global__ void __maxnreg__(MR > 64 ? 168 : 184) block_qr_kernel(qr2_whole_qr_args a) {
    __shared__ BlockSmem<MR> sm;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, h = lane >> 4, warps = blockDim.x >> 5;
    const int c = 16 * warp + (lane & 15);
    const int64_t mat = blockIdx.x;
    const int m = a.m, n = a.n, K = m < n ? m : n;

    // in: straight into registers, every load in flight at once (any strides)
    const float* src = a.src + mat * a.src_bs;
    ThreadState<MR> st;
    float amax = 0.f;
#pragma unroll
    for (int i = 0; i < MR; ++i) {
        const int row = global_row(i, h);
        st.x[i] = row < m && c < n ? src[(int64_t)row * a.src_rs + (int64_t)c * a.src_cs] : 0.f;
        amax = fmaxf(amax, fabsf(st.x[i]));
    }
    // power-of-two scaling from the matrix's max |a| (NaN and Inf inputs: no scaling)
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(FULL, amax, off));
    if (lane == 0) sm.amax[warp] = amax;
    __syncthreads();
    for (int w = 0; w < warps; ++w) amax = fmaxf(amax, sm.amax[w]);
    int expo = 0;
    if (amax > 0.f && amax <= FLT_MAX) frexpf(amax, &expo);
    const Pow2 down = pow2(-expo), up = pow2(expo);
#pragma unroll
    for (int i = 0; i < MR; ++i) st.x[i] = times(st.x[i], down);

    float* tau_out = a.tau + mat * K;
    float* h_out = a.h + mat * (int64_t)m * n;
    if (warp == 0) publish_column<MR, 0>(st.x, sm, 0, h, c == 0);
    all_steps<MR, 0>(st, sm, c, h, warp, m, K, tau_out, h_out);

    // out: R above the diagonal and beta on it scaled back, v = column * rd below it (columns right of the
    // last reflector, in wide matrices, are all R; a tiny column's v is in H already)
    __syncthreads();  // the last reflector's beta and rd
    if (c >= n) return;
    float* hc = h_out + (int64_t)c * m;
    const bool factored = c < K;
    const float diag = factored ? times(sm.beta[c], up) : 0.f, scale = factored ? sm.rd[c] : 1.f;
    const bool tiny = factored && sm.v_in_h[c];
    const bool whole = (m & 3) == 0 && !tiny;  // whole: float4 stores (16-byte aligned)
#pragma unroll
    for (int i = 0; i < MR; ++i) {
        const int row = global_row(i, h);
        st.x[i] = row < c || !factored ? times(st.x[i], up) : row == c ? diag : st.x[i] * scale;
        if (!whole && row < m && !(tiny && row > c)) hc[row] = st.x[i];
    }
    if (whole) {
#pragma unroll
        for (int j = 0; j < MR / 4; ++j)
            if (global_row(4 * j, h) < m)
                *reinterpret_cast<float4*>(hc + global_row(4 * j, h)) =
                    make_float4(st.x[4 * j], st.x[4 * j + 1], st.x[4 * j + 2], st.x[4 * j + 3]);
    }
}

template <int MR>
int launch(const qr2_whole_qr_args* a, void* stream) {
    const int warps = (a->n + 15) / 16;
    block_qr_kernel<MR><<<(unsigned)a->batch, 32 * warps, 0, (cudaStream_t)stream>>>(*a);
    QR2_CHECK_LAUNCH("block_qr launch");
    return 0;
}

}  // namespace

extern "C" int qr2_block_qr_supported(int64_t m, int64_t n) {
    return m >= 1 && n >= 1 && m <= QR2_BLOCK_QR_MAX && n <= QR2_BLOCK_QR_MAX;
}

extern "C" int qr2_block_qr(const qr2_whole_qr_args* a, void* stream) {
    if (a->batch <= 0 || a->m <= 0 || a->n <= 0) return 0;
    if (!qr2_block_qr_supported(a->m, a->n))
        return qr2_record_error("block_qr", "matrix too large for one block's registers");
    if (a->batch > 0x7fffffff) return qr2_record_error("block_qr", "more than 2^31 - 1 matrices");
    if (a->m <= 64) return launch<32>(a, stream);
    if (a->m <= 128) return launch<64>(a, stream);
    return launch<88>(a, stream);
}
