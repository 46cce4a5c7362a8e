// transpose.cu - copies the input into H's column-major layout before an in-place route starts.
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

}  // namespace

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
