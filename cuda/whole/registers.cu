// registers.cu - Householder QR of whole small matrices held in registers: one thread block per matrix,
// or a cluster of two blocks that share its columns. One launch does all of it: load (any strides),
// factor, write H and tau.
//
// Panel mode (PANEL, for the blocked routes): the same kernel, one block per panel, factors an m x w panel (w <= 32,
// m <= 512) in place and also writes the explicit reflectors V and the compact-WY factor T. Once the last reflector
// is built, warps 1.. sum G = V^T V in 8 x 4 tiles (panel_gram) and warp 0 runs T's recurrence in registers behind
// them (panel_t). Not during the chain: a warp that did its column's share of G and T there fell behind on its
// applies, for it has no slack (a step of applies costs about a link), and came late to its next link (40 x 352:
// links of 1,000 cycles became 1,700 in the panel's second half). At batch 1 a 512 x 32 panel took 44 us against
// 86 us for panel_cluster.cu's cluster-rows kernel (H200, torch.profiler).
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
// Measured on the H200 (docs/worklog.md): kernel alone (CUDA-graph replay) b20 n32 14.8 us (4 columns per
// warp), b40 n176 148 us (2-block cluster, 4 columns per warp), against 19.1 and 219.8 us for the
// strip-per-warp kernel this replaced. Each chain step (wait for the reflector, one 6-value butterfly,
// scalars, publish) costs ~800 cycles, most of the n32 time (ncu: 0.38 issued per scheduler per cycle, the
// top stall the wait for a reflector). Fewer warps per matrix measured faster: fewer warps wait on each
// reflector and compete with the chain's warp. Giving each warp consecutive columns (so most links
// stay inside a warp, with the warp's other columns updated in the chain step's reduction) was slower: b40
// n176 201 us, b20 n32 16.5-19.2 us.
//
// The matrix is first scaled by a power of two to max|a| in [0.5, 1), so FP32 sums of squares cannot
// overflow; R is scaled back on the way out. The scaling is exact except for entries it pushes below FP32's
// normal range (a matrix whose entries span more than ~2^125): those lose bits or become zero, which the
// norm-wise error bound allows but LAPACK would not do. A column whose tail squares sum below 2^-100 gets its
// norm and scalars in FP64.
#include <cooperative_groups.h>
#include <float.h>

#include "cluster.cuh"
#include "launch.cuh"
#include "reduce.cuh"
#include "reflector.cuh"

namespace cg = cooperative_groups;

namespace {

constexpr unsigned FULL = 0xffffffffu;

constexpr int T_MAX = 32;  // widest panel (whose T the kernel builds)
constexpr int GJ = 4;      // panels: columns of a tile of G (8 GJ sums a lane: wider tiles spilled, see panel_gram)

// Registers per thread: the C x RL block, this lane's rows of one reflector, C dots, ~36 others (panels: ~12
// more, for the dots of G and the addresses of V and T).
__host__ __device__ constexpr int regs_per_thread(int RL, int C, bool panel) {
    return (C * RL + RL + C + (panel ? 48 : 36) + 7) / 8 * 8;
}
__host__ __device__ constexpr int min_int(int a, int b) { return a < b ? a : b; }
// Warps one block may run: each of the four schedulers holds a quarter of them in its quarter (16384
// registers) of the register file; a panel's T_MAX columns need no more than T_MAX / (C CL) warps, and a
// smaller launch bound leaves the compiler more registers.
__host__ __device__ constexpr int max_warps(int RL, int C, int CL, bool panel) {
    return min_int(min_int(4 * (16384 / (32 * regs_per_thread(RL, C, panel))), 32),
                   panel ? (T_MAX + C * CL - 1) / (C * CL) : 32);
}

// Panels of 8 warps whose lanes hold 32 or more of the panel run two blocks per SM (128 registers a thread): one block
// of 8 warps left the schedulers idle two thirds of the time (640 x 512: 219 / 174 us a launch against 319 / 268 at
// 12 / 16 rows a lane). Blocks of 16 warps stay at one: two would leave them 64 registers and heavy spills.
__host__ __device__ constexpr int panel_blocks_per_sm(int RL, int C, int CL, bool panel) {
    return panel && C * RL >= 32 && max_warps(RL, C, CL, panel) <= 8 ? 2 : 1;
}

struct Head {
    float wmax[32];
    float cmax;
};

// One launch's work: whole matrices (routes `registers*`), or the panels of the blocked route, factored in
// place, which also want the explicit reflectors V and the compact-WY factor T.
struct Job {
    int64_t batch;
    int m, n;
    const float* src;  // element (i, j) of matrix b at src[b src_bs + i src_rs + j src_cs]; may be h
    int64_t src_rs, src_cs, src_bs;
    float* h;  // column j of H at h + b h_bs + j ldh
    int64_t ldh, h_bs;
    float* tau;
    int64_t tau_bs;
    float* v;  // panels: reflector j in column j (ld ldv), rows [v_row0, v_row0 + m), zeros above
    int64_t ldv, v_bs;
    int v_row0;
    float* t;  // panels (n <= T_MAX): T, column-major, ld n
    int64_t t_bs;
    const int* done;  // panels: matrices already factored (qr2_panel_job.done), or NULL
    const int* zero_from;  // panels: matrix b's columns from zero_from[b] on are exactly zero (qr2_panel_job), or NULL
    int col0;
};

// Reflector r is zero above row r, so it is kept from its register group r / 32 down: 32 (RL - r / 32)
// floats, packed one after another (n = m = 256: 144 KiB instead of 256 KiB). Returns where reflector r
// starts (in floats); reflector_offset(K, RL) is the size of all K.
__host__ __device__ inline int reflector_offset(int r, int RL) {
    const int g = r >> 5;
    return 1024 * (g * RL - g * (g - 1) / 2) + 32 * (r & 31) * (RL - g);
}

// Dynamic shared memory: the head, K mbarriers (panels: T_MAX / GJ more, one per column block of G), K taus, for
// panels the reflector dots G (T_MAX x (T_MAX + 1)), then the K packed reflectors.
constexpr int PANEL_SQUARE_BYTES = 4 * T_MAX * (T_MAX + 1);
struct Layout {
    int bar, tau, g, v, bytes;
};
__host__ __device__ inline Layout layout(int K, int RL, bool with_t) {
    Layout l;
    l.bar = (int)((sizeof(Head) + 15) / 16 * 16);
    l.tau = l.bar + 8 * (K + (with_t ? T_MAX / GJ : 0));
    l.g = l.tau + ((4 * K + 15) / 16 * 16);
    l.v = l.g + (with_t ? PANEL_SQUARE_BYTES : 0);
    l.bytes = l.v + 4 * reflector_offset(K, RL);
    return l;
}

// Warp-wide sums of N per-lane values, on every lane (xor butterflies: every lane ends with the same bits).
template <int N>
__device__ __forceinline__ void warp_sums(float (&s)[N]) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
#pragma unroll
        for (int k = 0; k < N; ++k) s[k] += __shfl_xor_sync(FULL, s[k], off);
}

// Row tests of register i against reflector r (warp-uniform) and against row p = lane + rel (per lane). G0: every
// reflector starts in register group 0 (panels: r < T_MAX = 32), so the tests of registers i >= 1 are compile-time
// constants; without G0 each would be an integer compare on every use, as a thread has only 7 predicate registers
// (ncu, 512-row panel: ISETP 16 % of the instructions).
template <bool G0>
__device__ __forceinline__ bool reaches(int i, int r) { return G0 || 32 * i + 31 >= r; }  // a row >= r, some lane
template <bool G0>
__device__ __forceinline__ bool below(int i, int rel) { return G0 && i > 0 ? true : 32 * i > rel; }  // row > p
template <bool G0>
__device__ __forceinline__ bool on(int i, int rel) { return G0 && i > 0 ? false : 32 * i == rel; }  // row == p

// Reflector p from column x (rows >= p; this lane holds rows lane + 32 i), given alpha = x[p] and the
// tail's sum of squares ss: LAPACK slarfg. Leaves beta on the diagonal and v below it in x, this lane's
// rows of v (1 at row p, 0 above) in v; returns tau. `reflect`: the tail has a non-zero (else tau = 0 and
// the column stays as it is, as in LAPACK). Tails whose squares sum below 2^-100 get FP64.
template <int RL, bool G0>
__device__ __forceinline__ float finish_reflector(float (&x)[RL], float (&v)[RL], int p, int lane, float alpha,
                                                  float ss, bool reflect) {
    const int rel = p - lane;  // register i holds row p exactly when 32 i == rel
    float beta = alpha, tau = 0.f, scal = 0.f;
    double scal64 = 0.0;
    const bool tiny = reflect && !(ss >= QR2_TINY_SUM_OF_SQUARES);
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
            if (below<G0>(i, rel)) ss64 = fma((double)x[i], (double)x[i], ss64);
        double beta64, tau64;
        householder_scalars((double)alpha, warp_sum(ss64), beta64, tau64, scal64);
        beta = (float)beta64;
        tau = (float)tau64;
    }
#pragma unroll
    for (int i = 0; i < RL; ++i) {
        if (below<G0>(i, rel)) {
            x[i] = tiny ? (float)(x[i] * scal64) : reflect ? x[i] * scal : x[i];
            v[i] = reflect ? x[i] : 0.f;
        } else if (on<G0>(i, rel)) {
            x[i] = beta;
            v[i] = 1.f;
        } else {
            v[i] = 0.f;
        }
    }
    return tau;
}

// Reflector p from column x, its tail norm reduced directly.
template <int RL, bool G0>
__device__ __forceinline__ float make_reflector(float (&x)[RL], float (&v)[RL], int p, int lane) {
    const int rel = p - lane;
    float s[3] = {0.f, 0.f, 0.f};  // tail sum of squares, alpha, tail non-zeros
#pragma unroll
    for (int i = 0; i < RL; ++i) {
        if (!reaches<G0>(i, p)) continue;
        s[0] = below<G0>(i, rel) ? fmaf(x[i], x[i], s[0]) : s[0];
        s[1] = on<G0>(i, rel) ? x[i] : s[1];
        s[2] += below<G0>(i, rel) && x[i] != 0.f ? 1.f : 0.f;
    }
    warp_sums(s);
    return finish_reflector<RL, G0>(x, v, p, lane, s[1], s[0], s[2] > 0.f);
}

// Accumulators of a lane's share of a dot product: two (even and odd registers) for panels of 8 or more rows a lane,
// whose 16-long FMA chains stalled their warps (ncu: "wait" 32 % of the stall samples); whole matrices keep one, and
// their bits.
__host__ __device__ constexpr int dot_accumulators(int RL, bool G0) { return G0 && RL >= 8 ? 2 : 1; }

// The chain step: applies reflector r (v, tau) to column x = column r + 1 and builds reflector r + 1 from it
// (into x and vn; returns its tau), with one warp reduction when the tail-norm expansion holds.
template <int RL, bool G0>
__device__ __forceinline__ float apply_and_reflect(const float (&v)[RL], float tau, float (&x)[RL], float (&vn)[RL],
                                                   int r, int lane) {
    const int p = r + 1, rel = p - lane;
    // v . x over rows >= r; over the tail (rows > p): x.x, v.x, v.v; then x[p] and v[p]. Panels of 8 or more rows a
    // lane sum even and odd registers apart (chains half as long: this reduction is the panel's critical path).
    constexpr int ACC = dot_accumulators(RL, G0);
    float s[6] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f}, o[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int i = 0; i < RL; ++i) {
        if (!reaches<G0>(i, r)) continue;
        float* a = ACC == 2 && (i & 1) ? o : s;
        a[0] = fmaf(v[i], x[i], a[0]);
        const bool t = below<G0>(i, rel);
        a[1] = t ? fmaf(x[i], x[i], a[1]) : a[1];
        a[2] = t ? fmaf(v[i], x[i], a[2]) : a[2];
        a[3] = t ? fmaf(v[i], v[i], a[3]) : a[3];
        s[4] = on<G0>(i, rel) ? x[i] : s[4];
        s[5] = on<G0>(i, rel) ? v[i] : s[5];
    }
    if constexpr (ACC == 2)
#pragma unroll
        for (int k = 0; k < 4; ++k) s[k] += o[k];
    warp_sums(s);
    const float w = tau * s[0];
#pragma unroll
    for (int i = 0; i < RL; ++i)
        if (reaches<G0>(i, r)) x[i] = fmaf(-w, v[i], x[i]);
    const float alpha = fmaf(-w, s[5], s[4]);  // the same FMA as the owning lane's update of x[p]
    const float ss = fmaf(w, fmaf(w, s[3], -2.f * s[2]), s[1]);
    // kept when the terms were at most 8x the result (cancellation cost <= 3 bits) and FP32 squares are exact
    // enough; warp-uniform, because every lane holds the same sums
    if (ss >= 0.25f * fmaf(w * w, s[3], s[1]) && ss >= QR2_TINY_SUM_OF_SQUARES) return finish_reflector<RL, G0>(x, vn, p, lane, alpha, ss, true);
    return make_reflector<RL, G0>(x, vn, p, lane);
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

// Retired slots (live[c] false: warp-uniform, always the last ones) are skipped from 4 rows per lane on
// (H200, kernel alone: b40 n176 156 -> 148 us, b40 n256 370 -> 347 us); below that the branches cost more
// than the FMAs they save (b640 n64 96 -> 121 us), and retired slots are computed on zeros.
template <int RL, int C, bool G0>
__device__ __forceinline__ void apply_reflector(const float (&v)[RL], float tau, float (&x)[C][RL],
                                                const bool (&live)[C], int r, int lane) {
    constexpr int ACC = dot_accumulators(RL, G0);
    float d[C], o[C];
#pragma unroll
    for (int c = 0; c < C; ++c) {
        d[c] = o[c] = 0.f;
        if (RL < 4 || live[c]) {
#pragma unroll
            for (int i = 0; i < RL; ++i)  // rows above r: v is zero there
                if (reaches<G0>(i, r)) {
                    float& a = ACC == 2 && (i & 1) ? o[c] : d[c];
                    a = fmaf(v[i], x[c][i], a);
                }
            if constexpr (ACC == 2) d[c] += o[c];
        }
    }
    column_sums(d, lane);
#pragma unroll
    for (int c = 0; c < C; ++c) {
        const float w = tau * d[c];
        if (RL < 4 || live[c]) {
#pragma unroll
            for (int i = 0; i < RL; ++i)
                if (reaches<G0>(i, r)) x[c][i] = RL >= 4 || live[c] ? fmaf(-w, v[i], x[c][i]) : x[c][i];
        }
    }
}

// Publishes reflector r (this lane's rows v, and tau): in this block's shared memory, where every lane
// release-arrives on its mbarrier (count 32) after its own stores, and in a cluster also in the other
// block's, through st.async stores that complete that block's mbarrier by their bytes. Writes tau out.
template <int RL, int CL, bool G0>
__device__ __forceinline__ void publish(int r, const float (&v)[RL], float tau, float* vs, float* taus,
                                        uint64_t* bars, float* tau_out, int q, int lane) {
    const int g = G0 ? 0 : r >> 5;  // register groups above g are zero: not kept
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

// Writes column j of H (h points at this lane's row 0 of the matrix, columns ldh apart): R (rows <= j) scaled
// back by 2^expo, v below it as is.
template <int RL, bool G0>
__device__ __forceinline__ void write_column(const float (&x)[RL], float* h, int j, int64_t ldh, int lane, int ml,
                                             int expo) {
#pragma unroll
    for (int i = 0; i < RL; ++i)
        if (32 * i < ml) h[j * ldh + 32 * i] = !below<G0>(i, j - lane) ? scalbnf(x[i], expo) : x[i];
}

// Writes reflector j (this lane's rows of it) into column j of the explicit V.
template <int RL>
__device__ __forceinline__ void write_reflector(const float (&v)[RL], float* vout, int j, int64_t ldv, int ml) {
#pragma unroll
    for (int i = 0; i < RL; ++i)
        if (32 * i < ml) vout[j * ldv + 32 * i] = v[i];
}

// Column j (x[0]) is final: writes it out and shifts the warp's later columns down one slot.
template <int RL, int C, bool G0>
__device__ __forceinline__ void retire_column(float (&x)[C][RL], float* h, int j, int64_t ldh, int lane, int ml,
                                              int expo) {
    write_column<RL, G0>(x[0], h, j, ldh, lane, ml, expo);
#pragma unroll
    for (int c = 0; c + 1 < C; ++c)
#pragma unroll
        for (int i = 0; i < RL; ++i) x[c][i] = x[c + 1][i];
#pragma unroll
    for (int i = 0; i < RL; ++i) x[C - 1][i] = 0.f;
}

// Panels: G = V^T V (G[i][j] = v_i . v_j for i < j < K) from the reflectors in shared memory, once the chain is
// done, in tiles of 8 rows i by GJ columns j (diagonal tiles computed whole), taken in column order by `workers`
// warps from `first` on: a lane sums its own rows of the tile's dots (8 + GJ shared loads per 8 GJ FMAs, where a dot
// at a time needs one per FMA), then each column j of the tile is reduce-scattered over the warp, leaving dot
// 8 ci + (lane >> 2) on lanes 4 (lane >> 2) .. + 3; every lane then arrives on its column block's mbarrier, which
// completes with the block's last tile (gram_tiles(cj) tiles, 32 arrivals each), so that T's columns can follow.
__device__ __forceinline__ int gram_tiles(int cj, int K) { return ((GJ * cj + GJ < K ? GJ * cj + GJ : K) - 2) / 8 + 1; }
template <int RL>
__device__ __forceinline__ void panel_gram(const float* vs, float (*gs)[T_MAX + 1], uint64_t* gbars, int K,
                                           int first, int workers, int warp, int lane) {
    // tile ci of column block cj (columns GJ cj ..), which has the gram_tiles(cj, K) row blocks holding rows i < its
    // last column
    int cj = 0, ci = warp - first;
    for (;; ci += workers) {
        while (GJ * cj < K && ci >= gram_tiles(cj, K)) ci -= gram_tiles(cj++, K);
        if (GJ * cj >= K) break;
        float d[GJ][8];  // d[jj][s]: row 8 ci + s, column GJ cj + jj
#pragma unroll
        for (int jj = 0; jj < GJ; ++jj)
#pragma unroll
            for (int s = 0; s < 8; ++s) d[jj][s] = 0.f;
#pragma unroll 1
        for (int k = 0; k < RL; ++k) {  // not unrolled: the loads of every k hoisted took 30-60 more registers
            float vi[8], vj[GJ];
#pragma unroll
            for (int s = 0; s < 8; ++s) {
                const int i = 8 * ci + s;
                vi[s] = i < K ? vs[32 * RL * i + 32 * k + lane] : 0.f;
            }
#pragma unroll
            for (int jj = 0; jj < GJ; ++jj) {
                const int j = GJ * cj + jj;
                vj[jj] = j < K ? vs[32 * RL * j + 32 * k + lane] : 0.f;
            }
#pragma unroll
            for (int jj = 0; jj < GJ; ++jj)
#pragma unroll
                for (int s = 0; s < 8; ++s) d[jj][s] = fmaf(vi[s], vj[jj], d[jj][s]);
        }
#pragma unroll
        for (int jj = 0; jj < GJ; ++jj) {
            const int j = GJ * cj + jj;
            if (j >= K || 8 * ci >= j) continue;  // warp-uniform
            butterfly_scatter_round<4, 16>(d[jj], lane);
            butterfly_scatter_round<2, 8>(d[jj], lane);
            butterfly_scatter_round<1, 4>(d[jj], lane);
            float sum = d[jj][0] + __shfl_xor_sync(FULL, d[jj][0], 2);
            sum += __shfl_xor_sync(FULL, sum, 1);
            const int i = 8 * ci + (lane >> 2);
            if ((lane & 3) == 0 && i < j) gs[i][j] = sum;
        }
        bar_arrive(&gbars[cj]);
    }
}

// Panels: T (LAPACK slarft, forward, column-wise: T[0:j, j] = -tau_j T[0:j, 0:j] G[0:j, j], T[j][j] = tau_j, zeros
// below it) by one warp, lane i holding row i in registers, and written out column-major (ld K), each column block
// as soon as its columns of G are in. Rows l < i of T are zero, so each lane sums over every l < j.
__device__ __forceinline__ void panel_t(const float (*gs)[T_MAX + 1], uint64_t* gbars, const float* taus,
                                        float* tout, int K, int lane) {
    float tr[T_MAX];
#pragma unroll
    for (int j = 0; j < T_MAX; ++j) {
        tr[j] = 0.f;
        if (j >= K) continue;
        if (j % GJ == 0) bar_wait(&gbars[j / GJ]);
        float a0 = 0.f, a1 = 0.f;
#pragma unroll
        for (int l = 0; l < j; l += 2) {
            a0 = fmaf(tr[l], gs[l][j], a0);
            if (l + 1 < j) a1 = fmaf(tr[l + 1], gs[l + 1][j], a1);
        }
        const float tau = taus[j];
        tr[j] = lane < j ? -tau * (a0 + a1) : lane == j ? tau : 0.f;
        if (lane < K) tout[(int64_t)j * K + lane] = tr[j];
    }
}

template <int RL, int C, int CL, bool PANEL>
__global__ void __launch_bounds__(32 * max_warps(RL, C, CL, PANEL), panel_blocks_per_sm(RL, C, CL, PANEL)) registers_kernel(Job a) {
    if constexpr (PANEL) qr2_follow_previous_kernel();  // launched with Qr2Launch::pdl
    extern __shared__ __align__(16) unsigned char smem[];
    const int m = a.m, n = a.n, K = m < n ? m : n;
    const Layout lay = layout(K, RL, PANEL);
    Head* head = reinterpret_cast<Head*>(smem);
    auto gs = reinterpret_cast<float(*)[T_MAX + 1]>(smem + lay.g);  // panels: G
    uint64_t* bars = reinterpret_cast<uint64_t*>(smem + lay.bar);
    uint64_t* gbars = bars + K;  // panels: G's column blocks (panel_gram)
    static_assert(!PANEL || CL == 1, "panels run in one block");
    float* taus = reinterpret_cast<float*>(smem + lay.tau);
    float* vs = reinterpret_cast<float*>(smem + lay.v);

    const int q = CL == 1 ? 0 : (int)cg::this_cluster().block_rank();
    const int64_t mat = blockIdx.x / CL;
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5, nwarps = (int)(blockDim.x >> 5);
    const int G = CL * nwarps;     // warps per matrix
    const int g = q * nwarps + warp;  // this warp holds columns g + G c, c < C
    const int ml = m - lane;          // this lane's rows lane + 32 i exist for 32 i < ml
    constexpr bool G0 = PANEL;        // panels: every reflector starts in register group 0 (K <= T_MAX)
    if (PANEL && a.done && a.done[mat]) return;  // a matrix the CholeskyQR panel already factored
    // exactly zero columns (H as it is, tau = 0): tested once the panel's loads are in flight, which hides this load
    const bool zero_panel = PANEL && a.zero_from && a.col0 >= a.zero_from[mat];
    // reflectors built here: every lane of the producing warp arrives; built in the other block of a
    // cluster: armed (below) for their bytes, 32 (RL - r / 32) floats and tau, which that block's st.async
    // stores deliver
    for (int r = t; r < K; r += blockDim.x) {
        const bool local = CL == 1 || (r % G) / nwarps == q;
        bar_init(&bars[r], local ? 32 : 1);
    }
    if (PANEL && t < (K + GJ - 1) / GJ) bar_init(&gbars[t], 32 * gram_tiles(t, K));
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
    if (zero_panel) {
        for (int c = t; c < K; c += blockDim.x) a.tau[mat * a.tau_bs + c] = 0.f;
        return;
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

    float* tau_out = a.tau + mat * a.tau_bs;
    float* h = a.h + mat * a.h_bs + lane;
    float* vout = PANEL ? a.v + mat * a.v_bs + a.v_row0 + lane : nullptr;

    // x[0] is always this warp's lowest unfinished column jn, x[c] column jn + G c: a column is written out
    // as soon as its reflector is built, and the rest shift down
    int jn = g;
    const int last = g < n ? g + (n - 1 - g) / G * G : -1;  // this warp's last column
    const int steps = last < K ? last : K;                   // reflectors 0 .. steps-1 reach its columns
    float vm[RL], taum = 0.f;  // this warp's newest reflector
    if (jn == 0 && K > 0) {
        taum = make_reflector<RL, G0>(x[0], vm, 0, lane);
        publish<RL, CL, G0>(0, vm, taum, vs, taus, bars, tau_out, q, lane);
        if constexpr (PANEL) write_reflector(vm, vout, 0, a.ldv, ml);
        retire_column<RL, C, G0>(x, h, jn, a.ldh, lane, ml, expo);
        jn += G;
    }
    for (int r = 0; r < steps; ++r) {
        float v[RL], tau;
        // this warp built reflector r (its previous column): whole matrices keep it in registers; panels reload
        // it, so that it is not live across the apply (RL = 16 at two blocks an SM spilled 16 registers a step)
        if (!PANEL && r + G == jn) {
#pragma unroll
            for (int i = 0; i < RL; ++i) v[i] = vm[i];
            tau = taum;
        } else {
            bar_wait(&bars[r]);
            tau = taus[r];
            // kept from register group r / 32 down (zero above): one base address, constant offsets
            const float* vr = vs + (G0 ? 32 * RL * r : reflector_offset(r, RL) - 32 * (r >> 5)) + lane;
#pragma unroll
            for (int i = 0; i < RL; ++i) v[i] = reaches<G0>(i, r) ? vr[32 * i] : 0.f;
        }
        // column r + 1, when this warp holds it, is the chain's next link: it goes first
        if (r + 1 == jn && jn < K) {
            taum = apply_and_reflect<RL, G0>(v, tau, x[0], vm, r, lane);
            publish<RL, CL, G0>(jn, vm, taum, vs, taus, bars, tau_out, q, lane);
            if constexpr (PANEL) write_reflector(vm, vout, jn, a.ldv, ml);
            retire_column<RL, C, G0>(x, h, jn, a.ldh, lane, ml, expo);
            jn += G;
        }
        bool live[C];
#pragma unroll
        for (int c = 0; c < C; ++c) live[c] = jn + G * c < n;
        apply_reflector<RL, C, G0>(v, tau, x, live, r, lane);
    }

    // columns no reflector was built from (n > m): all R
#pragma unroll
    for (int c = 0; c < C; ++c)
        if (jn + G * c < n) write_column<RL, G0>(x[c], h, jn + G * c, a.ldh, lane, ml, expo);
    if (PANEL)  // rows above the panel's reflectors
        for (int i = t; i < a.v_row0 * K; i += blockDim.x)
            a.v[mat * a.v_bs + (int64_t)(i / a.v_row0) * a.ldv + i % a.v_row0] = 0.f;
    if (CL > 1) {
        // no block leaves while the other may still write into it: every reflector has landed here, and
        // the other block has seen its own
        for (int r = t; r < K; r += blockDim.x) bar_wait(&bars[r]);
        cg::this_cluster().sync();
    } else if (PANEL) {
        // G by warps 1.. (all, with one warp), T by warp 0 behind it
        __syncthreads();  // every reflector is in shared memory
        const int first = nwarps > 1 ? 1 : 0;
        if (warp >= first) panel_gram<RL>(vs, gs, gbars, K, first, nwarps - first, warp, lane);
        if (warp == 0) panel_t(gs, gbars, taus, a.t + mat * a.t_bs, K, lane);
    }
}

// Rows per lane: whole matrices m <= 256 exactly; panels (m <= 512) in a few steps, to bound the kernels built.
int rows_per_lane(int64_t m) { return m <= 256 ? (int)((m + 31) / 32) : 0; }
int panel_rows_per_lane(int64_t m) {
    static_assert(QR2_PANEL_REGISTERS_MAX_M == 32 * 16, "the tallest panel is RL = 16");
    for (int RL : {1, 2, 4, 8, 12, 16})
        if (m <= 32 * RL) return RL;
    return 0;
}

// Columns per warp, smallest first: fewer columns per warp shorten every warp's share of each reflector.
constexpr int COLUMN_CHOICES[] = {1, 2, 4, 8};  // powers of two: see column_sums
__host__ __device__ constexpr int max_columns(int RL, bool panel) { return panel || RL > 8 ? 4 : 8; }  // beyond: spills

int warps_per_block(int64_t n, int C, int cluster) { return (int)(((n + C - 1) / C + cluster - 1) / cluster); }

int fits(int RL, int C, int64_t n, int cluster, bool panel) {
    return C <= max_columns(RL, panel) && warps_per_block(n, C, cluster) <= max_warps(RL, C, cluster, panel);
}

// Columns per warp, or 0 when no choice fits one block. Whole matrices take at least 4 columns per warp
// while a warp's block of them stays within 24 registers (C RL <= 24): fewer warps wait on each reflector
// and compete with the warp that runs the reflector chain, which bounds a small batch (H200, kernel alone,
// C = 1 / 2 / 4: b20 n32 17.0 / 15.5 / 14.8 us, b40 n64 33.7 / 30.3 / 28.8 us, b40 n128 94.0 / - / 84.7 us;
// b40 n176 at 8 columns instead of 4: 165 against 156 us). Panels take the fewest that fit. While the batch
// would then ask for more warps than `resident_warps` (32 per SM), more columns per warp: fewer warps per
// matrix, more matrices in flight at once (a large batch is throughput-bound, not bound by one matrix's chain
// of reflectors).
int columns_per_warp(int RL, int64_t n, int cluster, bool panel, int64_t batch, int64_t resident_warps) {
    int chosen = 0;
    for (int C : COLUMN_CHOICES) {
        if (!fits(RL, C, n, cluster, panel)) continue;
        chosen = C;
        const bool few_warps = panel || C >= 4 || 2 * C * RL > 24;
        if (few_warps && batch * cluster * warps_per_block(n, C, cluster) <= resident_warps) break;
    }
    return chosen;
}

template <int RL, int C, int CL, bool PANEL>
int launch(const Job& a, void* stream) {
    const int K = a.m < a.n ? a.m : a.n;
    Qr2Launch how;
    how.grid = dim3((unsigned)(a.batch * CL));
    how.block = dim3((unsigned)(32 * warps_per_block(a.n, C, CL)));
    how.smem = (size_t)layout(K, RL, PANEL).bytes;
    how.cluster = CL;
    how.pdl = PANEL;  // panels (one block) start with qr2_follow_previous_kernel
    return qr2_launch(registers_kernel<RL, C, CL, PANEL>, how, stream, "registers launch", a);
}

template <int RL, int CL, bool PANEL>
int launch_columns(const Job& a, int sms, void* stream) {
    switch (columns_per_warp(RL, a.n, CL, PANEL, a.batch, 32 * (int64_t)sms)) {
        case 1: return launch<RL, 1, CL, PANEL>(a, stream);
        case 2: return launch<RL, 2, CL, PANEL>(a, stream);
        case 4: return launch<RL, 4, CL, PANEL>(a, stream);
        case 8:
            if constexpr (max_columns(RL, PANEL) >= 8) return launch<RL, 8, CL, PANEL>(a, stream);
            break;
    }
    return qr2_record_error("registers", "matrix too large for the registers of the cluster");
}

template <int CL, bool PANEL>
int launch_rows(const Job& a, int RL, int sms, void* stream) {
    switch (RL) {
        case 1: return launch_columns<1, CL, PANEL>(a, sms, stream);
        case 2: return launch_columns<2, CL, PANEL>(a, sms, stream);
        case 4: return launch_columns<4, CL, PANEL>(a, sms, stream);
        case 8: return launch_columns<8, CL, PANEL>(a, sms, stream);
    }
    if constexpr (PANEL) {
        switch (RL) {
            case 12: return launch_columns<12, CL, PANEL>(a, sms, stream);
            case 16: return launch_columns<16, CL, PANEL>(a, sms, stream);
        }
    } else {
        switch (RL) {
            case 3: return launch_columns<3, CL, PANEL>(a, sms, stream);
            case 5: return launch_columns<5, CL, PANEL>(a, sms, stream);
            case 6: return launch_columns<6, CL, PANEL>(a, sms, stream);
            case 7: return launch_columns<7, CL, PANEL>(a, sms, stream);
        }
    }
    return qr2_record_error("registers", "matrix too tall for the registers of the cluster");
}

int run(const Job& a, int RL, int cluster, const qr2_device* dev, void* stream) {
    return cluster == 1 ? launch_rows<1, false>(a, RL, dev->sms, stream) : launch_rows<2, false>(a, RL, dev->sms, stream);
}

int holds(int RL, int64_t m, int64_t n, int cluster, bool panel, const qr2_device* dev) {
    const int64_t K = m < n ? m : n;
    return RL > 0 && n >= 1 && (cluster == 1 || dev->clusters) && columns_per_warp(RL, n, cluster, panel, 1, 1) > 0 &&
           layout((int)K, RL, panel).bytes <= dev->smem_optin;
}

}  // namespace

extern "C" int qr2_registers_holds(int64_t m, int64_t n, int cluster, const qr2_device* dev) {
    if ((cluster != 1 && cluster != 2) || n > QR2_REGISTERS_MAX) return 0;
    return holds(rows_per_lane(m), m, n, cluster, false, dev);
}

extern "C" int qr2_registers_run(const qr2_whole_qr_args* w, int cluster, const qr2_device* dev, void* stream) {
    if (w->batch <= 0 || w->m <= 0 || w->n <= 0) return 0;
    if (!qr2_registers_holds(w->m, w->n, cluster, dev))
        return qr2_record_error("registers", "matrix too large for the registers of the cluster");
    const int64_t K = w->m < w->n ? w->m : w->n;
    Job a = {};
    a.batch = w->batch, a.m = w->m, a.n = w->n;
    a.src = w->src, a.src_rs = w->src_rs, a.src_cs = w->src_cs, a.src_bs = w->src_bs;
    a.h = w->h, a.ldh = w->m, a.h_bs = (int64_t)w->m * w->n;
    a.tau = w->tau, a.tau_bs = K;
    return run(a, rows_per_lane(w->m), cluster, dev, stream);
}

// Panels run in one block whatever the batch: a panel's time is its chain of reflectors, and 2-block clusters while
// the batch left SMs idle measured no faster (40 x 352: 26.5 against 26.0 us a panel, with one block then building T
// beside the chain: docs/results/2026-12-03-h200-panel-t-chain.txt).
extern "C" int qr2_panel_registers_holds(int64_t m, int64_t w, const qr2_device* dev) {
    const int RL = panel_rows_per_lane(m);
    if (w < 1 || w > T_MAX || w > m) return 0;
    return holds(RL, m, w, 1, true, dev);
}

extern "C" int qr2_panel_registers_run(const qr2_panel_job* p, void* work, const qr2_device* dev, void* stream) {
    (void)work;
    if (p->batch <= 0 || p->m <= 0 || p->w <= 0) return 0;
    if (!qr2_panel_registers_holds(p->m, p->w, dev))
        return qr2_record_error("registers panel", "panel too wide or too tall for the registers of a block");
    const int RL = panel_rows_per_lane(p->m);
    Job a = {};
    a.batch = p->batch, a.m = p->m, a.n = p->w;
    a.src = p->h, a.src_rs = 1, a.src_cs = p->ldh, a.src_bs = p->h_bs;
    a.h = p->h, a.ldh = p->ldh, a.h_bs = p->h_bs;
    a.tau = p->tau, a.tau_bs = p->tau_bs;
    a.v = p->v, a.ldv = p->ldv, a.v_bs = p->v_bs, a.v_row0 = p->v_row0;
    a.t = p->t, a.t_bs = p->t_bs;
    a.done = p->done;
    a.zero_from = p->zero_from, a.col0 = p->col0;
    return launch_rows<1, true>(a, RL, dev->sms, stream);
}
