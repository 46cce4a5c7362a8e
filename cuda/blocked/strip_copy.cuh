// strip_copy.cuh - the updates' copy of a strip of a row-major source into column-major C unchanged (update.cu and
// update_fp16.cu: the first update of a row-major input writes H, exact zero strips included, -0 staying -0).
#pragma once

#include <stdint.h>

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
