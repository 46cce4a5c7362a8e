// reflectors.cu - the operands of applying stored reflectors (orgqr, ormqr): the explicit V that the update reads,
// unpacked from geqrf's compact form, and the identity that Q is accumulated on.
#include "launch.cuh"

namespace {

constexpr int THREADS = 256;
constexpr int64_t MAX_BLOCKS = 65536 * 16;

// One thread block per column (grid-strided): a column's rows are contiguous in V and Q, so each thread writes every
// THREADS-th row with no index division (the element-wise form, a 64-bit division per element, moved 0.75 TB/s).

// V (mr x w, column-major, ld ldv): zeros above the diagonal, ones on it, H's entries below it; H read through its
// strides (its usual column-major layout is read in whole lines too).
__global__ void __launch_bounds__(THREADS) unpack_kernel(int64_t batch, int mr, int w, const float* h, int64_t rs,
                                                         int64_t cs, int64_t h_bs, float* v, int64_t ldv,
                                                         int64_t v_bs) {
    for (int64_t col = blockIdx.x; col < batch * w; col += gridDim.x) {
        const int64_t b = col / w;
        const int c = (int)(col - b * w);
        const float* hc = h + b * h_bs + c * cs;
        float* vc = v + b * v_bs + c * ldv;
        for (int i = threadIdx.x; i < mr; i += THREADS) vc[i] = i < c ? 0.f : i == c ? 1.f : hc[i * rs];
    }
}

__global__ void __launch_bounds__(THREADS) identity_kernel(int64_t batch, int m, int n, float* q) {
    for (int64_t col = blockIdx.x; col < batch * n; col += gridDim.x) {
        const int j = (int)(col % n);
        float* qc = q + col * m;
        for (int i = threadIdx.x; i < m; i += THREADS) qc[i] = i == j ? 1.f : 0.f;
    }
}

dim3 grid_for(int64_t columns) { return dim3((unsigned)(columns < MAX_BLOCKS ? columns : MAX_BLOCKS)); }

}  // namespace

extern "C" int qr2_reflectors_unpack(int64_t batch, int mr, int w, const float* h, int64_t rs, int64_t cs,
                                     int64_t h_bs, float* v, int64_t ldv, int64_t v_bs, void* stream) {
    if (batch <= 0 || mr <= 0 || w <= 0) return 0;
    Qr2Launch how;
    how.grid = grid_for(batch * w);
    how.block = dim3(THREADS);
    return qr2_launch(unpack_kernel, how, stream, "unpack launch", batch, mr, w, h, rs, cs, h_bs, v, ldv, v_bs);
}

extern "C" int qr2_identity_run(int64_t batch, int m, int n, float* q, void* stream) {
    if (batch <= 0 || m <= 0 || n <= 0) return 0;
    Qr2Launch how;
    how.grid = grid_for(batch * n);
    how.block = dim3(THREADS);
    return qr2_launch(identity_kernel, how, stream, "identity launch", batch, m, n, q);
}
