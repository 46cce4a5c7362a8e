// transpose.cu - the blocked route's passes over the input before it starts: the copy into H's column-major layout,
// and the search for each matrix's exactly zero trailing columns.
//
// A row-major input (the usual contiguous (*, m, n) tensor) needs a transpose per matrix: 64 x 64 tiles go through
// shared memory (padded against bank conflicts) so that both the reads along a row and the writes along a column
// are coalesced, in 16-byte pieces where sizes and strides are multiples of four floats. Each thread has four
// pieces in flight before it writes any: the 32 x 32 scalar version moved 640 x 512 x 512 in 515 us (1.3 TB/s,
// H200). Any other strides take the direct path.
#include "launch.cuh"

namespace {

constexpr int TILE = 64;
constexpr int TILE_THREADS = 256;  // 16 x 16: a thread moves four 4-float pieces each way

template <bool VEC>
__global__ void __launch_bounds__(TILE_THREADS) transpose_tiles_kernel(const float* src, int64_t rs, int64_t bs,
                                                                     float* dst, int64_t ldd, int64_t dst_bs, int m,
                                                                     int n, int64_t batch) {
    qr2_follow_previous_kernel();  // launched with Qr2Launch::pdl
    __shared__ float tile[TILE][TILE + 1];
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const int j0 = blockIdx.x * TILE, i0 = blockIdx.y * TILE;
    for (int64_t b = blockIdx.z; b < batch; b += gridDim.z) {
        const float* s = src + b * bs;
        float* d = dst + b * dst_bs;
        float x[4][4];
#pragma unroll
        for (int p = 0; p < 4; ++p) {  // rows i0 + ty + 16 p, columns j0 + 4 tx .. + 4 (unit stride)
            const int i = i0 + ty + 16 * p, j = j0 + 4 * tx;
            if constexpr (VEC) {
                const float4 v = i < m && j < n ? *reinterpret_cast<const float4*>(s + (int64_t)i * rs + j)
                                                : make_float4(0.f, 0.f, 0.f, 0.f);
                x[p][0] = v.x, x[p][1] = v.y, x[p][2] = v.z, x[p][3] = v.w;
            } else {
#pragma unroll
                for (int e = 0; e < 4; ++e) x[p][e] = i < m && j + e < n ? s[(int64_t)i * rs + j + e] : 0.f;
            }
        }
#pragma unroll
        for (int p = 0; p < 4; ++p)
#pragma unroll
            for (int e = 0; e < 4; ++e) tile[ty + 16 * p][4 * tx + e] = x[p][e];
        __syncthreads();
#pragma unroll
        for (int p = 0; p < 4; ++p) {  // columns j0 + ty + 16 p, rows i0 + 4 tx .. + 4
            const int j = j0 + ty + 16 * p, i = i0 + 4 * tx;
            if (j >= n) continue;
            float* out = d + (int64_t)j * ldd + i;
            if constexpr (VEC) {
                if (i < m)
                    *reinterpret_cast<float4*>(out) = make_float4(tile[4 * tx][ty + 16 * p], tile[4 * tx + 1][ty + 16 * p],
                                                              tile[4 * tx + 2][ty + 16 * p], tile[4 * tx + 3][ty + 16 * p]);
            } else {
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    if (i + e < m) out[e] = tile[4 * tx + e][ty + 16 * p];
            }
        }
        __syncthreads();
    }
}

__global__ void copy_strided_kernel(const float* src, int64_t rs, int64_t cs, int64_t bs, float* dst, int64_t ldd,
                                    int64_t dst_bs, int m, int n, int64_t batch) {
    qr2_follow_previous_kernel();  // launched with Qr2Launch::pdl
    const int64_t per = (int64_t)m * n, total = per * batch;
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t b = idx / per, r = idx - b * per, j = r / m, i = r - j * m;
        dst[b * dst_bs + j * ldd + i] = src[b * bs + i * rs + j * cs];
    }
}

// zero_from[b] = 1 + the last column of matrix b holding a non-zero entry (NaN counts; -0 does not): block (b, s)
// takes rows s rows_per .. + rows_per (all of them where the grid has one block a matrix, which then stores the
// result; else the blocks take the largest into a zeroed zero_from). It reads the last column alone first, so a
// matrix whose last column is not zero (dense inputs) costs one column's read: a 32-column block cost dense blocked
// cases 1-3 % (docs/results/2026-12-04-h200-zero-tails.txt). Otherwise it walks 32-column blocks from the right,
// stopping at the first with a non-zero entry in its rows, each thread with its eight loads of a block in flight
// together, along the input's contiguous dimension: columns where rows are contiguous (cs == 1), rows otherwise.
constexpr int ZERO_THREADS = 256, ZERO_ROWS = 64;
constexpr int ZERO_SPLIT_M = 4096;
__global__ void __launch_bounds__(ZERO_THREADS) zero_tail_kernel(const float* a, int64_t rs, int64_t cs, int64_t bs,
                                                                  int64_t m, int n, int64_t rows_per, int* zero_from) {
    qr2_follow_previous_kernel();  // launched with Qr2Launch::pdl
    __shared__ unsigned found;     // bit c: column jb + c holds a non-zero entry in this block's rows
    const int64_t b = blockIdx.x;
    const int64_t r0 = blockIdx.y * rows_per, r1 = min(m, r0 + rows_per);  // 64-bit: m may be near 2^31
    const int t = threadIdx.x;
    a += b * bs;
    auto store = [&](int from) {  // by thread 0
        if (gridDim.y == 1) zero_from[b] = from;
        else if (from > 0) atomicMax(zero_from + b, from);
    };
    uint32_t last = 0u;
#pragma unroll 4
    for (int64_t i = r0 + t; i < r1; i += ZERO_THREADS) last |= __float_as_uint(a[i * rs + (n - 1) * cs]);
    if (__syncthreads_or((last & 0x7fffffffu) != 0u)) {
        if (t == 0) store(n);
        return;
    }
    const bool by_columns = cs == 1;
    // by_columns: column jb + t % 32, rows r0 + t / 32 + 8 k; else: row r0 + t % 64, columns jb + t / 64 + 4 k
    const int i0 = by_columns ? t >> 5 : t & 63, c0 = by_columns ? t & 31 : t >> 6;
    const int di = by_columns ? 8 : 0, dc = by_columns ? 0 : 4;
    for (int jb = (n - 1) / 32 * 32; jb >= 0; jb -= 32) {
        if (t == 0) found = 0u;
        __syncthreads();
        unsigned mask = 0u;  // this thread's columns (relative to jb) with a non-zero entry
        for (int64_t rr = r0; rr < r1; rr += ZERO_ROWS) {
            uint32_t bits[8];
#pragma unroll
            for (int k = 0; k < 8; ++k) {
                const int64_t i = rr + i0 + di * k;
                const int c = c0 + dc * k;
                bits[k] = i < r1 && jb + c < n ? __float_as_uint(a[i * rs + (jb + c) * cs]) & 0x7fffffffu : 0u;
            }
#pragma unroll
            for (int k = 0; k < 8; ++k)
                if (bits[k] != 0u) mask |= 1u << (c0 + dc * k);
        }
        mask = __reduce_or_sync(0xffffffffu, mask);
        if ((t & 31) == 0 && mask != 0u) atomicOr(&found, mask);
        __syncthreads();
        const unsigned f = found;
        if (f != 0u) {
            if (t == 0) store(jb + 32 - __clz((int)f));
            return;
        }
        __syncthreads();  // everyone has read `found` before thread 0 clears it
    }
    if (t == 0) store(0);  // a zero matrix
}

}  // namespace

extern "C" int qr2_zero_tail_run(const float* a, int64_t rs, int64_t cs, int64_t bs, int m, int n, int64_t batch,
                                 int* zero_from, void* stream) {
    if (batch <= 0) return 0;
    if (batch > INT32_MAX) return qr2_record_error("zero_tail launch", "more than 2^31 - 1 matrices");
    // One block a matrix up to ZERO_SPLIT_M rows (no memset, one launch); taller ones spread their rows over blocks.
    // 64-bit arithmetic: m + ZERO_ROWS overflows int near 2^31 rows.
    const int64_t chunks = m <= ZERO_SPLIT_M ? 1 : ((int64_t)m + ZERO_ROWS - 1) / ZERO_ROWS;
    const int64_t most = chunks < 65535 ? chunks : 65535;
    const int64_t rows_per = m <= ZERO_SPLIT_M ? m : (chunks + most - 1) / most * ZERO_ROWS;
    const int64_t splits = m <= 0 ? 1 : ((int64_t)m + rows_per - 1) / rows_per;
    if (splits > 1 || m <= 0 || n <= 0)
        QR2_CHECK_CUDA(cudaMemsetAsync(zero_from, 0, batch * sizeof(int), (cudaStream_t)stream), "zero_tail memset");
    if (m <= 0 || n <= 0) return 0;
    Qr2Launch how;
    how.pdl = true;  // the kernel starts with qr2_follow_previous_kernel
    how.grid = dim3((unsigned)batch, (unsigned)splits);
    how.block = dim3(ZERO_THREADS);
    return qr2_launch(zero_tail_kernel, how, stream, "zero_tail launch", a, rs, cs, bs, (int64_t)m, n, rows_per,
                      zero_from);
}

extern "C" int qr2_transpose_run(const float* src, int64_t rs, int64_t cs, int64_t bs, float* dst, int64_t ldd,
                                 int64_t dst_bs, int m, int n, int64_t batch, void* stream) {
    if (batch <= 0 || m <= 0 || n <= 0) return 0;
    Qr2Launch how;
    how.pdl = true;  // the kernel starts with qr2_follow_previous_kernel
    if (cs == 1 && rs != 1 && (m + TILE - 1) / TILE <= 65535) {
        how.grid = dim3((n + TILE - 1) / TILE, (m + TILE - 1) / TILE, (unsigned)(batch < 65535 ? batch : 65535));
        how.block = dim3(TILE_THREADS);
        const bool vec = m % 4 == 0 && n % 4 == 0 && rs % 4 == 0 && bs % 4 == 0 && ldd % 4 == 0 && dst_bs % 4 == 0 &&
                         (uintptr_t)src % 16 == 0 && (uintptr_t)dst % 16 == 0;
        return qr2_launch(vec ? transpose_tiles_kernel<true> : transpose_tiles_kernel<false>, how, stream,
                          "transpose_tiles launch", src, rs, bs, dst, ldd, dst_bs, m, n, batch);
    }
    const int64_t blocks = ((int64_t)m * n * batch + 255) / 256;
    how.grid = dim3((unsigned)(blocks < 65536 * 16 ? blocks : 65536 * 16));
    how.block = dim3(256);
    return qr2_launch(copy_strided_kernel, how, stream, "copy_strided launch", src, rs, cs, bs, dst, ldd, dst_bs, m, n,
                      batch);
}
