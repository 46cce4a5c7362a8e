// copies.cuh - the copies the update (update.cu) makes: asynchronous copies global -> shared, and
// a row-major source's strips into column-major C (the first update of a row-major input writes H, exact zero strips
// included, -0 staying -0).
#pragma once

#include <stdint.h>

// Asynchronous copies global -> shared of 16 or 4 bytes; src_ok false writes zeros and reads nothing.
template <int BYTES>
__device__ __forceinline__ void copy_async(float* dst, const float* src, bool src_ok) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    if constexpr (BYTES == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(src_ok ? 16 : 0));
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(d), "l"(src), "r"(src_ok ? 4 : 0));
}
__device__ __forceinline__ void copy_async_commit() { asm volatile("cp.async.commit_group;"); }
template <int PENDING>
__device__ __forceinline__ void copy_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(PENDING));
}

// Rows 0 .. mr, columns 0 .. ncs of src (element (i, j) at src[i src_rs + j]) into c (column j at c + j ldc), by all
// the block's threads through 32 x 32 tiles of shared memory: rows read along the source's rows, columns written along
// C's.
__device__ __forceinline__ void copy_strip_from_rows(float (*tile)[33], const float* src, int64_t src_rs, float* c,
                                                     int64_t ldc, int mr, int ncs) {
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5, rows = blockDim.x >> 5;
    for (int i0 = 0; i0 < mr; i0 += 32)
        for (int jt = 0; jt < ncs; jt += 32) {
            for (int i = ty; i < 32; i += rows)
                if (i0 + i < mr && jt + tx < ncs) tile[i][tx] = src[(int64_t)(i0 + i) * src_rs + jt + tx];
            __syncthreads();
            for (int j = ty; j < 32; j += rows)
                if (jt + j < ncs && i0 + tx < mr) c[(int64_t)(jt + j) * ldc + i0 + tx] = tile[tx][j];
            __syncthreads();
        }
}

// A KC-row chunk of a row-major source's strip (rows row0 .., columns 0 .. ncs; zeros past mr and ncs) into shared
// memory at dst + at(r, col), by four warps: lane (fr, fc) copies rows 4 i + fr, columns fc + 32 h, fc = 8 warp +
// lane % 8, one float each, so that a warp reads four 32-byte pieces of rows.
template <int KC, int NT, typename At>
__device__ __forceinline__ void copy_chunk_from_rows(float* dst, At at, const float* src, int64_t src_rs, int row0,
                                                     int mr, int ncs) {
    const int lane = threadIdx.x & 31, fr = lane >> 3, fc = 8 * (threadIdx.x >> 5) + (lane & 7);
#pragma unroll
    for (int i = 0; i < KC / 4; ++i)
#pragma unroll
        for (int h = 0; h < NT / 32; ++h) {
            const int r = 4 * i + fr, col = fc + 32 * h, row = row0 + r;
            const bool ok = row < mr && col < ncs;
            copy_async<4>(dst + at(r, col), ok ? src + row * src_rs + col : src, ok);
        }
}
