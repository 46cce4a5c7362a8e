// register_qr.cu - Householder QR of whole small matrices held in registers: one thread block per matrix,
// or a cluster of two blocks that split its columns. One launch does all of it: load (any strides),
// factor, write H and tau.
//
// Layout: warp w owns an 8-column strip; lane l holds rows l, l+32, ... (RL per lane, m <= 32 RL) of
// its 8 columns. Every reflector stays in shared memory once built (lane-major, so reads are free of
// bank conflicts), and each has an mbarrier that completes when it is published. A warp applies, in
// order, every reflector built to its left (waiting on that reflector's mbarrier only: there is no
// block-wide barrier in the factorisation), then factors its own strip column by column: build
// reflector r from column r (LAPACK slarfg), publish it, apply it to the strip's remaining columns.
// In a 2-block cluster the first block holds the left strips and publishes its reflectors into both
// blocks' shared memory through distributed shared memory. Every producer lane release-arrives on the
// mbarriers (count 32) after its own stores. The second block never needs to publish to the first.
// Applying a reflector to a strip needs the 8 dots v . a_c: a butterfly reduce-scatter over the warp
// (7 + 2 shuffles), a broadcast of the 8 sums (8 shuffles), then a_c -= (tau w_c) v. Register rows
// that lie wholly above the reflector's diagonal are skipped.
// The matrix is first scaled by a power of two (exact) to max|a| in [0.5, 1), so the FP32 dots cannot
// overflow; R is scaled back on the way out. A column so small that its squares lose precision in FP32
// (1e-15 of the matrix, or subnormal) gets its norm and scalars in FP64.
#include <cooperative_groups.h>
#include <float.h>

#include "common.cuh"

namespace cg = cooperative_groups;

namespace {

constexpr int STRIP = 8;  // columns per warp
constexpr unsigned FULL = 0xffffffffu;

// Registers per thread: 8 RL for the strip plus ~40 others (~48 in a cluster: remote addresses).
__host__ __device__ constexpr int regs_per_thread(int RL, int C) { return (8 * RL + 32 + 8 * C + 7) / 8 * 8; }
// Warps one block may run: each of the four schedulers holds a quarter of them in its quarter
// (16384 registers) of the register file.
__host__ __device__ constexpr int max_warps(int RL, int C) {
    return 4 * (16384 / (32 * regs_per_thread(RL, C))) < 32 ? 4 * (16384 / (32 * regs_per_thread(RL, C))) : 32;
}

struct Head {
    float wmax[32];
    float cmax;
};

// Dynamic shared memory: the head, K mbarriers, K taus, then K reflectors of 32 RL floats.
struct Layout {
    int bar, tau, v, bytes;
};
__host__ __device__ inline Layout layout(int K, int RL) {
    Layout l;
    l.bar = (int)((sizeof(Head) + 15) / 16 * 16);
    l.tau = l.bar + 8 * K;
    l.v = l.tau + ((4 * K + 15) / 16 * 16);
    l.bytes = l.v + 4 * 32 * RL * K;
    return l;
}

__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void bar_init(uint64_t* bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}

__device__ __forceinline__ void bar_arrive(uint64_t* bar) {
    asm volatile("{\n\t.reg .b64 st;\n\tmbarrier.arrive.release.cta.shared::cta.b64 st, [%0];\n\t}" ::"r"(smem_addr(bar))
                 : "memory");
}

// Arrives on the mbarrier at the same offset in block `rank` of the cluster.
__device__ __forceinline__ void bar_arrive_remote(uint64_t* bar, unsigned rank) {
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_addr(bar)), "r"(rank));
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
}

// Waits until the reflector behind `bar` is published (each mbarrier completes once: phase parity 0).
// CTA-scope acquire even for arrivals from the other block of a cluster, as CUTLASS's cluster barriers
// wait: the data sits in this block's shared memory beside the mbarrier, and a cluster-scope acquire
// would invalidate L1 on every wait (measured: a third of the kernel's stall samples).
__device__ __forceinline__ void bar_wait(uint64_t* bar) {
    unsigned done = 0;
    while (!done)
        asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(done) : "r"(smem_addr(bar)) : "memory");
}

// Warp-wide sums of the 8 per-lane partials d[c], returned in d on every lane: reduce-scatter (lane l
// ends with the sum of slot (l >> 2) & 7), then a broadcast from lanes 0, 4, ..., 28.
__device__ __forceinline__ void strip_sums(float (&d)[STRIP], int lane) {
    butterfly_scatter_round<4, 16>(d, lane);
    butterfly_scatter_round<2, 8>(d, lane);
    butterfly_scatter_round<1, 4>(d, lane);
    float s = d[0];
    s += __shfl_xor_sync(FULL, s, 2);
    s += __shfl_xor_sync(FULL, s, 1);
#pragma unroll
    for (int c = 0; c < STRIP; ++c) d[c] = __shfl_sync(FULL, s, 4 * c);
}

// Applies reflector r (this lane's rows of v, tau) to the strip's columns first..7 (those < ncols).
template <int RL>
__device__ __forceinline__ void apply_reflector(const float (&v)[RL], float tau, float (&x)[STRIP][RL], int first,
                                                int ncols, int r, int lane) {
    float d[STRIP];
#pragma unroll
    for (int c = 0; c < STRIP; ++c) {
        d[c] = 0.f;
#pragma unroll
        for (int i = 0; i < RL; ++i)
            if (32 * i + 31 >= r) d[c] = fmaf(v[i], x[c][i], d[c]);  // rows above r: v is zero there
    }
    strip_sums(d, lane);
#pragma unroll
    for (int c = 0; c < STRIP; ++c) {
        if (c < first || c >= ncols) continue;
        const float s = tau * d[c];
#pragma unroll
        for (int i = 0; i < RL; ++i)
            if (32 * i + 31 >= r) x[c][i] = fmaf(-s, v[i], x[c][i]);
    }
}

// Applies reflector r to one column only: the next column to factor, ahead of the rest of the strip.
template <int RL>
__device__ __forceinline__ void apply_one(const float (&v)[RL], float tau, float (&xc)[RL], int r) {
    float d = 0.f;
#pragma unroll
    for (int i = 0; i < RL; ++i)
        if (32 * i + 31 >= r) d = fmaf(v[i], xc[i], d);
    const float s = tau * warp_sum(d);
#pragma unroll
    for (int i = 0; i < RL; ++i)
        if (32 * i + 31 >= r) xc[i] = fmaf(-s, v[i], xc[i]);
}

// LAPACK slarfg on column x (rows >= r; this lane holds rows lane + 32 i): leaves beta on the diagonal
// and v below it in x, and this lane's rows of v (1 at row r, 0 above) in v. Returns tau.
// FP32 with one warp reduction; only a column whose squares lose precision in FP32 (sum below
// 2^-100 of a matrix scaled to max 1) is redone in FP64.
template <int RL>
__device__ __forceinline__ float make_reflector(float (&x)[RL], float (&v)[RL], int r, int lane) {
    const int rel = r - lane;  // register i holds row r exactly when 32 i == rel
    float ss = 0.f, alpha = 0.f;
    bool tail = false;
#pragma unroll
    for (int i = 0; i < RL; ++i) {
        if (32 * i + 31 < r) continue;
        ss = 32 * i > rel ? fmaf(x[i], x[i], ss) : ss;
        tail |= 32 * i > rel && x[i] != 0.f;
        alpha = 32 * i == rel ? x[i] : alpha;
    }
    ss = warp_sum(ss);
    alpha = __shfl_sync(FULL, alpha, r & 31);
    const bool reflect = __any_sync(FULL, tail);  // else tau = 0 and the column stays as it is (LAPACK)
    float beta = alpha, tau = 0.f, scal = 0.f;
    double scal64 = 0.0;
    const bool tiny = reflect && !(ss >= 0x1p-100f);
    if (reflect && !tiny) {
        householder_scalars(alpha, ss, beta, tau, scal);
    } else if (tiny) {  // FP64: squares of FP32 values neither overflow nor underflow
        double ss64 = 0.0;
#pragma unroll
        for (int i = 0; i < RL; ++i)
            if (32 * i > rel) ss64 = fma((double)x[i], (double)x[i], ss64);
        double beta64, tau64;
        householder_scalars((double)alpha, warp_sum(ss64), beta64, tau64, scal64);
        beta = (float)beta64;
        tau = (float)tau64;
    }
#pragma unroll
    for (int i = 0; i < RL; ++i) {
        if (32 * i > rel) {
            x[i] = tiny ? (float)(x[i] * scal64) : reflect ? x[i] * scal : x[i];
            v[i] = reflect ? x[i] : 0.f;
        } else if (32 * i == rel) {
            x[i] = beta;
            v[i] = 1.f;
        } else {
            v[i] = 0.f;
        }
    }
    return tau;
}

template <int RL, int C>
__global__ void __launch_bounds__(32 * max_warps(RL, C), 1) register_qr_kernel(qr2_whole_qr_args a) {
    extern __shared__ __align__(16) unsigned char smem[];
    const int m = a.m, n = a.n, K = m < n ? m : n;
    const Layout lay = layout(K, RL);
    Head* head = reinterpret_cast<Head*>(smem);
    uint64_t* bars = reinterpret_cast<uint64_t*>(smem + lay.bar);
    float* taus = reinterpret_cast<float*>(smem + lay.tau);
    float* vs = reinterpret_cast<float*>(smem + lay.v);

    const int q = C == 1 ? 0 : (int)cg::this_cluster().block_rank();
    const int64_t mat = blockIdx.x / C;
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5, nwarps = (int)(blockDim.x >> 5);
    const int j0 = STRIP * (q * nwarps + warp);  // first column of this warp's strip
    const int ncols = n - j0;                     // the strip's columns c < ncols exist
    const int ml = m - lane;                      // this lane's rows lane + 32 i exist for 32 i < ml

    // every lane of the producing warp arrives (release) after its own stores of the reflector
    for (int r = t; r < K; r += blockDim.x) bar_init(&bars[r], 32);
    if (C > 1) asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");

    // load (any strides); rows >= m and columns >= n are zeros and stay zeros
    float x[STRIP][RL];
    float amax = 0.f;
    const float* src = a.src + mat * a.src_bs + lane * a.src_rs + j0 * a.src_cs;
#pragma unroll
    for (int c = 0; c < STRIP; ++c)
#pragma unroll
        for (int i = 0; i < RL; ++i) {
            x[c][i] = 32 * i < ml && c < ncols ? src[i * 32 * a.src_rs + c * a.src_cs] : 0.f;
            amax = fmaxf(amax, fabsf(x[c][i]));
        }

    // power-of-two scaling from the matrix's max |a| (NaN and Inf inputs: no scaling)
    amax = fmaxf(amax, __shfl_xor_sync(FULL, amax, 16));
    amax = fmaxf(amax, __shfl_xor_sync(FULL, amax, 8));
    amax = fmaxf(amax, __shfl_xor_sync(FULL, amax, 4));
    amax = fmaxf(amax, __shfl_xor_sync(FULL, amax, 2));
    amax = fmaxf(amax, __shfl_xor_sync(FULL, amax, 1));
    if (lane == 0) head->wmax[warp] = amax;
    __syncthreads();
    amax = 0.f;
    for (int w = 0; w < nwarps; ++w) amax = fmaxf(amax, head->wmax[w]);
    Head* head1 = head;
    if (C > 1) {
        if (t == 0) head->cmax = amax;
        cg::this_cluster().sync();  // also: every block's mbarriers are initialised before anyone arrives
        head1 = cg::this_cluster().map_shared_rank(head, 1);
        amax = fmaxf(cg::this_cluster().map_shared_rank(head, 0)->cmax, head1->cmax);
    }
    int expo = 0;
    if (amax > 0.f && amax <= FLT_MAX) frexpf(amax, &expo);
#pragma unroll
    for (int c = 0; c < STRIP; ++c)
#pragma unroll
        for (int i = 0; i < RL; ++i) x[c][i] = scalbnf(x[c][i], -expo);

    // the second block's copies of the reflector buffers (the first block publishes into both)
    float* vs1 = reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(head1) + lay.v);
    float* taus1 = reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(head1) + lay.tau);
    const bool publish_remote = C > 1 && q == 0;

    if (ncols > 0) {
        // reflectors built by the strips to the left, in order
        const int left = j0 < K ? j0 : K;
        for (int r = 0; r < left; ++r) {
            bar_wait(&bars[r]);
            const float tau = taus[r];
            float v[RL];
#pragma unroll
            for (int i = 0; i < RL; ++i) v[i] = vs[r * 32 * RL + 32 * i + lane];
            apply_reflector(v, tau, x, 0, ncols, r, lane);
        }
        // this strip: column c becomes reflector j0 + c
        float* tau_out = a.tau + mat * K;
#pragma unroll
        for (int c = 0; c < STRIP; ++c) {
            const int r = j0 + c;
            if (r >= K) break;
            float v[RL];
            const float tau = make_reflector(x[c], v, r, lane);
#pragma unroll
            for (int i = 0; i < RL; ++i) vs[r * 32 * RL + 32 * i + lane] = v[i];
            if (publish_remote) {
#pragma unroll
                for (int i = 0; i < RL; ++i) vs1[r * 32 * RL + 32 * i + lane] = v[i];
            }
            if (lane == 0) {
                taus[r] = tau;
                if (publish_remote) taus1[r] = tau;
                tau_out[r] = tau;
            }
            // each lane's release-arrive (count 32) orders its own stores: no fence, no warp barrier
            if (publish_remote) bar_arrive_remote(&bars[r], 1);
            bar_arrive(&bars[r]);
            if (c + 1 < STRIP) apply_one(v, tau, x[c + 1], r);  // the next column first: it is the critical path
            if (c + 2 < STRIP) apply_reflector(v, tau, x, c + 2, ncols, r, lane);
        }

        // write H: R (on and above the diagonal) scaled back, v below it as is
        float* h = a.h + mat * (int64_t)m * n + (int64_t)j0 * m + lane;
#pragma unroll
        for (int c = 0; c < STRIP; ++c) {
            if (c >= ncols) break;
#pragma unroll
            for (int i = 0; i < RL; ++i)
                if (32 * i < ml) h[(int64_t)c * m + 32 * i] = 32 * i <= j0 + c - lane ? scalbnf(x[c][i], expo) : x[c][i];
        }
    }
    if (C > 1) cg::this_cluster().sync();  // no block leaves while the other may still write into it
}

int rows_per_lane(int64_t m) { return m <= 256 ? (int)((m + 31) / 32) : 0; }

int warps_per_block(int64_t n, int cluster) { return (int)(((n + STRIP - 1) / STRIP + cluster - 1) / cluster); }

template <int RL, int C>
int launch(const qr2_whole_qr_args* a, void* stream) {
    const int K = a->m < a->n ? a->m : a->n;
    const int bytes = layout(K, RL).bytes;
    if (qr2_allow_smem(register_qr_kernel<RL, C>, bytes, "register_qr: cudaFuncSetAttribute")) return 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)(a->batch * C));
    cfg.blockDim = dim3((unsigned)(32 * warps_per_block(a->n, C)));
    cfg.dynamicSmemBytes = (size_t)bytes;
    cfg.stream = (cudaStream_t)stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = C;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = C > 1 ? 1 : 0;
    QR2_CHECK_CUDA(cudaLaunchKernelEx(&cfg, register_qr_kernel<RL, C>, *a), "register_qr launch");
    QR2_CHECK_LAUNCH("register_qr launch");
    return 0;
}

template <int C>
int launch_rows(const qr2_whole_qr_args* a, void* stream) {
    switch (rows_per_lane(a->m)) {
        case 1: return launch<1, C>(a, stream);
        case 2: return launch<2, C>(a, stream);
        case 3: return launch<3, C>(a, stream);
        case 4: return launch<4, C>(a, stream);
        case 5: return launch<5, C>(a, stream);
        case 6: return launch<6, C>(a, stream);
        case 7: return launch<7, C>(a, stream);
        default: return launch<8, C>(a, stream);
    }
}

}  // namespace

extern "C" int qr2_register_qr_supported(int64_t m, int64_t n, int cluster, int smem_optin) {
    const int RL = rows_per_lane(m);
    if ((cluster != 1 && cluster != 2) || RL == 0 || n < 1 || n > QR2_REGISTER_QR_MAX) return 0;
    const int64_t K = m < n ? m : n;
    return warps_per_block(n, cluster) <= max_warps(RL, cluster) && layout((int)K, RL).bytes <= smem_optin;
}

extern "C" int qr2_register_qr(const qr2_whole_qr_args* a, int cluster, int device, void* stream) {
    if (a->batch <= 0 || a->m <= 0 || a->n <= 0) return 0;
    int smem_optin = 0;
    if (qr2_cuda_smem_optin(device, &smem_optin)) return 1;
    if (!qr2_register_qr_supported(a->m, a->n, cluster, smem_optin))
        return qr2_record_error("register_qr", "matrix too large for the registers of the cluster");
    return cluster == 1 ? launch_rows<1>(a, stream) : launch_rows<2>(a, stream);
}
