// update_fp16.cu - the 64-wide update C -= V (T^T (V^T C)) with its two large products on FP16 tensor cores at FP32
// accuracy (fp16x3): each operand scaled by a power of two and split into an FP16 high and low part, hi.hi + hi.lo +
// lo.hi summed in FP32 by mma.sync m16n8k16: half the mma instructions of 3xTF32, at twice the rate by the H200's
// datasheet (tools/bench/fp16_update_bench.cu measures both rates).
//
// The scales are known before the update reads C. V's entries obey |v| <= 1 (a fixed 2^14). Orthogonal updates keep
// each column's 2-norm, so the input column's norm bounds every entry of every trailing part of the column:
// qr2_column_scales_run records, per column, the power of two that takes that norm (with a 2^-10 margin) into
// [2^13, 2^14), once per call. W = V^T C then stays in C's scaled units (no column of it can underflow or overflow),
// W' = -T^T W is computed in 3xTF32 in shared memory as in update.cu, and W''s columns are scaled by their measured
// largest entry. CPU study (docs/results/2026-12-04-cpu-fp16x3-norm-bound-precision.txt): with C's scales from the
// column norms fp16x3 matched 3xTF32 on every QR2 profile at n = 512 and 1024; it scaled into [2^14, 2^15) and ran
// T^T W in fp16x3 as well, where the kernel keeps one binade more below FP16's largest value and runs T^T W in 3xTF32.
//
// One block of four warps per (matrix, 64-column strip). 32-row chunks of V and C stream through a cp.async ring in
// FP32; each chunk is split once per block into FP16 hi and lo planes in shared memory, from which every warp loads its
// fragments by ldmatrix: V^T and C for W = V^T C as they lie, and V^T for C^T += W'^T V^T by ldmatrix.trans (16-bit
// elements only, so no transposing loads remain). W' is split once into registers. tools/bench/fp16_update_bench.cu
// times the kernel alone; tools/fp16_update_lanes.py checks its fragment addressing on the CPU.
//
// A few large matrices split the rows over blocks as update.cu's split update does (WyPart), in the formats of its
// wy_reduce_kernel, which sums the partial W's and computes W' = -T^T W in between: partial_w stores W_s in C's
// scaled units with the exponent that undoes them, apply reads W' and its exponents.
#include <cuda_fp16.h>
#include <limits.h>

#include <atomic>

#include "launch.cuh"
#include "copies.cuh"
#include "tf32x3.cuh"
#include "update.cuh"

namespace {

constexpr int KC = 32;            // rows of a chunk
constexpr int SC = KC + 8;        // a staged column's stride in floats: the second product's reads of C hit 32 banks
constexpr int WV = 64;            // reflectors
constexpr int NT = 64;            // columns of a strip
constexpr int THREADS = 128;
constexpr int STAGES = 2;         // three blocks an SM (75 KB of shared memory each)
constexpr int LDW = WV + 4;       // W and T in shared memory (FP32), as update.cu's
constexpr float V_SCALE = 16384.f;  // 2^14: |v| <= 1

// A plane: FP16, one 32-row column of a chunk per 64 bytes, its four 16-byte units permuted by the column, so that the
// eight rows of an ldmatrix matrix (eight consecutive columns, one unit each) fall in eight different bank groups.
__device__ __forceinline__ int plane_at(int c, int r) { return c * KC + ((((r >> 3) ^ (c >> 1)) & 3) << 3) + (r & 7); }

struct Smem {
    float stage[STAGES][2][NT * SC];  // [V | C] chunks, FP32, column c at c SC
    __half vh[WV * KC], vl[WV * KC];  // V's chunk split (scaled by 2^14)
    __half ch[NT * KC], cl[NT * KC];  // C's chunk split (column j scaled by 2^k_j)
    float ws[NT * LDW];               // W, then W' (W(k, j) at j LDW + k), in C's scaled units
    float s1[NT], s2[NT];             // 2^k_j in two factors (k_j may pass FP32's exponent range)
    float wsc[NT];                    // W''s column scales
    float u1[NT], u2[NT];             // the update's factor, per column, in two
};
static_assert(WV * LDW <= STAGES * 2 * NT * SC, "T is kept where the chunks were");


// ldmatrix of 16-bit planes (tf32x3.cuh's ldsm_x4 takes any shared address), and transposed.
__device__ __forceinline__ void ldsm4(uint32_t (&r)[4], const __half* p) {
    ldsm_x4(r, reinterpret_cast<const float*>(p));
}
__device__ __forceinline__ void ldsm4t(uint32_t (&r)[4], const __half* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"((unsigned)__cvta_generic_to_shared(p)));
}

// d += a b, 16 x 8 x 16 in FP16 with FP32 accumulation.
__device__ __forceinline__ void mma16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// (x, y) = hi + lo + (what FP16 cannot hold): hi and lo as half2, rounded to nearest.
__device__ __forceinline__ void split2(float x, float y, uint32_t& hi, uint32_t& lo) {
    const __half2 h = __floats2half2_rn(x, y);
    const float2 f = __half22float2(h);
    const __half2 l = __floats2half2_rn(x - f.x, y - f.y);
    hi = *reinterpret_cast<const uint32_t*>(&h);
    lo = *reinterpret_cast<const uint32_t*>(&l);
}

// Four consecutive rows of a staged column, scaled by a b and split into the planes.
__device__ __forceinline__ void split_into_planes(const float* src, float a, float b, __half* hi, __half* lo, int c,
                                                  int r) {
    const float4 x = *reinterpret_cast<const float4*>(src);
    uint2 h, l;
    split2(x.x * a * b, x.y * a * b, h.x, l.x);
    split2(x.z * a * b, x.w * a * b, h.y, l.y);
    *reinterpret_cast<uint2*>(hi + plane_at(c, r)) = h;
    *reinterpret_cast<uint2*>(lo + plane_at(c, r)) = l;
}

// PART of C_strip -= V (T^T (V^T C_strip)) for the 64-column strip of each block (block x: matrix x / (strips splits),
// strip x / splits % strips, rows (x % splits) split_rows .. + split_rows). V: mr x w (w <= 64), T: w x w at
// t[r t_rs + c t_cs], C: mr x nc column-major; rows, leading dimensions and strides multiples of four floats, pointers
// 16-byte aligned. Column j of C is scaled by 2^scale_exp[b scale_bs + tail.col0 + j]; the strips tail marks zero are
// left alone. cf (whole only; not NULL): C's entries are read from the row-major cf (element (i, j) of matrix b at
// cf[b cf_bs + i cf_rs + j]: the input, in the first update) and all of the strip is written into c, a zero strip or
// one whose W is zero as it is (update.cu's FROM). partial_w stores W_s = V_s^T C_s in C's scaled units (times
// 2^(14 + k_j)) with exponent -(14 + k_j); apply adds V_s W' with W' and its exponents from wy_reduce_kernel.
template <WyPart PART>
__global__ void __launch_bounds__(THREADS)
    fp16_update_kernel(int64_t strips, int splits, int split_rows, int mr, int w, int nc, const float* v, int64_t ldv,
                       int64_t v_bs, const float* t, int64_t t_rs, int64_t t_cs, int64_t t_bs, float* c, int64_t ldc,
                       int64_t c_bs, const int* scale_exp, int64_t scale_bs, WyTail tail, const float* cf,
                       int64_t cf_rs, int64_t cf_bs, WySplitWork sw) {
    qr2_follow_previous_kernel();  // launched with Qr2Launch::pdl
    extern __shared__ float4 smem4[];
    Smem& S = *reinterpret_cast<Smem*>(smem4);
    const int64_t item = blockIdx.x / splits;  // (matrix, strip)
    const int split = (int)(blockIdx.x - item * splits);
    const int64_t b = item / strips;
    const int j0 = (int)(item - b * strips) * NT, ncs = min(NT, nc - j0);
    const int r0 = split * split_rows;
    mr = min(split_rows, mr - r0);  // this block's rows r0 .. + mr
    v += b * v_bs + r0;
    t += b * t_bs;
    c += b * c_bs + (int64_t)j0 * ldc + r0;
    if (cf) cf += b * cf_bs + j0;  // whole only: r0 = 0
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;
    if (tail.zero(b, j0)) {  // a strip of zeros: from a row-major source, copied as it is
        if (cf) copy_strip_from_rows(reinterpret_cast<float(*)[33]>(smem4), cf, cf_rs, c, ldc, mr, ncs);
        return;
    }
    int k_exp = 0;  // this thread's column's scale exponent (tid < NT)
    if (PART != WyPart::apply && tid < NT) {
        k_exp = tid < ncs ? scale_exp[b * scale_bs + tail.col0 + j0 + tid] : 0;
        S.s1[tid] = ldexpf(1.f, k_exp / 2), S.s2[tid] = ldexpf(1.f, k_exp - k_exp / 2);
    }

    // copies and splits: thread tid takes rows 4 (tid % 8) .. + 4 of columns tid / 8 + 16 i (from cf: copies.cuh)
    static_assert(THREADS == 128, "four warps copy 32 columns of a row-major chunk at a time");
    const int lr = 4 * (tid & 7), lc = tid >> 3;
    const int chunks = (mr + KC - 1) / KC;
    auto issue = [&](int ch) {
        if (ch < chunks) {
            float* st = S.stage[ch % STAGES][0];
            const int row = ch * KC + lr;
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int col = lc + 16 * i;
                const bool vok = row < mr && col < w, cok = row < mr && col < ncs;
                copy_async<16>(st + col * SC + lr, vok ? v + (int64_t)col * ldv + row : v, vok);
                if (!cf) copy_async<16>(st + NT * SC + col * SC + lr, cok ? c + (int64_t)col * ldc + row : c, cok);
            }
            if (cf)
                copy_chunk_from_rows<KC, NT>(st + NT * SC, [](int r, int col) { return col * SC + r; }, cf, cf_rs,
                                             ch * KC, mr, ncs);
        }
        copy_async_commit();
    };
    // body(ch, staged chunk) once the chunk's V (and, with split_c, its C) is in the planes
    auto stream = [&](bool split_c, auto&& body) {
#pragma unroll
        for (int s = 0; s < STAGES - 1; ++s) issue(s);
        for (int ch = 0; ch < chunks; ++ch) {
            copy_async_wait<STAGES - 2>();
            __syncthreads();  // the chunk is in; every warp is done with the planes and the stage of the one before
            issue(ch + STAGES - 1);
            const float* st = S.stage[ch % STAGES][0];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int col = lc + 16 * i;
                split_into_planes(st + col * SC + lr, V_SCALE, 1.f, S.vh, S.vl, col, lr);
                if (split_c)
                    split_into_planes(st + NT * SC + col * SC + lr, S.s1[col], S.s2[col], S.ch, S.cl, col, lr);
            }
            __syncthreads();
            body(ch, st);
        }
        copy_async_wait<0>();
        __syncthreads();
    };

    bool keep = false;  // W is zero: the strip's entries are stored unchanged (cf)
    if constexpr (PART != WyPart::apply) {
        // ---- W = V^T C: warp (wm, wn) owns W's rows 32 wm .. + 32 (two m16 tiles) and columns 32 wn .. + 32 (four n8)
        const int wm = warp & 1, wn = warp >> 1;
        float big[2][4][4] = {}, small[2][4][4] = {};
        {
            // ldmatrix rows of this lane: A (V^T: rows w, k along the chunk) from matrix l / 8 = rows + 8 (l / 8 & 1),
            // k + 8 (l / 16); B (C: rows j, k along the chunk) from matrix l / 8 = columns + 8 (l / 16),
            // k + 8 (l / 8 & 1)
            const int mi = lane >> 3, ra = (lane & 7) + 8 * (mi & 1), ka = 8 * (mi >> 1);
            const int rb = (lane & 7) + 8 * (mi >> 1), kb = 8 * (mi & 1);
            stream(true, [&](int, const float*) {
#pragma unroll
                for (int k16 = 0; k16 < KC / 16; ++k16) {
                    uint32_t ah[2][4], al[2][4], bh[2][4], bl[2][4];
#pragma unroll
                    for (int mt = 0; mt < 2; ++mt) {
                        const int at = plane_at(32 * wm + 16 * mt + ra, 16 * k16 + ka);
                        ldsm4(ah[mt], S.vh + at);
                        ldsm4(al[mt], S.vl + at);
                    }
#pragma unroll
                    for (int np = 0; np < 2; ++np) {  // n8 tiles 2 np and 2 np + 1
                        const int at = plane_at(32 * wn + 16 * np + rb, 16 * k16 + kb);
                        ldsm4(bh[np], S.ch + at);
                        ldsm4(bl[np], S.cl + at);
                    }
#pragma unroll
                    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
                        for (int nt = 0; nt < 4; ++nt) {
                            const uint32_t* h = bh[nt >> 1];
                            const uint32_t* l = bl[nt >> 1];
                            const int o = 2 * (nt & 1);
                            mma16(small[mt][nt], al[mt], h[o], h[o + 1]);
                            mma16(small[mt][nt], ah[mt], l[o], l[o + 1]);
                            mma16(big[mt][nt], ah[mt], h[o], h[o + 1]);
                        }
                }
            });
        }
        // warp (wm, wn)'s 32 x 32 tile of hi + lo: store(i, j, entry) for W's row i and column j
        auto each_w = [&](const float (&hi)[2][4][4], const float (&lo)[2][4][4], auto&& store) {
#pragma unroll
            for (int mt = 0; mt < 2; ++mt)
#pragma unroll
                for (int nt = 0; nt < 4; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        store(32 * wm + 16 * mt + g + (e & 2 ? 8 : 0), 32 * wn + 8 * nt + 2 * q + (e & 1),
                              hi[mt][nt][e] + lo[mt][nt][e]);
        };
        if constexpr (PART == WyPart::partial_w) {  // W_s in C's scaled units, and the exponent that undoes them
            float* out = sw.part + (item * splits + split) * (WV * NT);
            each_w(big, small, [&](int i, int j, float x) { out[j * WV + i] = x; });
            if (tid < NT) sw.scale[(item * splits + split) * NT + tid] = -(14 + k_exp);
            return;
        }
        // W exactly zero: C += V (T^T W) would add zeros, so the strip keeps its bits (negative zeros too) without the
        // second pass; exact zero tails and reduced columns cost one read (as in update.cu)
        bool nonzero = false;
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int nt = 0; nt < 4; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) nonzero |= big[mt][nt][e] != 0.f || small[mt][nt][e] != 0.f;
        keep = !__syncthreads_or(nonzero);
        if (keep && !cf) return;
        // the tile times f into shared memory: W(k, j) at j LDW + k
        auto put_w = [&](const float (&hi)[2][4][4], const float (&lo)[2][4][4], float f) {
            each_w(hi, lo, [&](int i, int j, float x) { S.ws[j * LDW + i] = x * f; });
        };
        // W in C's scaled units; T into the stage area, T(r, cc) at cc LDW + r
        put_w(big, small, 1.f / V_SCALE);
        float* Ts = S.stage[0][0];
        for (int idx = tid; idx < WV * WV; idx += THREADS) {
            const int r = idx % WV, cc = idx / WV;
            Ts[cc * LDW + r] = r < w && cc < w ? t[r * t_rs + cc * t_cs] : 0.f;
        }
        __syncthreads();

        // ---- W' = -T^T W in 3xTF32 (update.cu's tiling: warp (wm, wn), rows 32 wm, columns 32 wn)
        {
            float tb[2][4][4] = {}, tsm[2][4][4] = {};
            tf32x3_warp_tile<2, 4, WV / 8>(
                tb, tsm,
                [&](int mt, int ks) { return tf32x3_a_ldsm(Ts + (32 * wm + 16 * mt) * LDW + 8 * ks, LDW, lane); },
                [&](int nt, int ks) { return tf32x3_b_ldsm(S.ws + (32 * wn + 8 * nt) * LDW + 8 * ks, LDW, lane); });
            __syncthreads();
            put_w(tb, tsm, -1.f);
            __syncthreads();
        }
    } else {  // W' from wy_reduce_kernel (the true one: wq's column j times 2^e_of[j]), or nothing to add
        const float* wq = sw.wq + item * (WV * NT);
        bool nonzero = false;
        for (int idx = tid; idx < WV * NT; idx += THREADS) {
            const float x = wq[idx];
            S.ws[(idx / WV) * LDW + idx % WV] = x;
            nonzero |= x != 0.f;
        }
        if (!__syncthreads_or(nonzero)) return;  // the rows keep their bits
    }
    // W''s column scales: its largest entry into [2^13, 2^14) (1 for a zero or non-finite column); the update's factor
    // in two (u1 u2: one rounding, in the fma), from V's, W''s and C's scales (whole) or W''s exponent (apply)
    if (tid < NT) {
        float m = 0.f;
        for (int k = 0; k < WV; ++k) m = fmaxf(m, fabsf(S.ws[tid * LDW + k]));
        const int e = m > 0.f && isfinite(m) ? min(max(13 - ilogbf(m), -126), 126) : 0;
        S.wsc[tid] = ldexpf(1.f, e);
        // as an exponent, split in two: 2^-(14 + e + k_j) can pass FP32's range where one product would not
        const int x = (PART == WyPart::apply ? sw.e_of[item * NT + tid] : -k_exp) - 14 - e;
        S.u1[tid] = ldexpf(1.f, x / 2), S.u2[tid] = ldexpf(1.f, x - x / 2);
    }
    __syncthreads();

    // ---- C^T += W'^T V^T: warp owns columns 16 warp .. + 16 of the strip (one m16 tile) and all 32 rows of a chunk
    // (four n8 tiles). A = W'^T (rows j, k = w) split once into registers; B = V^T by ldmatrix.trans of V's planes.
    const int j3 = 16 * warp;
    uint32_t wh[WV / 16][4], wl[WV / 16][4];
#pragma unroll
    for (int k16 = 0; k16 < WV / 16; ++k16)
#pragma unroll
        for (int r = 0; r < 4; ++r) {  // a_r: row g (+ 8 for r odd), k 2q (+ 8 for r >= 2)
            const int j = j3 + g + 8 * (r & 1), k = 16 * k16 + 2 * q + 8 * (r >> 1);
            const float2 x = *reinterpret_cast<const float2*>(S.ws + j * LDW + k);
            split2(x.x * S.wsc[j], x.y * S.wsc[j], wh[k16][r], wl[k16][r]);
        }
    float f1[2], f2[2];
    for (int h = 0; h < 2; ++h) f1[h] = S.u1[j3 + g + 8 * h], f2[h] = S.u2[j3 + g + 8 * h];
    float* ccol[2];  // this lane's columns j3 + g and + 8 (column 0 for one past the strip: never stored)
    for (int h = 0; h < 2; ++h) ccol[h] = c + (int64_t)(j3 + g + 8 * h < ncs ? j3 + g + 8 * h : 0) * ldc;
    // ldmatrix.trans rows: w = k + (l / 8 & 1) 8 + l % 8, chunk rows i + 8 (l / 16)
    const int mi = lane >> 3, kt = (lane & 7) + 8 * (mi & 1), it = 8 * (mi >> 1);
    stream(false, [&](int ch, const float* st) {
        float up[4][4] = {}, upsmall[4][4] = {};
#pragma unroll
        for (int k16 = 0; k16 < WV / 16; ++k16)
#pragma unroll
            for (int np = 0; np < 2; ++np) {  // n8 tiles (rows of the chunk) 2 np, 2 np + 1
                uint32_t bh[4], bl[4];
                const int at = plane_at(16 * k16 + kt, 16 * np + it);
                ldsm4t(bh, S.vh + at);
                ldsm4t(bl, S.vl + at);
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int n = 2 * np + h;
                    mma16(upsmall[n], wl[k16], bh[2 * h], bh[2 * h + 1]);
                    mma16(upsmall[n], wh[k16], bl[2 * h], bl[2 * h + 1]);
                    mma16(up[n], wh[k16], bh[2 * h], bh[2 * h + 1]);
                }
            }
        const float* cst = st + NT * SC;
#pragma unroll
        for (int n = 0; n < 4; ++n)
#pragma unroll
            for (int h = 0; h < 2; ++h) {  // column j3 + g + 8 h, rows 8 n + 2 q and + 1 (both in or both out)
                const int j = j3 + g + 8 * h, i = 8 * n + 2 * q, row = ch * KC + i;
                if (j >= ncs || row >= mr) continue;
                const float2 old = *reinterpret_cast<const float2*>(cst + j * SC + i);
                const float u0 = (up[n][2 * h] + upsmall[n][2 * h]) * f1[h];
                const float u1 = (up[n][2 * h + 1] + upsmall[n][2 * h + 1]) * f1[h];
                *reinterpret_cast<float2*>(ccol[h] + row) =
                    keep ? old : make_float2(fmaf(u0, f2[h], old.x), fmaf(u1, f2[h], old.y));
            }
    });
}

// Column j of each matrix: k_j with 2^k_j times its 2-norm (times 1 + 2^-10) in [2^13, 2^14); 0 for a zero or
// non-finite norm. Sums in FP64 (no square overflows or underflows). A block per (matrix, 32 columns): along rows a
// warp per column where rows are contiguous, else 32 columns a row at a time.
constexpr int SCALE_THREADS = 256;

__global__ void __launch_bounds__(SCALE_THREADS) column_scales_kernel(const float* a, int64_t rs, int64_t cs,
                                                                      int64_t bs, int m, int n, int* k_out) {
    qr2_follow_previous_kernel();  // launched with Qr2Launch::pdl
    __shared__ double part[SCALE_THREADS];
    const int groups = (n + 31) / 32;  // block x: matrix x / groups, columns 32 (x % groups) ..
    const int64_t b = blockIdx.x / groups;
    const int j0 = (int)(blockIdx.x - b * groups) * 32, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    a += b * bs;
    double sum = 0.0;
    int j;
    if (rs == 1) {  // warp w: columns j0 + w + 8 s, its lanes along the rows
        for (int s = 0; s < 4; ++s) {
            const int col = j0 + warp + 8 * s;
            double x = 0.0;
            if (col < n)
                for (int i = lane; i < m; i += 32) {
                    const double e = a[i + (int64_t)col * cs];
                    x += e * e;
                }
            for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
            if (lane == 0) part[warp + 8 * s] = x;
        }
        __syncthreads();
        if (tid >= 32) return;
        j = j0 + tid;
        sum = part[tid];
    } else {  // thread (row phase warp, column lane)
        const int col = j0 + lane;
        if (col < n)
            for (int i = warp; i < m; i += SCALE_THREADS / 32) {
                const double e = a[(int64_t)i * rs + (int64_t)col * cs];
                sum += e * e;
            }
        part[tid] = sum;
        __syncthreads();
        if (tid >= 32) return;
        j = j0 + tid;
        sum = 0.0;
        for (int p = 0; p < SCALE_THREADS / 32; ++p) sum += part[32 * p + tid];
    }
    if (j >= n) return;
    const double norm = sqrt(sum) * (1.0 + 0x1p-10);
    int e = 0;
    if (norm > 0.0 && isfinite(norm)) frexp(norm, &e);  // norm in [2^(e-1), 2^e)
    k_out[b * n + j] = norm > 0.0 && isfinite(norm) ? 14 - e : 0;
}

}  // namespace

extern "C" int qr2_column_scales_run(const float* a, int64_t rs, int64_t cs, int64_t bs, int m, int n, int64_t batch,
                                     int* k_out, void* stream) {
    if (batch <= 0 || n <= 0) return 0;
    const int64_t groups = (n + 31) / 32;
    if (batch > INT_MAX / groups) return qr2_record_error("column_scales launch", "more than 2^31 - 1 thread blocks");
    Qr2Launch how;
    how.pdl = true;  // the kernel starts with qr2_follow_previous_kernel
    how.grid = dim3((unsigned)(batch * groups));
    how.block = dim3(SCALE_THREADS);
    return qr2_launch(column_scales_kernel, how, stream, "column_scales launch", a, rs, cs, bs, m, n, k_out);
}

bool qr2_update_fp16_holds(int mr, int w, int64_t ldv, int64_t v_bs, int64_t ldc, int64_t c_bs, const float* v,
                           const float* c) {
    return w > 32 && w <= WV && mr % 4 == 0 && ldv % 4 == 0 && v_bs % 4 == 0 && ldc % 4 == 0 && c_bs % 4 == 0 &&
           (uintptr_t)v % 16 == 0 && (uintptr_t)c % 16 == 0;
}

int qr2_update_fp16_run(const WyArgs& a, WyPart part, int split_rows, const WySplitWork& sw, void* stream) {
    if (a.batch <= 0 || a.nc <= 0 || a.mr <= 0) return 0;
    if (a.cf && part != WyPart::whole) return qr2_record_error("fp16 update", "split parts read C in place");
    const int64_t strips = (a.nc + NT - 1) / NT;
    const int splits = (a.mr + split_rows - 1) / split_rows;
    if (a.batch > INT_MAX / strips / splits)
        return qr2_record_error("fp16 update launch", "more than 2^31 - 1 thread blocks");
    Qr2Launch how;
    how.pdl = true;  // the kernel starts with qr2_follow_previous_kernel
    how.grid = dim3((unsigned)(a.batch * strips * splits));
    how.block = dim3(THREADS);
    how.smem = sizeof(Smem);
    how.smem_limit = how.smem;
    auto kernel = part == WyPart::whole       ? fp16_update_kernel<WyPart::whole>
                  : part == WyPart::partial_w ? fp16_update_kernel<WyPart::partial_w>
                                              : fp16_update_kernel<WyPart::apply>;
    return qr2_launch(kernel, how, stream, "fp16 update launch", strips, splits, split_rows, a.mr, a.w, a.nc, a.v,
                      a.ldv, a.v_bs, a.t, a.t_rs, a.t_cs, a.t_bs, a.c, a.ldc, a.c_bs, a.scale_exp, a.scale_bs, a.tail,
                      a.cf, a.cf_rs, a.cf_bs, sw);
}

int qr2_update_fp16_blocks_per_sm(const qr2_device* dev) {
    static std::atomic<int> regs{-1};
    if (regs.load(std::memory_order_relaxed) < 0) {
        cudaFuncAttributes fa;
        if (cudaFuncGetAttributes(&fa, fp16_update_kernel<WyPart::partial_w>) != cudaSuccess) {
            (void)cudaGetLastError();
            return 3;  // what its shared memory allows an H200 SM
        }
        regs.store(fa.numRegs, std::memory_order_relaxed);
    }
    const int per_thread = (regs.load(std::memory_order_relaxed) + 7) / 8 * 8;  // allocated in eights
    const int by_regs = 65536 / (per_thread * THREADS);
    const int by_smem = (dev->smem_optin + 1024) / ((int)sizeof(Smem) + 1024);
    const int blocks = by_regs < by_smem ? by_regs : by_smem;
    return blocks < 1 ? 1 : blocks;
}
