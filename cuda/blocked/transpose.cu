// transpose.cu - copies the input into H's column-major layout before an in-place route starts.
//
// A row-major input (the usual contiguous (*, m, n) tensor) needs a transpose per matrix: 32 x 32
// tiles go through shared memory (padded against bank conflicts) so that both the reads along a row
// and the writes along a column are coalesced. Any other strides take the direct path.
#include "launch.cuh"

namespace {

constexpr int TILE = 32;
constexpr int ROWS_PER_PASS = 8;

__global__ void __launch_bounds__(TILE * ROWS_PER_PASS) transpose_tiles_kernel(const float* src, int64_t rs, int64_t bs,
                                                                             float* dst, int m, int n, int64_t batch) {
    __shared__ float tile[TILE][TILE + 1];
    const int j0 = blockIdx.x * TILE, i0 = blockIdx.y * TILE;
    for (int64_t b = blockIdx.z; b < batch; b += gridDim.z) {
        const float* s = src + b * bs;
        float* d = dst + b * (int64_t)m * n;
        for (int r = threadIdx.y; r < TILE; r += ROWS_PER_PASS) {  // read rows i0 + r along j (unit stride)
            const int i = i0 + r, j = j0 + threadIdx.x;
            if (i < m && j < n) tile[r][threadIdx.x] = s[(int64_t)i * rs + j];
        }
        __syncthreads();
        for (int r = threadIdx.y; r < TILE; r += ROWS_PER_PASS) {  // write columns j0 + r along i
            const int j = j0 + r, i = i0 + threadIdx.x;
            if (i < m && j < n) d[(int64_t)j * m + i] = tile[threadIdx.x][r];
        }
        __syncthreads();
    }
}

__global__ void copy_strided_kernel(const float* src, int64_t rs, int64_t cs, int64_t bs, float* dst, int m, int n,
                                    int64_t batch) {
    const int64_t per = (int64_t)m * n, total = per * batch;
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t b = idx / per, r = idx - b * per, j = r / m, i = r - j * m;
        dst[idx] = src[b * bs + i * rs + j * cs];
    }
}

}  // namespace

extern "C" int qr2_transpose_run(const float* src, int64_t rs, int64_t cs, int64_t bs, float* dst, int m, int n,
                                 int64_t batch, void* stream) {
    if (batch <= 0 || m <= 0 || n <= 0) return 0;
    Qr2Launch how;
    if (cs == 1 && rs != 1 && (m + TILE - 1) / TILE <= 65535) {
        how.grid = dim3((n + TILE - 1) / TILE, (m + TILE - 1) / TILE, (unsigned)(batch < 65535 ? batch : 65535));
        how.block = dim3(TILE, ROWS_PER_PASS);
        return qr2_launch(transpose_tiles_kernel, how, stream, "transpose_tiles launch", src, rs, bs, dst, m, n, batch);
    }
    const int64_t blocks = ((int64_t)m * n * batch + 255) / 256;
    how.grid = dim3((unsigned)(blocks < 65536 * 16 ? blocks : 65536 * 16));
    how.block = dim3(256);
    return qr2_launch(copy_strided_kernel, how, stream, "copy_strided launch", src, rs, cs, bs, dst, m, n, batch);
}
