// reduce.cuh - warp-level reductions shared by the kernel families.
#pragma once

#include <cuda_runtime.h>

template <typename T>
__device__ __forceinline__ T warp_sum(T x) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
    return x;
}

__device__ __forceinline__ float warp_max_of(float x) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, off));
    return x;
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
