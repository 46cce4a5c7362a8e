// update.cu - the blocked route's update: block reflector application (LAPACK slarft + slarfb) for the blocked route.
//
// H_0 H_1 ... H_{w-1} = I - V T V^T with T upper triangular (forward, column-wise storage).
// T comes from the Gram matrix G = V^T V by recursive doubling: for adjacent diagonal blocks
// T11 (s x s) and T22, the block above T22 is T12 = -T11 G12 T22 (G12 = V1^T V2). Blocks start at
// s = 1 with T_ii = tau_i, so a reflector with tau = 0 gives a zero row and column of T: the
// identity, as LAPACK intends. One thread block per matrix builds T in shared memory.
// The products with V and C are cuBLAS strided-batched GEMMs in FP32.
#include <cublas_v2.h>

#include "launch.cuh"

namespace {

constexpr int T_THREADS = 256;

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

}  // namespace

extern "C" int64_t qr2_update_work_floats(int w, int nc) { return 2 * (int64_t)w * w + 2 * (int64_t)w * nc; }

extern "C" int qr2_update_run(const qr2_update_args* a, void* blas_handle, const qr2_device* dev, void* stream) {
    (void)dev;
    if (a->batch <= 0 || a->w <= 0 || a->nc <= 0) return 0;
    if (a->w > QR2_UPDATE_MAX_W) return qr2_record_error("update", "block wider than QR2_UPDATE_MAX_W");
    const int w = a->w, mr = a->mr, nc = a->nc;
    cublasHandle_t h = (cublasHandle_t)blas_handle;
    float* G = a->work;
    float* T = G + (int64_t)w * w;
    float* W = T + (int64_t)w * w;
    float* W2 = W + (int64_t)w * nc;
    const int64_t ws = a->work_bs;

    // torch's handle carries torch's math mode (TF32 when torch allows it); qr2 picks its own.
    if (check_cublas(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode")) return 1;

    const float* Tuse = a->t;
    int64_t t_bs = a->t_bs;
    if (Tuse == nullptr) {
        if (gemm(h, CUBLAS_OP_T, CUBLAS_OP_N, w, w, mr, 1.f, a->v, a->ldv, a->v_bs, a->v, a->ldv, a->v_bs, 0.f, G, w,
                 ws, a->batch, "cublasGemmStridedBatchedEx(G = V^T V)"))
            return 1;
        Qr2Launch how;
        how.grid = dim3((unsigned)a->batch);
        how.block = dim3(T_THREADS);
        how.smem = 3 * (size_t)w * w * sizeof(float);
        if (qr2_launch(larft_from_gram_kernel, how, stream, "larft_from_gram launch", (const float*)G, ws, a->tau,
                       a->tau_bs, T, ws, w))
            return 1;
        Tuse = T;
        t_bs = ws;
    }

    if (gemm(h, CUBLAS_OP_T, CUBLAS_OP_N, w, nc, mr, 1.f, a->v, a->ldv, a->v_bs, a->c, a->ldc, a->c_bs, 0.f, W, w, ws,
             a->batch, "cublasGemmStridedBatchedEx(W = V^T C)"))
        return 1;
    if (gemm(h, CUBLAS_OP_T, CUBLAS_OP_N, w, nc, w, 1.f, Tuse, w, t_bs, W, w, ws, 0.f, W2, w, ws, a->batch,
             "cublasGemmStridedBatchedEx(W = T^T W)"))
        return 1;
    if (gemm(h, CUBLAS_OP_N, CUBLAS_OP_N, mr, nc, w, -1.f, a->v, a->ldv, a->v_bs, W2, w, ws, 1.f, a->c, a->ldc,
             a->c_bs, a->batch, "cublasGemmStridedBatchedEx(C -= V W)"))
        return 1;
    return 0;
}
