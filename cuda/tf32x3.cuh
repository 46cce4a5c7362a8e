// tf32x3.cuh - FP32-accurate products on tensor cores: each FP32 operand split into a TF32 high part and a low part,
// a*b ~ a_hi*b_hi + a_hi*b_lo + a_lo*b_hi (the a_lo*b_lo term, under 2^-20 relative, dropped), accumulated in FP32
// by mma.sync m16n8k8. Fragments come from shared memory as FP32, by ldmatrix where the operand is contiguous along
// k, element by element otherwise, and are split in registers; the caller owns the shared-memory layout.
#pragma once

#include <cuda_runtime.h>
#include <stdint.h>

// x = hi + lo exactly: hi is x truncated to TF32, lo = x - hi (|lo| < 2^-10 |x|), which the tensor core reads truncated
// to TF32 in turn. Two instructions; the products keep about 20 bits (the dropped lo*lo term and lo's truncation).
__device__ __forceinline__ void tf32x3_split(float x, uint32_t& hi, uint32_t& lo) {
    hi = __float_as_uint(x) & 0xffffe000u;
    lo = __float_as_uint(x - __uint_as_float(hi));
}

// d += a b for one 16x8x8 tile in TF32.
__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// A 16x8 A fragment and an 8x8 B fragment, each as high and low parts.
struct Tf32x3A {
    uint32_t hi[4], lo[4];
};
struct Tf32x3B {
    uint32_t hi[2], lo[2];
};

// Fragment coordinates of lane l (PTX ISA, mma.m16n8k8 .tf32): g = l / 4, q = l % 4.
// A (16x8): a0 (g, q), a1 (g + 8, q), a2 (g, q + 4), a3 (g + 8, q + 4).
// B (8x8): b0 (q, g), b1 (q + 4, g).  C/D (16x8): c0 (g, 2q), c1 (g, 2q + 1), c2 (g + 8, 2q), c3 (g + 8, 2q + 1).
//
// ldmatrix reads 8x4 FP32 matrices (8 rows of 16 bytes) and hands lane l element (l / 4, l % 4) of each: for an
// operand stored with k contiguous, that is a0..a3 of A from four matrices (rows i and i + 8, k and k + 4), and b0, b1
// of B from two (rows j, k and k + 4). Lane l gives the row address of row l % 8 of matrix l / 8; each row 16-byte
// aligned.
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const float* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"((unsigned)__cvta_generic_to_shared(row)));
}
__device__ __forceinline__ void ldsm_x2(uint32_t (&r)[2], const float* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"((unsigned)__cvta_generic_to_shared(row)));
}

// The row lane l addresses for an A fragment (matrices: rows 0-7 / 8-15 by l / 8 % 2, k 0-3 / 4-7 by l / 16) and a
// B fragment (rows 0-7, k 0-3 / 4-7 by l / 8 % 2): its row and its first k.
__device__ __forceinline__ int ldsm_a_row(int lane) { return (lane & 7) + (lane & 8); }
__device__ __forceinline__ int ldsm_a_k(int lane) { return (lane >> 2) & 4; }
__device__ __forceinline__ int ldsm_b_row(int lane) { return lane & 7; }
__device__ __forceinline__ int ldsm_b_k(int lane) { return (lane >> 1) & 4; }

// Split raw FP32 fragments, each entry first multiplied by s1 and then s2 when SCALED.
template <bool SCALED, int N>
__device__ __forceinline__ void tf32x3_split_all(const uint32_t (&x)[N], uint32_t (&hi)[N], uint32_t (&lo)[N], float s1,
                                                 float s2) {
#pragma unroll
    for (int i = 0; i < N; ++i) {
        float v = __uint_as_float(x[i]);
        if constexpr (SCALED) v = v * s1 * s2;
        tf32x3_split(v, hi[i], lo[i]);
    }
}
template <bool SCALED = false>
__device__ __forceinline__ Tf32x3A tf32x3_a(const uint32_t (&x)[4], float s1 = 1.f, float s2 = 1.f) {
    Tf32x3A f;
    tf32x3_split_all<SCALED>(x, f.hi, f.lo, s1, s2);
    return f;
}
template <bool SCALED = false>
__device__ __forceinline__ Tf32x3B tf32x3_b(const uint32_t (&x)[2], float s1 = 1.f, float s2 = 1.f) {
    Tf32x3B f;
    tf32x3_split_all<SCALED>(x, f.hi, f.lo, s1, s2);
    return f;
}

// A and B fragments by ldmatrix: `origin` is the fragment's (row 0, k 0) and `ld` the distance between rows, in floats.
template <bool SCALED = false>
__device__ __forceinline__ Tf32x3A tf32x3_a_ldsm(const float* origin, int ld, int lane, float s1 = 1.f, float s2 = 1.f) {
    uint32_t x[4];
    ldsm_x4(x, origin + ldsm_a_row(lane) * ld + ldsm_a_k(lane));
    return tf32x3_a<SCALED>(x, s1, s2);
}
template <bool SCALED = false>
__device__ __forceinline__ Tf32x3B tf32x3_b_ldsm(const float* origin, int ld, int lane, float s1 = 1.f, float s2 = 1.f) {
    uint32_t x[2];
    ldsm_x2(x, origin + ldsm_b_row(lane) * ld + ldsm_b_k(lane));
    return tf32x3_b<SCALED>(x, s1, s2);
}

// A B fragment element by element: at(k, j) gives B's entry, k < 8, j < 8.
template <typename Bt>
__device__ __forceinline__ Tf32x3B tf32x3_b_at(Bt at, int lane) {
    const int g = lane >> 2, q = lane & 3;
    Tf32x3B f;
    tf32x3_split(at(q, g), f.hi[0], f.lo[0]);
    tf32x3_split(at(q + 4, g), f.hi[1], f.lo[1]);
    return f;
}

// big += a_hi b_hi, small += a_lo b_hi + a_hi b_lo: two accumulators, so that the three products of a tile are not
// one dependent chain, and the small terms are not rounded into the big ones until the caller adds them.
__device__ __forceinline__ void tf32x3_mma(float (&big)[4], float (&small)[4], const Tf32x3A& a, const Tf32x3B& b) {
    mma_tf32(small, a.lo, b.hi);
    mma_tf32(small, a.hi, b.lo);
    mma_tf32(big, a.hi, b.hi);
}

// big + small += A B over one warp tile of (16 MT) x (8 NT) and depth 8 KSTEPS: load_a(mt, ks) and load_b(nt, ks)
// give the split fragments of the tile's 16 x 8 piece of A and 8 x 8 piece of B.
template <int MT, int NT, int KSTEPS, typename LoadA, typename LoadB>
__device__ __forceinline__ void tf32x3_warp_tile(float (&big)[MT][NT][4], float (&small)[MT][NT][4], LoadA load_a,
                                                 LoadB load_b) {
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks) {
        Tf32x3A fa[MT];
        Tf32x3B fb[NT];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) fa[mt] = load_a(mt, ks);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) fb[nt] = load_b(nt, ks);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) tf32x3_mma(big[mt][nt], small[mt][nt], fa[mt], fb[nt]);
    }
}
