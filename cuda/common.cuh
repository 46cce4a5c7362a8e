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

// Raises the kernel's dynamic shared memory limit to what `bytes` needs (idempotent, cheap).
template <typename Kernel>
static int qr2_allow_smem(Kernel kernel, int64_t bytes, const char* what) {
    if (bytes <= 48 * 1024) return 0;
    QR2_CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes),
                   what);
    return 0;
}
