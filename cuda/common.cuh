// common.cuh - small helpers shared by the kernel families: error recording, warp reductions.
#pragma once

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdint.h>

#include "qr2_cuda.h"

// Records "qr2.geqrf: <what> failed: <CUDA error name>: <CUDA message>" for qr2_cuda_last_error().
int qr2_record_cuda_error(cudaError_t err, const char* what);
// Records a failure that has no CUDA error code (e.g. a cuBLAS status).
int qr2_record_error(const char* what, const char* detail);

// Returns from the enclosing launcher when a launch (or any prior asynchronous work) failed.
#define QR2_CHECK_LAUNCH(what)                                        \
    do {                                                              \
        cudaError_t qr2_err_ = cudaGetLastError();                    \
        if (qr2_err_ != cudaSuccess) return qr2_record_cuda_error(qr2_err_, what); \
    } while (0)

// Launches kernel<<<grid, block, smem, stream>>> with `args` (cudaLaunchKernel's argument array). A configuration
// the same host thread launched before on the same stream and device replays a cached one-node CUDA graph instead,
// which costs the host half as much (graph_launch.cu); a stream being captured always gets a plain launch.
int qr2_launch_kernel(const void* kernel, dim3 grid, dim3 block, size_t smem, void* stream, void** args,
                      const char* what);

#define QR2_CHECK_CUDA(call, what)                                    \
    do {                                                              \
        cudaError_t qr2_err_ = (call);                                \
        if (qr2_err_ != cudaSuccess) return qr2_record_cuda_error(qr2_err_, what); \
    } while (0)

template <typename T>
__device__ __forceinline__ T warp_sum(T x) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
    return x;
}

// LAPACK slarfg's scalars from alpha and the tail's sum of squares ss > 0: beta = -sign(alpha) ||(alpha, x)||,
// tau = (beta - alpha) / beta, and scal = 1 / (alpha - beta), which scales the tail into v.
template <typename T>
__device__ __forceinline__ void householder_scalars(T alpha, T ss, T& beta, T& tau, T& scal) {
    const T norm = sqrt(fma(alpha, alpha, ss));
    beta = alpha >= T(0) ? -norm : norm;
    tau = (beta - alpha) / beta;
    scal = T(1) / (alpha - beta);
}

// rsqrtf and 1 / x for arguments known to be normal (below: a matrix scaled to max |a| < 1 gives
// 2^-100 <= alpha^2 + ss <= m and 2^-50 <= |dd| < 2 sqrt(m)): the bare MUFU approximations, without the subnormal
// fix-ups of rsqrtf and __fdividef (same accuracy for normal arguments; Inf and NaN pass through alike).
__device__ __forceinline__ float rsqrt_normal(float x) {
    float y;
    asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ float rcp_normal(float x) {
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// slarfg's scalars in FP32 for a reflector applied unscaled (u = x with u_p = dd = alpha - beta, tau_u = tau / dd^2,
// so that tau_u (u . x) u is the update), from ss >= 2^-100 (no underflow in the squares): beta, dd, tau, tau_u, and
// rd = 1 / dd, which scales the tail into v at the output.
struct UnscaledReflector {
    float beta, dd, tau, tau_u, rd;
};

__device__ __forceinline__ UnscaledReflector unscaled_reflector(float alpha, float ss) {
    UnscaledReflector f;
    const float t = fmaf(alpha, alpha, ss);
    const float rn = rsqrt_normal(t);
    f.beta = alpha >= 0.f ? -t * rn : t * rn;
    f.dd = alpha - f.beta;  // |dd| = |alpha| + ||x||: no cancellation
    f.rd = rcp_normal(f.dd);
    f.tau = fabsf(f.dd) * rn;
    f.tau_u = rn * fabsf(f.rd);
    return f;
}

// One round of a warp butterfly reduce-scatter over the 2*HALF slots d[0 .. 2*HALF): lanes with bit `BIT`
// set keep the upper half, the others the lower half, each adding its partner's copy of the half it keeps
// (the kept half ends in d[0 .. HALF)).
template <int HALF, int BIT, int N>
__device__ __forceinline__ void butterfly_scatter_round(float (&d)[N], int lane) {
    static_assert(2 * HALF <= N, "round wider than the slots");
    const bool upper = lane & BIT;
#pragma unroll
    for (int i = 0; i < HALF; ++i) {
        const float send = upper ? d[i] : d[i + HALF];
        const float keep = upper ? d[i + HALF] : d[i];
        d[i] = keep + __shfl_xor_sync(0xffffffffu, send, BIT);
    }
}

// Butterfly reduce-scatter of 32 slots (31 shuffles): afterwards d[0] of lane l holds the warp-wide sum of slot l.
__device__ __forceinline__ float warp_reduce_scatter32(float (&d)[32], int lane) {
    butterfly_scatter_round<16, 16>(d, lane);
    butterfly_scatter_round<8, 8>(d, lane);
    butterfly_scatter_round<4, 4>(d, lane);
    butterfly_scatter_round<2, 2>(d, lane);
    butterfly_scatter_round<1, 1>(d, lane);
    return d[0];
}

// LAPACK slarft (forward, column-wise) of up to 32 reflectors, from their dots G[k][j] = v_k . v_j (k < j;
// every such entry finite, also past column kk) and tau, by recursive doubling: for adjacent diagonal blocks
// T11 and T22, T12 = -T11 G12 T22. Reflectors past kk are identities (tau 0). T gets T[i][j] for i <= j (0
// below); X is scratch. Block-wide: thread t of nthreads, every thread of the block calls it.
__device__ inline void larft_doubling(const float (*G)[33], const float* taus, int kk, float (*T)[33], float (*X)[33],
                                      int t, int nthreads) {
    constexpr int W = 32;
    for (int r = t; r < W * W; r += nthreads) {
        const int i = r % W, jj = r / W;
        T[i][jj] = i == jj && i < kk ? taus[i] : 0.f;
    }
    __syncthreads();
    for (int s = 1; s < W; s *= 2) {
        for (int r = t; r < W * W / 2; r += nthreads) {  // X = G12 T22 for every merge of this level
            const int i = r % s, jj = (r / s) % s, b0 = (r / (s * s)) * 2 * s;
            if (b0 + s < W) {
                float acc = 0.f;
                for (int l = 0; l <= jj; ++l) acc += G[b0 + i][b0 + s + l] * T[b0 + s + l][b0 + s + jj];
                X[b0 + i][jj] = acc;
            }
        }
        __syncthreads();
        for (int r = t; r < W * W / 2; r += nthreads) {  // T12 = -T11 X
            const int i = r % s, jj = (r / s) % s, b0 = (r / (s * s)) * 2 * s;
            if (b0 + s < W) {
                float acc = 0.f;
                for (int l = i; l < s; ++l) acc += T[b0 + i][b0 + l] * X[b0 + l][jj];
                T[b0 + i][b0 + s + jj] = -acc;
            }
        }
        __syncthreads();
    }
}

// Raises the kernel's dynamic shared memory limit to `bytes` when the launch needs more than the default 48 KB, its
// static shared memory (`static_bytes`) included (idempotent, cheap).
template <typename Kernel>
static int qr2_allow_smem(Kernel kernel, int64_t bytes, const char* what, int64_t static_bytes = 0) {
    if (bytes + static_bytes <= 48 * 1024) return 0;
    QR2_CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes),
                   what);
    return 0;
}

// The launch attribute for thread-block clusters of `blocks` blocks along x.
static inline cudaLaunchAttribute qr2_cluster_dim(unsigned blocks) {
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = blocks;
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    return attr;
}

// Multiplies by 2^e (|e| <= 252) with two normal power-of-two factors: exact unless the result is subnormal.
struct Pow2 {
    float lo, hi;
};

__device__ __forceinline__ Pow2 pow2(int e) {
    const int e1 = e / 2, e2 = e - e1;
    return {__int_as_float((127 + e1) << 23), __int_as_float((127 + e2) << 23)};
}

__device__ __forceinline__ float times(float x, Pow2 f) { return x * f.lo * f.hi; }

// ---- mbarriers and distributed shared memory (thread-block clusters) ----

__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void bar_init(uint64_t* bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}

__device__ __forceinline__ void bar_arrive(uint64_t* bar) {
    asm volatile("{\n\t.reg .b64 st;\n\tmbarrier.arrive.release.cta.shared::cta.b64 st, [%0];\n\t}"
                 ::"r"(smem_addr(bar))
                 : "memory");
}

// Arms an mbarrier that another block of the cluster feeds with st.async: it completes once `bytes` have landed.
__device__ __forceinline__ void bar_expect_bytes(uint64_t* bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}

// The shared::cluster address of `p`'s twin in block `rank` of the cluster.
__device__ __forceinline__ unsigned remote_addr(const void* p, unsigned rank) {
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_addr(p)), "r"(rank));
    return remote;
}

// Stores one float into another block's shared memory and counts its 4 bytes on that block's mbarrier
// (`bar`, also remote): no fence and no release on the producer's side.
__device__ __forceinline__ void store_remote(unsigned addr, float value, unsigned bar) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(addr),
                 "r"(__float_as_uint(value)), "r"(bar)
                 : "memory");
}

// The same for four floats (16 bytes, 16-byte aligned).
__device__ __forceinline__ void store_remote4(unsigned addr, float4 v, unsigned bar) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];"
                 ::"r"(addr), "r"(__float_as_uint(v.x)), "r"(__float_as_uint(v.y)), "r"(__float_as_uint(v.z)),
                 "r"(__float_as_uint(v.w)), "r"(bar)
                 : "memory");
}

// Waits until the reflector behind `bar` is published (each mbarrier completes once: phase parity 0).
// CTA-scope acquire: the reflector sits in this block's shared memory beside the mbarrier, whether this
// block's warps stored it or the other block's st.async did (a cluster-scope acquire would invalidate L1
// on every wait: measured, a third of the old kernel's stall samples).
__device__ __forceinline__ void bar_wait(uint64_t* bar) {
    unsigned done = 0;
    while (!done)
        asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(done) : "r"(smem_addr(bar)) : "memory");
}
