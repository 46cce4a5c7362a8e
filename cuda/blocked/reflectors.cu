// reflectors.cu - the operands of applying stored reflectors (orgqr, ormqr): the explicit V that the update reads,
// unpacked from geqrf's compact form, and the identity that Q is accumulated on.
#include "launch.cuh"

namespace {

constexpr int THREADS = 256;

// V (mr x w, column-major, ld ldv): zeros above the diagonal, ones on it, H's entries below it. H is read through its
// strides; consecutive threads walk rows, so H's usual column-major layout is read and V written in whole lines.
__global__ void __launch_bounds__(THREADS) unpack_kernel(int64_t batch, int mr, int w, const float* h, int64_t rs,
                                                         int64_t cs, int64_t h_bs, float* v, int64_t ldv,
                                                         int64_t v_bs) {
    const int64_t per = (int64_t)mr * w, total = per * batch;
    for (int64_t idx = blockIdx.x * (int64_t)THREADS + threadIdx.x; idx < total; idx += (int64_t)gridDim.x * THREADS) {
        const int64_t b = idx / per, r = idx - b * per;
        const int c = (int)(r / mr), i = (int)(r - (int64_t)c * mr);
        v[b * v_bs + (int64_t)c * ldv + i] = i < c ? 0.f : i == c ? 1.f : h[b * h_bs + i * rs + c * cs];
    }
}

__global__ void __launch_bounds__(THREADS) identity_kernel(int64_t batch, int m, int n, float* q) {
    const int64_t per = (int64_t)m * n, total = per * batch;
    for (int64_t idx = blockIdx.x * (int64_t)THREADS + threadIdx.x; idx < total; idx += (int64_t)gridDim.x * THREADS) {
        const int64_t r = idx % per, j = r / m;
        q[idx] = r - j * m == j ? 1.f : 0.f;
    }
}

dim3 grid_for(int64_t total) {
    const int64_t blocks = (total + THREADS - 1) / THREADS;
    return dim3((unsigned)(blocks < 65536 * 16 ? blocks : 65536 * 16));
}

}  // namespace

extern "C" int qr2_reflectors_unpack(int64_t batch, int mr, int w, const float* h, int64_t rs, int64_t cs,
                                     int64_t h_bs, float* v, int64_t ldv, int64_t v_bs, void* stream) {
    if (batch <= 0 || mr <= 0 || w <= 0) return 0;
    Qr2Launch how;
    how.grid = grid_for((int64_t)mr * w * batch);
    how.block = dim3(THREADS);
    return qr2_launch(unpack_kernel, how, stream, "unpack launch", batch, mr, w, h, rs, cs, h_bs, v, ldv, v_bs);
}

extern "C" int qr2_identity_run(int64_t batch, int m, int n, float* q, void* stream) {
    if (batch <= 0 || m <= 0 || n <= 0) return 0;
    Qr2Launch how;
    how.grid = grid_for((int64_t)m * n * batch);
    how.block = dim3(THREADS);
    return qr2_launch(identity_kernel, how, stream, "identity launch", batch, m, n, q);
}
