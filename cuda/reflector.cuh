// reflector.cuh - the device arithmetic of Householder reflectors shared by the kernel families: LAPACK slarfg's
// scalars, exact power-of-two scaling, and slarft's T by recursive doubling.
#pragma once

#include <cuda_runtime.h>

// Below this sum of squares of a column's tail (in a matrix scaled to max |a| in [0.5, 1)) FP32 squares and their
// sum lose bits to underflow and alpha^2 + ss may leave the normal range: the reflector's scalars are formed in FP64.
#define QR2_TINY_SUM_OF_SQUARES 0x1p-100f

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
// QR2_TINY_SUM_OF_SQUARES <= alpha^2 + ss <= m and 2^-50 <= |dd| < 2 sqrt(m)): the bare MUFU approximations, without the subnormal
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
// so that tau_u (u . x) u is the update), from ss >= QR2_TINY_SUM_OF_SQUARES (no underflow in the squares): beta, dd, tau, tau_u, and
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

// Multiplies by 2^e (|e| <= 252) with two normal power-of-two factors: exact unless the result is subnormal.
struct Pow2 {
    float lo, hi;
};

__device__ __forceinline__ Pow2 pow2(int e) {
    const int e1 = e / 2, e2 = e - e1;
    return {__int_as_float((127 + e1) << 23), __int_as_float((127 + e2) << 23)};
}

__device__ __forceinline__ float times(float x, Pow2 f) { return x * f.lo * f.hi; }

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
