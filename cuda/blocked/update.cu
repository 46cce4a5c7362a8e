// update.cu - the blocked route's update: block reflector application (LAPACK slarft + slarfb) for the blocked route.
//
// H_0 H_1 ... H_{w-1} = I - V T V^T with T upper triangular (forward, column-wise storage).
// T comes from the Gram matrix G = V^T V by recursive doubling: for adjacent diagonal blocks
// T11 (s x s) and T22, the block above T22 is T12 = -T11 G12 T22 (G12 = V1^T V2). Blocks start at
// s = 1 with T_ii = tau_i, so a reflector with tau = 0 gives a zero row and column of T: the
// identity, as LAPACK intends. One thread block per matrix builds T in shared memory.
// G = V^T V is an FP32 cuBLAS GEMM (only where the panel kernel built no T). The products with C run on tensor cores
// at FP32 accuracy (3xTF32, tf32x3.cuh) in one kernel per update: a thread block takes one matrix's strip of 64 (or
// 32) columns of C and computes W = V^T C_strip, W = T^T W and C_strip -= V W, so W never leaves shared memory and
// the strip is read twice and written once. On 640 x 512 x 512 this is 1.3x faster than the three FP32 cuBLAS GEMMs
// it replaced (docs/results/2026-12-02-h200-tf32x3-update.txt); the kernel still issues about nine instructions per
// mma, so it is bound by instruction issue, not by the tensor cores.
#include <cublas_v2.h>
#include <limits.h>

#include "launch.cuh"
#include "reduce.cuh"
#include "tf32x3.cuh"

#include <type_traits>

namespace {

constexpr int T_THREADS = 256;
constexpr int UPDATE_THREADS = 128;
constexpr int KC = 32;        // rows of V and C per chunk
constexpr int STAGES = 3;     // chunks in flight
constexpr int UPDATE_W = 64;  // widest block one kernel applies; wider ones go in pieces

__global__ void __launch_bounds__(T_THREADS) larft_from_gram_kernel(const float* G, int64_t g_bs, const float* tau,
                                                                    int64_t tau_bs, float* T, int64_t t_bs, int w) {
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
        Gs[idx] = G[idx];
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
// XOR of the column: both fragment patterns, rows along q with columns along g (V^T C) and rows along g with columns
// along q (V W), then hit 32 distinct banks, and a warp copying one column's 32 rows hits each bank once.
__device__ __forceinline__ int chunk_at(int r, int c) { return c * KC + (r ^ (((c & 3) << 3) | (c & 4))); }

// One 4-byte asynchronous copy global -> shared; src_ok false writes a zero and reads nothing.
__device__ __forceinline__ void copy_async(float* dst, const float* src, bool src_ok) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(d), "l"(src), "r"(src_ok ? 4 : 0));
}
__device__ __forceinline__ void copy_async_commit() { asm volatile("cp.async.commit_group;"); }
template <int PENDING>
__device__ __forceinline__ void copy_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(PENDING));
}

template <int WMAX, int NT>
struct WyUpdateShape {
    static constexpr int LDW = WMAX + 4;            // ld of T and W in shared memory: 4 mod 32, conflict-free
    static constexpr int WARPS_M = WMAX / 32;       // W = V^T C: warps along W's rows, 32 rows each
    static constexpr int NT1 = NT * WARPS_M / 32;   // ... and W's 8-column tiles per warp
    static constexpr int NT3 = NT / 32;             // C -= V W: each warp all 32 rows of a chunk, NT / 4 columns
    static constexpr int stage = KC * (WMAX + NT);  // one chunk of V and one of C
    static constexpr int floats = STAGES * stage + NT * LDW;
    static_assert(WMAX * LDW <= STAGES * stage, "T is kept where the chunks were");
};

// C_strip -= V (T^T (V^T C_strip)) for the NT-column strip blockIdx.x % strips of matrix blockIdx.x / strips.
// V: mr x w (w <= WMAX), T: w x w upper triangular (ld ldt), C: mr x nc, all column-major. Chunks of KC rows of V
// and C stream through a STAGES-deep cp.async ring twice: once for W = V^T C, once for C += V (-T^T W).
template <int WMAX, int NT>
__global__ void __launch_bounds__(UPDATE_THREADS, 3)
    wy_update_kernel(int64_t strips, int mr, int w, int nc, const float* v, int64_t ldv, int64_t v_bs, const float* t,
                     int64_t ldt, int64_t t_bs, float* c, int64_t ldc, int64_t c_bs) {
    using S = WyUpdateShape<WMAX, NT>;
    constexpr int LDW = S::LDW;
    extern __shared__ float4 smem4[];
    float* sm = reinterpret_cast<float*>(smem4);
    float* Ws = sm + STAGES * S::stage;  // W(k, j) at j LDW + k
    float* Ts = sm;                      // once the chunks of W = V^T C are consumed: T(r, c) at c LDW + r

    const int64_t b = blockIdx.x / strips;
    const int j0 = (int)(blockIdx.x - b * strips) * NT;
    v += b * v_bs;
    t += b * t_bs;
    c += b * c_bs + j0 * ldc;
    const int ncs = min(NT, nc - j0);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, q = lane & 3;

    // each thread copies row tid % 32 of columns tid / 32 + 4 i of a chunk: a warp reads 128 contiguous bytes
    const int lr = tid & 31, lc = tid >> 5;
    const float* vp = v + lr + lc * ldv;
    const float* cp = c + lr + lc * ldc;
    const int64_t vstep = 4 * ldv, cstep = 4 * ldc;
    const int vcols = (w - lc + 3) / 4, ccols = (ncs - lc + 3) / 4;  // of the columns lc + 4 i, those that exist
    const int swz = ((lc & 3) << 3) | (lc & 4);
    auto slot = [&](int i) { return (lc + 4 * i) * KC + (lr ^ (swz ^ (i & 1 ? 4 : 0))); };  // chunk_at(lr, lc + 4 i)
    const int chunks = (mr + KC - 1) / KC;
    auto issue = [&](int ch) {  // chunk ch into its stage, or an empty group past the end
        if (ch < chunks) {
            float* st = sm + (ch % STAGES) * S::stage;
            const bool in = ch * KC + lr < mr;
            const float* p = vp + ch * KC;
#pragma unroll
            for (int i = 0; i < WMAX / 4; ++i, p += vstep) copy_async(st + slot(i), in && i < vcols ? p : v, in && i < vcols);
            p = cp + ch * KC;
#pragma unroll
            for (int i = 0; i < NT / 4; ++i, p += cstep)
                copy_async(st + KC * WMAX + slot(i), in && i < ccols ? p : c, in && i < ccols);
        }
        copy_async_commit();
    };

    // W = V^T C_strip: warp (wm, wn) owns rows 32 wm .. + 32 and NT1 column tiles of W. A strip whose entries are all
    // below 2^-64 or above 2^64 would lose its subnormal products to the tensor cores, or overflow: it takes a second
    // pass with C scaled by a power of two (cs1 cs2).
    const int wm = warp % S::WARPS_M, wj = 8 * S::NT1 * (warp / S::WARPS_M);
    float big[2][S::NT1][4], small[2][S::NT1][4];
    auto w_pass = [&](auto scaled_pass, float cs1, float cs2) {
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int nt = 0; nt < S::NT1; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) big[mt][nt][e] = small[mt][nt][e] = 0.f;
#pragma unroll
        for (int s = 0; s < STAGES - 1; ++s) issue(s);
        for (int ch = 0; ch < chunks; ++ch) {
            copy_async_wait<STAGES - 2>();
            __syncthreads();
            issue(ch + STAGES - 1);
            const float* Vc = sm + (ch % STAGES) * S::stage;
            const float* Cc = Vc + KC * WMAX;
            tf32x3_warp_tile<2, S::NT1, KC / 8>(
                big, small, [&](int i, int k) { return Vc[chunk_at(k, 32 * wm + i)]; },
                [&](int k, int j) {
                    if constexpr (decltype(scaled_pass)::value) return Cc[chunk_at(k, wj + j)] * cs1 * cs2;
                    else return Cc[chunk_at(k, wj + j)];
                },
                lane);
        }
        copy_async_wait<0>();
        __syncthreads();
    };
    w_pass(std::false_type{}, 1.f, 1.f);
    // W's largest magnitude, and only where it is below 2^-64 or above 2^64 (or not finite) the strip's own
    __shared__ float warp_max[UPDATE_THREADS / 32];
    auto block_max = [&](float x) {
        x = warp_max_of(x);
        __syncthreads();
        if (lane == 0) warp_max[warp] = x;
        __syncthreads();
        for (int i = 0; i < UPDATE_THREADS / 32; ++i) x = fmaxf(x, warp_max[i]);
        return x;
    };
    float wmax = 0.f;
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int nt = 0; nt < S::NT1; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) wmax = fmaxf(wmax, fabsf(big[mt][nt][e] + small[mt][nt][e]));
    wmax = block_max(wmax);
    float cmax = 1.f;
    if (!(wmax >= 0x1p-64f && wmax <= 0x1p64f)) {
        cmax = 0.f;
        for (int j = lc; j < ncs; j += UPDATE_THREADS / 32)
            for (int r = lr; r < mr; r += 32) cmax = fmaxf(cmax, fabsf(c[r + j * ldc]));
        cmax = block_max(cmax);
    }
    const bool scaled = cmax > 0.f && cmax <= 3.4e38f && (cmax < 0x1p-64f || cmax > 0x1p64f);
    float cs1 = 1.f, cs2 = 1.f;  // C is scaled by cs1 cs2 = 2^-e, |C| < 2 after
    if (scaled) {
        const int e = ilogbf(cmax);
        cs1 = exp2f((float)(-e / 2));
        cs2 = exp2f((float)(-e - (-e / 2)));
        w_pass(std::true_type{}, cs1, cs2);
    }
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
    put_w(1.f);
    for (int idx = tid; idx < WMAX * WMAX; idx += UPDATE_THREADS) {
        const int r = idx % WMAX, cc = idx / WMAX;
        Ts[cc * LDW + r] = r < w && cc < w ? t[r + cc * ldt] : 0.f;
    }
    __syncthreads();

    // W = -T^T W, negated so that the last product adds
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int nt = 0; nt < S::NT1; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) big[mt][nt][e] = small[mt][nt][e] = 0.f;
    tf32x3_warp_tile<2, S::NT1, WMAX / 8>(
        big, small, [&](int i, int k) { return Ts[(32 * wm + i) * LDW + k]; },
        [&](int k, int j) { return Ws[(wj + j) * LDW + k]; }, lane);
    __syncthreads();
    put_w(-1.f);
    __syncthreads();

    // C_strip += V W, KC rows at a time: warp w owns all KC rows and columns w NT / 4 .. + NT / 4 of each chunk
    const int wj3 = warp * (NT / 4);
    float* ccol[2 * S::NT3];  // this thread's columns of C: wj3 + 8 (e / 2) + 2 q + e % 2
    bool cin[2 * S::NT3];
#pragma unroll
    for (int e = 0; e < 2 * S::NT3; ++e) {
        const int j = wj3 + 8 * (e >> 1) + 2 * q + (e & 1);
        cin[e] = j < ncs;
        ccol[e] = c + g + (cin[e] ? j : 0) * ldc;
    }
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) issue(s);
    for (int ch = 0; ch < chunks; ++ch) {
        copy_async_wait<STAGES - 2>();
        __syncthreads();
        issue(ch + STAGES - 1);
        const float* Vc = sm + (ch % STAGES) * S::stage;
        const float* Cc = Vc + KC * WMAX;
        float up[2][S::NT3][4] = {}, upsmall[2][S::NT3][4] = {};
        tf32x3_warp_tile<2, S::NT3, WMAX / 8>(
            up, upsmall, [&](int i, int k) { return Vc[chunk_at(i, k)]; },
            [&](int k, int j) { return Ws[(wj3 + j) * LDW + k]; }, lane);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
            const int r = 16 * mt + g;  // and r + 8
            const int64_t row = (int64_t)ch * KC + 16 * mt;
#pragma unroll
            for (int nt = 0; nt < S::NT3; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int col = 2 * nt + (e & 1), rr = r + (e & 2 ? 8 : 0);
                    const int jj = wj3 + 8 * nt + 2 * q + (e & 1);
                    if (cin[col] && ch * KC + rr < mr) {
                        const float upd = up[mt][nt][e] + upsmall[mt][nt][e];
                        ccol[col][row + (e & 2 ? 8 : 0)] =
                            scaled ? (Cc[chunk_at(rr, jj)] * cs1 * cs2 + upd) / cs1 / cs2 : Cc[chunk_at(rr, jj)] + upd;
                    }
                }
        }
    }
    copy_async_wait<0>();
}

// One launch of the fused update for a block of w <= UPDATE_W reflectors.
template <int WMAX, int NT>
int launch_wy_update(int64_t batch, int mr, int w, int nc, const float* v, int64_t ldv, int64_t v_bs, const float* t,
                     int64_t ldt, int64_t t_bs, float* c, int64_t ldc, int64_t c_bs, void* stream) {
    const int64_t strips = (nc + NT - 1) / NT;
    if (batch > INT_MAX / strips) return qr2_record_error("wy_update launch", "more than 2^31 - 1 thread blocks");
    Qr2Launch how;
    how.grid = dim3((unsigned)(batch * strips));
    how.block = dim3(UPDATE_THREADS);
    how.smem = WyUpdateShape<WMAX, NT>::floats * sizeof(float);
    how.smem_limit = how.smem;
    return qr2_launch(wy_update_kernel<WMAX, NT>, how, stream, "wy_update launch", strips, mr, w, nc, v, ldv, v_bs, t,
                      ldt, t_bs, c, ldc, c_bs);
}

// 64-column strips, or 32 where 64 would leave fewer than two blocks per SM (a few tall matrices).
int wy_update(int64_t batch, int mr, int w, int nc, const float* v, int64_t ldv, int64_t v_bs, const float* t,
              int64_t ldt, int64_t t_bs, float* c, int64_t ldc, int64_t c_bs, const qr2_device* dev, void* stream) {
    const bool narrow = nc <= 32 || batch * ((nc + 63) / 64) < 2 * (int64_t)dev->sms;
    if (w <= 32) {
        if (narrow)
            return launch_wy_update<32, 32>(batch, mr, w, nc, v, ldv, v_bs, t, ldt, t_bs, c, ldc, c_bs, stream);
        return launch_wy_update<32, 64>(batch, mr, w, nc, v, ldv, v_bs, t, ldt, t_bs, c, ldc, c_bs, stream);
    }
    if (narrow) return launch_wy_update<64, 32>(batch, mr, w, nc, v, ldv, v_bs, t, ldt, t_bs, c, ldc, c_bs, stream);
    return launch_wy_update<64, 64>(batch, mr, w, nc, v, ldv, v_bs, t, ldt, t_bs, c, ldc, c_bs, stream);
}

}  // namespace

// The three FP32 cuBLAS GEMMs, for updates too narrow to give every SM a strip: cuBLAS splits a long K there.
int cublas_update(const qr2_update_args* a, cublasHandle_t h, const float* T, int64_t t_bs, float* W, float* W2) {
    const int w = a->w, mr = a->mr, nc = a->nc;
    const int64_t ws = a->work_bs;
    if (gemm(h, CUBLAS_OP_T, CUBLAS_OP_N, w, nc, mr, 1.f, a->v, a->ldv, a->v_bs, a->c, a->ldc, a->c_bs, 0.f, W, w, ws,
             a->batch, "cublasGemmStridedBatchedEx(W = V^T C)"))
        return 1;
    if (gemm(h, CUBLAS_OP_T, CUBLAS_OP_N, w, nc, w, 1.f, T, w, t_bs, W, w, ws, 0.f, W2, w, ws, a->batch,
             "cublasGemmStridedBatchedEx(W = T^T W)"))
        return 1;
    return gemm(h, CUBLAS_OP_N, CUBLAS_OP_N, mr, nc, w, -1.f, a->v, a->ldv, a->v_bs, W2, w, ws, 1.f, a->c, a->ldc,
                a->c_bs, a->batch, "cublasGemmStridedBatchedEx(C -= V W)");
}

extern "C" int64_t qr2_update_work_floats(int w, int nc) {
    return 2 * (int64_t)w * w + 2 * (int64_t)w * nc;  // G and T when T is built here; W and W2 for cuBLAS
}

extern "C" int qr2_update_run(const qr2_update_args* a, void* blas_handle, const qr2_device* dev, void* stream) {
    if (a->batch <= 0 || a->w <= 0 || a->nc <= 0) return 0;
    if (a->w > QR2_UPDATE_MAX_W) return qr2_record_error("update", "block wider than QR2_UPDATE_MAX_W");
    const int w = a->w, mr = a->mr;
    const float* T = a->t;
    int64_t t_bs = a->t_bs;
    cublasHandle_t h = (cublasHandle_t)blas_handle;
    float* G = a->work;
    float* Tw = G + (int64_t)w * w;
    const int64_t ws = a->work_bs;
    // fewer 32-column strips than SMs: a few tall matrices, where one block per strip would walk all mr rows alone
    const bool few_strips = a->batch * ((a->nc + 31) / 32) < dev->sms;
    if (T == nullptr || few_strips) {
        // torch's handle carries torch's math mode (TF32 when torch allows it); qr2 picks its own.
        if (check_cublas(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode")) return 1;
    }
    if (T == nullptr) {
        if (gemm(h, CUBLAS_OP_T, CUBLAS_OP_N, w, w, mr, 1.f, a->v, a->ldv, a->v_bs, a->v, a->ldv, a->v_bs, 0.f, G, w,
                 ws, a->batch, "cublasGemmStridedBatchedEx(G = V^T V)"))
            return 1;
        Qr2Launch how;
        how.grid = dim3((unsigned)a->batch);
        how.block = dim3(T_THREADS);
        how.smem = 3 * (size_t)w * w * sizeof(float);
        if (qr2_launch(larft_from_gram_kernel, how, stream, "larft_from_gram launch", (const float*)G, ws, a->tau,
                       a->tau_bs, Tw, ws, w))
            return 1;
        T = Tw;
        t_bs = ws;
    }
    if (few_strips) return cublas_update(a, h, T, t_bs, Tw + (int64_t)w * w, Tw + (int64_t)w * w + (int64_t)w * a->nc);
    // Q^T = Q_2^T Q_1^T for the blocks of the first UPDATE_W reflectors and the rest: T's diagonal blocks are their
    // T factors, and the later block's reflectors are zero above its first row.
    for (int k = 0; k < w; k += UPDATE_W) {
        const int wk = w - k < UPDATE_W ? w - k : UPDATE_W;
        if (wy_update(a->batch, mr - k, wk, a->nc, a->v + k * a->ldv + k, a->ldv, a->v_bs, T + (int64_t)k * w + k, w,
                      t_bs, a->c + k, a->ldc, a->c_bs, dev, stream))
            return 1;
    }
    return 0;
}
