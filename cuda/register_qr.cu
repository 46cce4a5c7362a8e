// register_qr.cu - Householder QR of whole small matrices held in registers: one thread block per matrix,
// or a cluster of two blocks that share its columns. One launch does all of it: load (any strides),
// factor, write H and tau.
//
// Layout: the matrix's G warps (G = blocks x warps per block) own its columns cyclically: warp g holds
// columns g, g + G, g + 2G, ... (C of them); lane l holds rows l, l + 32, ... (RL per lane). Every
// reflector stays in shared memory once built (lane-major, so reads are free of bank conflicts; packed
// from its first non-zero group of 32 rows, so 256 x 256 fits), and each has an mbarrier that completes
// when it is published. In a cluster the producer also writes it into the other block's shared memory
// with st.async stores, which complete that block's mbarrier by their bytes (no cluster-scope release per
// reflector). There is no block-wide barrier in the factorisation: each warp applies the reflectors in
// order as they appear.
//
// Why cyclic columns: the chain of reflectors is the critical path. Column r + 1's owner gets reflector r,
// applies it to column r + 1 first, builds and publishes reflector r + 1 at once, and only then applies r
// to its other columns; those are not needed for G more reflectors, so that work (and every other warp's)
// overlaps the chain instead of lengthening it. A chain step is one warp reduction: the dot v . a that
// updates the column is reduced together with the sums that give the updated column's tail norm by
// expansion (||a - s v||^2 = ||a||^2 - 2 s v.a + s^2 ||v||^2, over the tail). The expansion is kept only
// when it lost at most three bits to cancellation; otherwise (and for tails so small that FP32 squares lose
// precision) the norm is reduced again directly, from the updated column. The reflector's scalars use the
// hardware rsqrt and fast divisions. A warp applies a reflector to its C columns (a power of two) with one
// butterfly reduce-scatter of the C dots.
//
// Measured on the H200 (docs/WORKLOG.md): kernel alone (CUDA-graph replay) b20 n32 15.3 us, b40 n176 137 us
// (2-block cluster, 4 columns per warp) before the reflectors were packed, against 19.1 and 219.8 us for the
// strip-per-warp kernel this replaced; b40 n176 takes 158 us in the QR2 harness with packing. Each chain step
// (wait for the reflector, one 6-value butterfly, scalars, publish) still costs ~800 cycles, which is most
// of the n32 time.
//
// The matrix is first scaled by a power of two to max|a| in [0.5, 1), so FP32 sums of squares cannot
// overflow; R is scaled back on the way out. The scaling is exact except for entries it pushes below FP32's
// normal range (a matrix whose entries span more than ~2^125): those lose bits or become zero, which the
// norm-wise error bound allows but LAPACK would not do. A column whose tail squares sum below 2^-100 gets its
// norm and scalars in FP64.
#include <cooperative_groups.h>
#include <float.h>

#include "common.cuh"

namespace cg = cooperative_groups;

namespace {

constexpr unsigned FULL = 0xffffffffu;

// Registers per thread: the C x RL block, this lane's rows of one reflector, C dots, ~36 others.
__host__ __device__ constexpr int regs_per_thread(int RL, int C) { return (C * RL + RL + C + 36 + 7) / 8 * 8; }
// Warps one block may run: each of the four schedulers holds a quarter of them in its quarter
// (16384 registers) of the register file.
__host__ __device__ constexpr int max_warps(int RL, int C) {
    return 4 * (16384 / (32 * regs_per_thread(RL, C))) < 32 ? 4 * (16384 / (32 * regs_per_thread(RL, C))) : 32;
}

struct Head {
    float wmax[32];
    float cmax;
};

// Reflector r is zero above row r, so it is kept from its register group r / 32 down: 32 (RL - r / 32)
// floats, packed one after another (n = m = 256: 144 KiB instead of 256 KiB). Returns where reflector r
// starts (in floats); reflector_offset(K, RL) is the size of all K.
__host__ __device__ inline int reflector_offset(int r, int RL) {
    const int g = r >> 5;
    return 1024 * (g * RL - g * (g - 1) / 2) + 32 * (r & 31) * (RL - g);
}

// Dynamic shared memory: the head, K mbarriers, K taus, then the K packed reflectors.
struct Layout {
    int bar, tau, v, bytes;
};
__host__ __device__ inline Layout layout(int K, int RL) {
    Layout l;
    l.bar = (int)((sizeof(Head) + 15) / 16 * 16);
    l.tau = l.bar + 8 * K;
    l.v = l.tau + ((4 * K + 15) / 16 * 16);
    l.bytes = l.v + 4 * reflector_offset(K, RL);
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

// Arms an mbarrier that another block of the cluster feeds with st.async: it completes once `bytes` have landed.
__device__ __forceinline__ void bar_expect_bytes(uint64_t* bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}

// The shared::cluster address of `p`'s twin in block `rank` of the cluster.
__device__ __forceinline__ unsigned remote_addr(const void* p, unsigned rank) {
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_addr(p)), "r"(rank));
    return remote;
}

// Stores one float into another block's shared memory and counts its 4 bytes on that block's mbarrier
// (`bar`, also remote): no fence and no release on the producer's side.
__device__ __forceinline__ void store_remote(unsigned addr, float value, unsigned bar) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(addr),
                 "r"(__float_as_uint(value)), "r"(bar)
                 : "memory");
}

// Waits until the reflector behind `bar` is published (each mbarrier completes once: phase parity 0).
// CTA-scope acquire: the reflector sits in this block's shared memory beside the mbarrier, whether this
// block's warps stored it or the other block's st.async did (a cluster-scope acquire would invalidate L1
// on every wait: measured, a third of the old kernel's stall samples).
__device__ __forceinline__ void bar_wait(uint64_t* bar) {
    unsigned done = 0;
    while (!done)
        asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(done) : "r"(smem_addr(bar)) : "memory");
}

// Warp-wide sums of N per-lane values, on every lane (xor butterflies: every lane ends with the same bits).
template <int N>
__device__ __forceinline__ void warp_sums(float (&s)[N]) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
#pragma unroll
        for (int k = 0; k < N; ++k) s[k] += __shfl_xor_sync(FULL, s[k], off);
}

// Register i of a lane holds a row at or below r for some lane exactly when 32 i + 31 >= r (warp-uniform).
__device__ __forceinline__ bool reaches(int i, int r) { return 32 * i + 31 >= r; }

// Reflector p from column x (rows >= p; this lane holds rows lane + 32 i), given alpha = x[p] and the
// tail's sum of squares ss: LAPACK slarfg. Leaves beta on the diagonal and v below it in x, this lane's
// rows of v (1 at row p, 0 above) in v; returns tau. `reflect`: the tail has a non-zero (else tau = 0 and
// the column stays as it is, as in LAPACK). Tails whose squares sum below 2^-100 get FP64.
template <int RL>
__device__ __forceinline__ float finish_reflector(float (&x)[RL], float (&v)[RL], int p, int lane, float alpha,
                                                  float ss, bool reflect) {
    const int rel = p - lane;  // register i holds row p exactly when 32 i == rel
    float beta = alpha, tau = 0.f, scal = 0.f;
    double scal64 = 0.0;
    const bool tiny = reflect && !(ss >= 0x1p-100f);
    if (reflect && !tiny) {
        // hardware rsqrt and fast divisions (a few ulp; the chain waits on these): alpha^2 + ss >= 2^-100,
        // and |beta|, |alpha - beta| stay far below 2^126, where __fdividef would flush
        const float x2 = fmaf(alpha, alpha, ss);
        const float norm = x2 * rsqrtf(x2);
        beta = alpha >= 0.f ? -norm : norm;
        tau = __fdividef(beta - alpha, beta);
        scal = __fdividef(1.f, alpha - beta);
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

// Reflector p from column x, its tail norm reduced directly.
template <int RL>
__device__ __forceinline__ float make_reflector(float (&x)[RL], float (&v)[RL], int p, int lane) {
    const int rel = p - lane;
    float s[3] = {0.f, 0.f, 0.f};  // tail sum of squares, alpha, tail non-zeros
#pragma unroll
    for (int i = 0; i < RL; ++i) {
        if (!reaches(i, p)) continue;
        s[0] = 32 * i > rel ? fmaf(x[i], x[i], s[0]) : s[0];
        s[1] = 32 * i == rel ? x[i] : s[1];
        s[2] += 32 * i > rel && x[i] != 0.f ? 1.f : 0.f;
    }
    warp_sums(s);
    return finish_reflector(x, v, p, lane, s[1], s[0], s[2] > 0.f);
}

// The chain step: applies reflector r (v, tau) to column x = column r + 1 and builds reflector r + 1 from it
// (into x and vn; returns its tau), with one warp reduction when the tail-norm expansion holds.
template <int RL>
__device__ __forceinline__ float apply_and_reflect(const float (&v)[RL], float tau, float (&x)[RL], float (&vn)[RL],
                                                   int r, int lane) {
    const int p = r + 1, rel = p - lane;
    // v . x over rows >= r; over the tail (rows > p): x.x, v.x, v.v; then x[p] and v[p]
    float s[6] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int i = 0; i < RL; ++i) {
        if (!reaches(i, r)) continue;
        s[0] = fmaf(v[i], x[i], s[0]);
        const bool t = 32 * i > rel;
        s[1] = t ? fmaf(x[i], x[i], s[1]) : s[1];
        s[2] = t ? fmaf(v[i], x[i], s[2]) : s[2];
        s[3] = t ? fmaf(v[i], v[i], s[3]) : s[3];
        s[4] = 32 * i == rel ? x[i] : s[4];
        s[5] = 32 * i == rel ? v[i] : s[5];
    }
    warp_sums(s);
    const float w = tau * s[0];
#pragma unroll
    for (int i = 0; i < RL; ++i)
        if (reaches(i, r)) x[i] = fmaf(-w, v[i], x[i]);
    const float alpha = fmaf(-w, s[5], s[4]);  // the same FMA as the owning lane's update of x[p]
    const float ss = fmaf(w, fmaf(w, s[3], -2.f * s[2]), s[1]);
    // kept when the terms were at most 8x the result (cancellation cost <= 3 bits) and FP32 squares are exact
    // enough; warp-uniform, because every lane holds the same sums
    if (ss >= 0.25f * fmaf(w * w, s[3], s[1]) && ss >= 0x1p-100f) return finish_reflector(x, vn, p, lane, alpha, ss, true);
    return make_reflector(x, vn, p, lane);
}

// Applies reflector r (v, tau) to this warp's columns c with live[c].
// Sums of C (a power of two) per-lane values over the warp, returned in d on every lane: a butterfly
// reduce-scatter (lane bits 16, 8, ... pick the slot a lane keeps), the rest of the butterfly on the one
// slot left, then a broadcast of each slot's sum.
template <int C>
__device__ __forceinline__ void column_sums(float (&d)[C], int lane) {
    static_assert(C == 1 || C == 2 || C == 4 || C == 8, "C must be a power of two");
    if constexpr (C == 1) {
        warp_sums(d);
        return;
    }
    constexpr int K = C >= 8 ? 3 : C >= 4 ? 2 : 1;
    if constexpr (C >= 8) butterfly_scatter_round<C / 2, 16>(d, lane);
    if constexpr (C >= 4) butterfly_scatter_round<2, (C >= 8 ? 8 : 16)>(d, lane);
    if constexpr (C >= 2) butterfly_scatter_round<1, (16 >> (K - 1))>(d, lane);
    float s = d[0];
#pragma unroll
    for (int off = 16 >> K; off > 0; off >>= 1) s += __shfl_xor_sync(FULL, s, off);
#pragma unroll
    for (int c = 0; c < C; ++c) {
        int src = 0;
#pragma unroll
        for (int j = 0; j < K; ++j) src |= ((c >> (K - 1 - j)) & 1) << (4 - j);
        d[c] = __shfl_sync(FULL, s, src);
    }
}

template <int RL, int C>
__device__ __forceinline__ void apply_reflector(const float (&v)[RL], float tau, float (&x)[C][RL],
                                                const bool (&live)[C], int r, int lane) {
    float d[C];
#pragma unroll
    for (int c = 0; c < C; ++c) {
        d[c] = 0.f;
#pragma unroll
        for (int i = 0; i < RL; ++i)
            if (reaches(i, r)) d[c] = fmaf(v[i], x[c][i], d[c]);  // rows above r: v is zero there
    }
    column_sums(d, lane);
#pragma unroll
    for (int c = 0; c < C; ++c) {
        const float w = tau * d[c];
#pragma unroll
        for (int i = 0; i < RL; ++i)
            if (reaches(i, r)) x[c][i] = live[c] ? fmaf(-w, v[i], x[c][i]) : x[c][i];
    }
}

// Publishes reflector r (this lane's rows v, and tau): in this block's shared memory, where every lane
// release-arrives on its mbarrier (count 32) after its own stores, and in a cluster also in the other
// block's, through st.async stores that complete that block's mbarrier by their bytes. Writes tau out.
template <int RL, int CL>
__device__ __forceinline__ void publish(int r, const float (&v)[RL], float tau, float* vs, float* taus,
                                        uint64_t* bars, float* tau_out, int q, int lane) {
    const int g = r >> 5;  // register groups above g are zero: not kept
    float* mine = vs + reflector_offset(r, RL) + lane - 32 * g;
#pragma unroll
    for (int i = 0; i < RL; ++i)
        if (i >= g) mine[32 * i] = v[i];
    if (lane == 0) taus[r] = tau;
    bar_arrive(&bars[r]);
    if (CL > 1) {  // the 4 (32 (RL - g) + 1) bytes the other block armed this mbarrier for
        const unsigned bar = remote_addr(&bars[r], q ^ 1), dst = remote_addr(mine + 32 * g, q ^ 1);
#pragma unroll
        for (int i = 0; i < RL; ++i)
            if (i >= g) store_remote(dst + 128 * (i - g), v[i], bar);
        if (lane == 0) store_remote(remote_addr(&taus[r], q ^ 1), tau, bar);
    }
    if (lane == 0) tau_out[r] = tau;
}

// Writes column j of H (h points at this lane's row 0 of the matrix): R (rows <= j) scaled back by 2^expo,
// v below it as is.
template <int RL>
__device__ __forceinline__ void write_column(const float (&x)[RL], float* h, int j, int m, int ml, int expo) {
    const int lane = m - ml;
#pragma unroll
    for (int i = 0; i < RL; ++i)
        if (32 * i < ml) h[(int64_t)j * m + 32 * i] = 32 * i <= j - lane ? scalbnf(x[i], expo) : x[i];
}

// Column j (x[0]) is final: writes it out and shifts the warp's later columns down one slot.
template <int RL, int C>
__device__ __forceinline__ void retire_column(float (&x)[C][RL], float* h, int j, int m, int ml, int expo) {
    write_column(x[0], h, j, m, ml, expo);
#pragma unroll
    for (int c = 0; c + 1 < C; ++c)
#pragma unroll
        for (int i = 0; i < RL; ++i) x[c][i] = x[c + 1][i];
#pragma unroll
    for (int i = 0; i < RL; ++i) x[C - 1][i] = 0.f;
}

template <int RL, int C, int CL>
__global__ void __launch_bounds__(32 * max_warps(RL, C), 1) register_qr_kernel(qr2_whole_qr_args a) {
    extern __shared__ __align__(16) unsigned char smem[];
    const int m = a.m, n = a.n, K = m < n ? m : n;
    const Layout lay = layout(K, RL);
    Head* head = reinterpret_cast<Head*>(smem);
    uint64_t* bars = reinterpret_cast<uint64_t*>(smem + lay.bar);
    float* taus = reinterpret_cast<float*>(smem + lay.tau);
    float* vs = reinterpret_cast<float*>(smem + lay.v);

    const int q = CL == 1 ? 0 : (int)cg::this_cluster().block_rank();
    const int64_t mat = blockIdx.x / CL;
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5, nwarps = (int)(blockDim.x >> 5);
    const int G = CL * nwarps;     // warps per matrix
    const int g = q * nwarps + warp;  // this warp holds columns g + G c, c < C
    const int ml = m - lane;          // this lane's rows lane + 32 i exist for 32 i < ml

    // reflectors built here: every lane of the producing warp arrives; built in the other block of a
    // cluster: armed (below) for their bytes, 32 (RL - r / 32) floats and tau, which that block's st.async
    // stores deliver
    for (int r = t; r < K; r += blockDim.x) {
        const bool local = CL == 1 || (r % G) / nwarps == q;
        bar_init(&bars[r], local ? 32 : 1);
    }
    if (CL > 1) asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");

    // load (any strides); rows >= m and columns >= n are zeros and stay zeros
    float x[C][RL];
    float amax = 0.f;
    const float* src = a.src + mat * a.src_bs + lane * a.src_rs + g * a.src_cs;
#pragma unroll
    for (int c = 0; c < C; ++c)
#pragma unroll
        for (int i = 0; i < RL; ++i) {
            x[c][i] = 32 * i < ml && g + G * c < n ? src[i * 32 * a.src_rs + (int64_t)G * c * a.src_cs] : 0.f;
            amax = fmaxf(amax, fabsf(x[c][i]));
        }

    // power-of-two scaling from the matrix's max |a| (NaN and Inf inputs: no scaling)
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(FULL, amax, off));
    if (lane == 0) head->wmax[warp] = amax;
    __syncthreads();
    amax = 0.f;
    for (int w = 0; w < nwarps; ++w) amax = fmaxf(amax, head->wmax[w]);
    if (CL > 1) {
        // armed after the __syncthreads above, which orders every mbarrier's init before it
        for (int r = t; r < K; r += blockDim.x)
            if ((r % G) / nwarps != q) bar_expect_bytes(&bars[r], 4 * (32 * (RL - (r >> 5)) + 1));
        if (t == 0) head->cmax = amax;
        cg::this_cluster().sync();  // also: every block's mbarriers are initialised before anyone arrives
        amax = fmaxf(amax, cg::this_cluster().map_shared_rank(head, q ^ 1)->cmax);
    }
    int expo = 0;
    if (amax > 0.f && amax <= FLT_MAX) frexpf(amax, &expo);
#pragma unroll
    for (int c = 0; c < C; ++c)
#pragma unroll
        for (int i = 0; i < RL; ++i) x[c][i] = scalbnf(x[c][i], -expo);

    float* tau_out = a.tau + mat * K;
    float* h = a.h + mat * (int64_t)m * n + lane;

    // x[0] is always this warp's lowest unfinished column jn, x[c] column jn + G c: a column is written out
    // as soon as its reflector is built, and the rest shift down
    int jn = g;
    const int last = g < n ? g + (n - 1 - g) / G * G : -1;  // this warp's last column
    const int steps = last < K ? last : K;                   // reflectors 0 .. steps-1 reach its columns
    float vm[RL], taum = 0.f;  // this warp's newest reflector
    if (jn == 0 && K > 0) {
        taum = make_reflector(x[0], vm, 0, lane);
        publish<RL, CL>(0, vm, taum, vs, taus, bars, tau_out, q, lane);
        retire_column(x, h, jn, m, ml, expo);
        jn += G;
    }
    for (int r = 0; r < steps; ++r) {
        float v[RL], tau;
        if (r + G == jn) {  // this warp built reflector r (its previous column)
#pragma unroll
            for (int i = 0; i < RL; ++i) v[i] = vm[i];
            tau = taum;
        } else {
            bar_wait(&bars[r]);
            tau = taus[r];
#pragma unroll
            for (int i = 0; i < RL; ++i)  // zero above register group r / 32
                v[i] = i >= (r >> 5) ? vs[reflector_offset(r, RL) + 32 * (i - (r >> 5)) + lane] : 0.f;
        }
        // column r + 1, when this warp holds it, is the chain's next link: it goes first
        if (r + 1 == jn && jn < K) {
            taum = apply_and_reflect(v, tau, x[0], vm, r, lane);
            publish<RL, CL>(jn, vm, taum, vs, taus, bars, tau_out, q, lane);
            retire_column(x, h, jn, m, ml, expo);
            jn += G;
        }
        bool live[C];
#pragma unroll
        for (int c = 0; c < C; ++c) live[c] = jn + G * c < n;
        apply_reflector<RL, C>(v, tau, x, live, r, lane);
    }

    // columns no reflector was built from (n > m): all R
#pragma unroll
    for (int c = 0; c < C; ++c)
        if (jn + G * c < n) write_column(x[c], h, jn + G * c, m, ml, expo);
    if (CL > 1) {
        // no block leaves while the other may still write into it: every reflector has landed here, and
        // the other block has seen its own
        for (int r = t; r < K; r += blockDim.x) bar_wait(&bars[r]);
        cg::this_cluster().sync();
    }
}

int rows_per_lane(int64_t m) { return m <= 256 ? (int)((m + 31) / 32) : 0; }

// Columns per warp, smallest first: fewer columns per warp shorten every warp's share of each reflector.
constexpr int COLUMN_CHOICES[] = {1, 2, 4, 8};  // powers of two: see column_sums

int warps_per_block(int64_t n, int C, int cluster) { return (int)(((n + C - 1) / C + cluster - 1) / cluster); }

int fits(int RL, int C, int64_t n, int cluster) { return warps_per_block(n, C, cluster) <= max_warps(RL, C); }

// The fewest columns per warp whose warps fit one block, or 0; but while the batch would then ask for more
// warps than `resident_warps` (32 per SM), more columns per warp: fewer warps per matrix, more matrices in
// flight at once (a large batch is throughput-bound, not bound by one matrix's chain of reflectors).
int columns_per_warp(int64_t m, int64_t n, int cluster, int64_t batch, int64_t resident_warps) {
    const int RL = rows_per_lane(m);
    int chosen = 0;
    for (int C : COLUMN_CHOICES) {
        if (!fits(RL, C, n, cluster)) continue;
        chosen = C;
        if (batch * cluster * warps_per_block(n, C, cluster) <= resident_warps) break;
    }
    return chosen;
}

template <int RL, int C, int CL>
int launch(const qr2_whole_qr_args* a, void* stream) {
    const int K = a->m < a->n ? a->m : a->n;
    const int bytes = layout(K, RL).bytes;
    if (qr2_allow_smem(register_qr_kernel<RL, C, CL>, bytes, "register_qr: cudaFuncSetAttribute")) return 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)(a->batch * CL));
    cfg.blockDim = dim3((unsigned)(32 * warps_per_block(a->n, C, CL)));
    cfg.dynamicSmemBytes = (size_t)bytes;
    cfg.stream = (cudaStream_t)stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = CL;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = CL > 1 ? 1 : 0;
    QR2_CHECK_CUDA(cudaLaunchKernelEx(&cfg, register_qr_kernel<RL, C, CL>, *a), "register_qr launch");
    QR2_CHECK_LAUNCH("register_qr launch");
    return 0;
}

template <int RL, int CL>
int launch_columns(const qr2_whole_qr_args* a, int sms, void* stream) {
    switch (columns_per_warp(a->m, a->n, CL, a->batch, 32 * (int64_t)sms)) {
        case 1: return launch<RL, 1, CL>(a, stream);
        case 2: return launch<RL, 2, CL>(a, stream);
        case 4: return launch<RL, 4, CL>(a, stream);
        default: return launch<RL, 8, CL>(a, stream);
    }
}

template <int CL>
int launch_rows(const qr2_whole_qr_args* a, int sms, void* stream) {
    switch (rows_per_lane(a->m)) {
        case 1: return launch_columns<1, CL>(a, sms, stream);
        case 2: return launch_columns<2, CL>(a, sms, stream);
        case 3: return launch_columns<3, CL>(a, sms, stream);
        case 4: return launch_columns<4, CL>(a, sms, stream);
        case 5: return launch_columns<5, CL>(a, sms, stream);
        case 6: return launch_columns<6, CL>(a, sms, stream);
        case 7: return launch_columns<7, CL>(a, sms, stream);
        default: return launch_columns<8, CL>(a, sms, stream);
    }
}

}  // namespace

extern "C" int qr2_register_qr_supported(int64_t m, int64_t n, int cluster, int smem_optin) {
    if ((cluster != 1 && cluster != 2) || rows_per_lane(m) == 0 || n < 1 || n > QR2_REGISTER_QR_MAX) return 0;
    const int64_t K = m < n ? m : n;
    return columns_per_warp(m, n, cluster, 1, 1) > 0 && layout((int)K, rows_per_lane(m)).bytes <= smem_optin;
}

extern "C" int qr2_register_qr(const qr2_whole_qr_args* a, int cluster, int device, void* stream) {
    if (a->batch <= 0 || a->m <= 0 || a->n <= 0) return 0;
    int smem_optin = 0, sms = 0;
    if (qr2_cuda_smem_optin(device, &smem_optin) || qr2_cuda_sm_count(device, &sms)) return 1;
    if (!qr2_register_qr_supported(a->m, a->n, cluster, smem_optin))
        return qr2_record_error("register_qr", "matrix too large for the registers of the cluster");
    return cluster == 1 ? launch_rows<1>(a, sms, stream) : launch_rows<2>(a, sms, stream);
}
