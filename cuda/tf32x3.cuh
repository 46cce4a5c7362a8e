// tf32x3.cuh - FP32-accurate products on tensor cores: each FP32 operand split into a TF32 high part and a low part,
// a*b ~ a_hi*b_hi + a_hi*b_lo + a_lo*b_hi (the a_lo*b_lo term, under 2^-20 relative, dropped), accumulated in FP32
// by mma.sync m16n8k8. Operands are read from shared memory as FP32 and split as they are loaded into fragments; the
// caller owns the shared-memory layout.
#pragma once

#include <cuda_runtime.h>
#include <stdint.h>

// x = hi + lo exactly: hi is x truncated to TF32, lo = x - hi (|lo| < 2^-10 |x|), which the tensor core reads truncated
// to TF32 in turn. Two instructions; the products keep about 20 bits (the dropped lo*lo term and lo's truncation).
__device__ __forceinline__ float2 tf32x3_split(float x) {
    const float hi = __uint_as_float(__float_as_uint(x) & 0xffffe000u);
    return make_float2(hi, x - hi);
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
template <typename At>
__device__ __forceinline__ Tf32x3A tf32x3_load_a(At at, int g, int q) {  // at(i, k): A's entry, i < 16, k < 8
    const float2 e[4] = {tf32x3_split(at(g, q)), tf32x3_split(at(g + 8, q)), tf32x3_split(at(g, q + 4)),
                         tf32x3_split(at(g + 8, q + 4))};
    Tf32x3A f;
#pragma unroll
    for (int i = 0; i < 4; ++i) f.hi[i] = __float_as_uint(e[i].x), f.lo[i] = __float_as_uint(e[i].y);
    return f;
}

template <typename Bt>
__device__ __forceinline__ Tf32x3B tf32x3_load_b(Bt at, int g, int q) {  // at(k, j): B's entry, k < 8, j < 8
    const float2 e0 = tf32x3_split(at(q, g)), e1 = tf32x3_split(at(q + 4, g));
    Tf32x3B f;
    f.hi[0] = __float_as_uint(e0.x), f.lo[0] = __float_as_uint(e0.y);
    f.hi[1] = __float_as_uint(e1.x), f.lo[1] = __float_as_uint(e1.y);
    return f;
}

// big += a_hi b_hi, small += a_lo b_hi + a_hi b_lo: two accumulators, so that the three products of a tile are not
// one dependent chain, and the small terms are not rounded into the big ones until the caller adds them.
__device__ __forceinline__ void tf32x3_mma(float (&big)[4], float (&small)[4], const Tf32x3A& a, const Tf32x3B& b) {
    mma_tf32(small, a.lo, b.hi);
    mma_tf32(small, a.hi, b.lo);
    mma_tf32(big, a.hi, b.hi);
}

// big + small += A B over one warp tile of (16 MT) x (8 NT) and depth 8 KSTEPS: a(i, k), b(k, j) give the entries of A
// and B relative to the tile's origin.
template <int MT, int NT, int KSTEPS, typename At, typename Bt>
__device__ __forceinline__ void tf32x3_warp_tile(float (&big)[MT][NT][4], float (&small)[MT][NT][4], At a, Bt b,
                                                 int lane) {
    const int g = lane >> 2, q = lane & 3;
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks) {
        const int k0 = 8 * ks;
        Tf32x3A fa[MT];
        Tf32x3B fb[NT];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
            fa[mt] = tf32x3_load_a([&](int i, int k) { return a(16 * mt + i, k0 + k); }, g, q);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
            fb[nt] = tf32x3_load_b([&](int k, int j) { return b(k0 + k, 8 * nt + j); }, g, q);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) tf32x3_mma(big[mt][nt], small[mt][nt], fa[mt], fb[nt]);
    }
}
