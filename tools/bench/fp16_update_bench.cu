// fp16_update_bench.cu - a prototype of the blocked route's 64-wide update, C -= V (T^T (V^T C)), with its two large
// products on FP16 tensor cores at FP32 accuracy (fp16x3: each operand scaled by a power of two and split into FP16 hi
// and lo, hi.hi + hi.lo + lo.hi summed in FP32), checked against FP64 on the host; and the mma.sync rates of TF32
// m16n8k8 and FP16 m16n8k16 on this GPU. A development aid, not part of the library (setup.py builds cuda/ only):
//
//   nvcc -O3 -std=c++17 -arch=sm_90a -Icuda tools/bench/fp16_update_bench.cu -o /tmp/fp16_update_bench
//   /tmp/fp16_update_bench [batch mr nc]        (default 640 512 448: the first 64-wide update of 640 x 512)
//
// The scales are known before the kernel reads C: V's entries obey |v| <= 1 (a fixed 2^14), and every entry of a
// trailing column obeys the 2-norm of the input's column (orthogonal updates keep it), so C's column j is scaled by
// cscale[j], a power of two that takes that norm into [2^13, 2^14) (tools/precision_study.py --modes fp16x3_bound).
// W' = -T^T W stays in one block, so its columns are scaled by their measured largest entry. T^T W runs in 3xTF32 as in
// the library (cuda/tf32x3.cuh).
//
// One block of four warps per (matrix, 64-column strip); chunks of 32 rows stream through a cp.async ring (FP32), and
// each chunk is split once per block into FP16 hi and lo planes in shared memory, from which every warp loads its
// fragments by ldmatrix: V^T for W = V^T C and C for it without transposing, V^T for C^T += W'^T V^T with
// ldmatrix.trans (FP16 only). Prototype limits: mr % 32 == 0, nc % 64 == 0, w = 64.
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "tf32x3.cuh"

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));    \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#ifndef STAGES
#define STAGES 2
#endif

namespace {

constexpr int KC = 32;       // rows of a chunk
constexpr int SC = KC + 8;   // a staged column's stride in floats: the second product's reads of C hit 32 banks
constexpr int WV = 64;       // reflectors
constexpr int NT = 64;       // columns of a strip
constexpr int THREADS = 128;
constexpr int LDW = WV + 4;  // W and T in shared memory (FP32), as the library's update
constexpr float V_SCALE = 16384.f;  // 2^14: |v| <= 1

// A plane: FP16, one 32-row column of a chunk per 64 bytes, its four 16-byte units permuted by the column so that the
// eight rows of an ldmatrix matrix (eight consecutive columns, one unit each) fall in eight different bank groups.
__device__ __forceinline__ int plane_at(int c, int r) { return c * KC + ((((r >> 3) ^ (c >> 1)) & 3) << 3) + (r & 7); }

struct Smem {
    float stage[STAGES][2][NT * SC];  // [V | C] chunks, FP32, column c at c SC
    __half vh[WV * KC], vl[WV * KC];  // V's chunk split (scaled by 2^14)
    __half ch[NT * KC], cl[NT * KC];  // C's chunk split (column j scaled by cscale[j])
    float ws[NT * LDW];               // W, then W' (W(k, j) at j LDW + k)
    float cs[NT], wsc[NT];            // C's column scales; W''s
};
static_assert(WV * LDW <= STAGES * 2 * NT * SC, "T is kept where the chunks were");

__device__ __forceinline__ void copy16(float* dst, const float* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src));
}

__device__ __forceinline__ void ldsm4(uint32_t (&r)[4], const __half* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"((unsigned)__cvta_generic_to_shared(p)));
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

// Four consecutive rows of a staged column, scaled and split into the planes.
__device__ __forceinline__ void split_rows(const float* src, float s, __half* hi, __half* lo, int c, int r) {
    const float4 x = *reinterpret_cast<const float4*>(src);
    uint2 h, l;
    split2(x.x * s, x.y * s, h.x, l.x);
    split2(x.z * s, x.w * s, h.y, l.y);
    *reinterpret_cast<uint2*>(hi + plane_at(c, r)) = h;
    *reinterpret_cast<uint2*>(lo + plane_at(c, r)) = l;
}

// C_strip -= V (T^T (V^T C_strip)) for the 64-column strip of each block. V: mr x 64 (ld mr, mr 64 apart), T: 64 x 64
// upper (column-major, 4096 apart), C: mr x nc (ld mr, mr nc apart), cscale: nc per matrix.
__global__ void __launch_bounds__(THREADS) fp16_update_kernel(int mr, int nc, const float* v, const float* t, float* c,
                                                              const float* cscale) {
    extern __shared__ float4 smem4[];
    Smem& S = *reinterpret_cast<Smem*>(smem4);
    const int strips = nc / NT;
    const int b = blockIdx.x / strips, j0 = (blockIdx.x % strips) * NT;
    v += (size_t)b * mr * WV;
    t += (size_t)b * WV * WV;
    c += (size_t)b * mr * nc + (size_t)j0 * mr;
    cscale += (size_t)b * nc + j0;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;
    if (tid < NT) S.cs[tid] = cscale[tid];

    // copies and splits: thread tid takes rows 4 (tid % 8) .. + 4 of columns tid / 8 + 16 i
    const int lr = 4 * (tid & 7), lc = tid >> 3;
    const int chunks = mr / KC;
    auto issue = [&](int ch) {
        if (ch < chunks) {
            float* st = S.stage[ch % STAGES][0];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int col = lc + 16 * i;
                copy16(st + col * SC + lr, v + (size_t)col * mr + ch * KC + lr);
                copy16(st + NT * SC + col * SC + lr, c + (size_t)col * mr + ch * KC + lr);
            }
        }
        asm volatile("cp.async.commit_group;");
    };
    // body(ch, staged V and C) after the chunk's V (and, with split_c, C) is in the planes
    auto stream = [&](bool split_c, auto&& body) {
#pragma unroll
        for (int s = 0; s < STAGES - 1; ++s) issue(s);
        for (int ch = 0; ch < chunks; ++ch) {
            asm volatile("cp.async.wait_group %0;" ::"n"(STAGES - 2));
            __syncthreads();  // the chunk is in; every warp is done with the planes of the one before
            issue(ch + STAGES - 1);
            const float* st = S.stage[ch % STAGES][0];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int col = lc + 16 * i;
                split_rows(st + col * SC + lr, V_SCALE, S.vh, S.vl, col, lr);
                if (split_c) split_rows(st + NT * SC + col * SC + lr, S.cs[col], S.ch, S.cl, col, lr);
            }
            __syncthreads();
            body(ch, st);
        }
        asm volatile("cp.async.wait_group 0;");
        __syncthreads();
    };

    // ---- W = V^T C: warp (wm, wn) owns W's rows 32 wm .. + 32 (two m16 tiles) and columns 32 wn .. + 32 (four n8)
    const int wm = warp & 1, wn = warp >> 1;
    float big[2][4][4] = {}, small[2][4][4] = {};
    {
        // ldmatrix row addresses of this lane: A (V^T, rows w, k = rows of the chunk): matrix l / 8 holds rows
        // + 8 (l / 8 & 1), k + 8 (l / 16); B (C, rows j, k contiguous): matrix l / 8 holds columns + 8 (l / 16),
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
    // W unscaled into shared memory: W(k, j) at j LDW + k
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int i = 32 * wm + 16 * mt + g + (e & 2 ? 8 : 0), j = 32 * wn + 8 * nt + 2 * q + (e & 1);
                S.ws[j * LDW + i] = (big[mt][nt][e] + small[mt][nt][e]) * (1.f / V_SCALE) / S.cs[j];
            }
    // T into the stage area: T(r, cc) at cc LDW + r
    float* Ts = S.stage[0][0];
    for (int idx = tid; idx < WV * WV; idx += THREADS) Ts[(idx / WV) * LDW + idx % WV] = t[idx];
    __syncthreads();

    // ---- W' = -T^T W in 3xTF32 (the library's tiling: warp (wm, wn), rows 32 wm, columns 32 wn)
    {
        float tb[2][4][4] = {}, tsm[2][4][4] = {};
        tf32x3_warp_tile<2, 4, WV / 8>(
            tb, tsm, [&](int mt, int ks) { return tf32x3_a_ldsm(Ts + (32 * wm + 16 * mt) * LDW + 8 * ks, LDW, lane); },
            [&](int nt, int ks) { return tf32x3_b_ldsm(S.ws + (32 * wn + 8 * nt) * LDW + 8 * ks, LDW, lane); });
        __syncthreads();
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int nt = 0; nt < 4; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int i = 32 * wm + 16 * mt + g + (e & 2 ? 8 : 0), j = 32 * wn + 8 * nt + 2 * q + (e & 1);
                    S.ws[j * LDW + i] = -(tb[mt][nt][e] + tsm[mt][nt][e]);
                }
        __syncthreads();
    }
    // W''s column scales: its largest entry into [2^13, 2^14) (1 for a zero or non-finite column)
    if (tid < NT) {
        float m = 0.f;
        for (int k = 0; k < WV; ++k) m = fmaxf(m, fabsf(S.ws[tid * LDW + k]));
        S.wsc[tid] = m > 0.f && isfinite(m) ? ldexpf(1.f, min(13 - ilogbf(m), 126)) : 1.f;
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
    const float inv[2] = {1.f / S.wsc[j3 + g], 1.f / S.wsc[j3 + g + 8]};  // and 2^-14, applied first
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
            for (int h = 0; h < 2; ++h) {  // column j3 + g + 8 h, rows 8 n + 2 q and + 1
                const int j = j3 + g + 8 * h, i = 8 * n + 2 * q;
                const float2 old = *reinterpret_cast<const float2*>(cst + j * SC + i);
                const float u0 = (up[n][2 * h] + upsmall[n][2 * h]) * (1.f / V_SCALE);
                const float u1 = (up[n][2 * h + 1] + upsmall[n][2 * h + 1]) * (1.f / V_SCALE);
                const float2 nw = make_float2(fmaf(u0, inv[h], old.x), fmaf(u1, inv[h], old.y));
                *reinterpret_cast<float2*>(c + (size_t)j * mr + ch * KC + i) = nw;
            }
    });
}

// ---- the mma.sync rates: each warp issues `iters` rounds of eight independent mma
template <bool F16>
__global__ void mma_rate_kernel(int iters, float* sink) {
    float d[8][4] = {};
    uint32_t a[4] = {0x3c003c00u ^ threadIdx.x, 0x3c003c00u, 0x3c003c00u, 0x3c003c00u}, b0 = 0x3c003c00u, b1 = b0;
    for (int it = 0; it < iters; ++it)
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            if constexpr (F16) {
                mma16(d[k], a, b0, b1);
            } else {
                const uint32_t bb[2] = {b0, b1};
                mma_tf32(d[k], a, bb);
            }
        }
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < 8; ++k) s += d[k][0] + d[k][1] + d[k][2] + d[k][3];
    if (s == 12345.f) sink[threadIdx.x] = s;
}

}  // namespace

int main(int argc, char** argv) {
    const int batch = argc > 1 ? atoi(argv[1]) : 640, mr = argc > 2 ? atoi(argv[2]) : 512,
              nc = argc > 3 ? atoi(argv[3]) : 448;
    if (mr % KC || nc % NT || mr < WV) {
        fprintf(stderr, "mr must be a multiple of 32 (>= 64), nc of 64\n");
        return 1;
    }
    int dev = 0, sms = 0;
    CHECK(cudaGetDevice(&dev));
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));

    // V: unit lower trapezoidal, |v| <= 1; T: the compact-WY T of V's reflectors (tau = 2 / v^T v, LAPACK's slarft in
    // FP64), so I - V T V^T is orthogonal and repeated launches keep C's column norms (and cscale valid); C: normal,
    // some columns scaled far out
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    std::normal_distribution<float> nd(0.f, 1.f);
    std::vector<float> V((size_t)batch * mr * WV), T((size_t)batch * WV * WV, 0.f), C((size_t)batch * mr * nc),
        cs((size_t)batch * nc);
    for (int bb = 0; bb < batch; ++bb) {
        for (int cc = 0; cc < WV; ++cc)
            for (int r = 0; r < mr; ++r) V[((size_t)bb * WV + cc) * mr + r] = r < cc ? 0.f : r == cc ? 1.f : u(rng);
        const float* vb = &V[(size_t)bb * mr * WV];
        std::vector<double> Td(WV * WV, 0.0), g(WV);
        for (int cc = 0; cc < WV; ++cc) {
            double vv = 0;
            for (int r = 0; r < mr; ++r) vv += (double)vb[(size_t)cc * mr + r] * vb[(size_t)cc * mr + r];
            const double tau = 2.0 / vv;
            for (int k = 0; k < cc; ++k) {  // g = V(:, :cc)^T v_cc
                g[k] = 0;
                for (int r = 0; r < mr; ++r) g[k] += (double)vb[(size_t)k * mr + r] * vb[(size_t)cc * mr + r];
            }
            for (int r = 0; r < cc; ++r) {  // T(:cc, cc) = -tau T(:cc, :cc) g
                double x = 0;
                for (int k = r; k < cc; ++k) x += Td[k * WV + r] * g[k];
                Td[cc * WV + r] = -tau * x;
            }
            Td[cc * WV + cc] = tau;
        }
        for (int i = 0; i < WV * WV; ++i) T[(size_t)bb * WV * WV + i] = (float)Td[i];
        for (int j = 0; j < nc; ++j) {
            const float scale = j % 17 == 3 ? 1e-25f : j % 17 == 5 ? 1e25f : 1.f;
            double norm = 0;
            for (int r = 0; r < mr; ++r) {
                const float x = nd(rng) * scale;
                C[((size_t)bb * nc + j) * mr + r] = x;
                norm += (double)x * x;
            }
            int e;
            frexp(sqrt(norm) * (1 + ldexp(1.0, -10)), &e);  // the bound in [2^(e-1), 2^e)
            cs[(size_t)bb * nc + j] = (float)ldexp(1.0, std::min(14 - e, 126));  // prototype: no second factor
        }
    }
    float *dV, *dT, *dC, *dC0, *dS, *sink;
    CHECK(cudaMalloc(&dV, V.size() * 4));
    CHECK(cudaMalloc(&dT, T.size() * 4));
    CHECK(cudaMalloc(&dC, C.size() * 4));
    CHECK(cudaMalloc(&dC0, C.size() * 4));
    CHECK(cudaMalloc(&dS, cs.size() * 4));
    CHECK(cudaMalloc(&sink, 4096));
    CHECK(cudaMemcpy(dV, V.data(), V.size() * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dT, T.data(), T.size() * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dC0, C.data(), C.size() * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dS, cs.data(), cs.size() * 4, cudaMemcpyHostToDevice));

    const size_t smem = sizeof(Smem);
    CHECK(cudaFuncSetAttribute(fp16_update_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    int per_sm = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fp16_update_kernel, THREADS, smem));
    cudaFuncAttributes fa;
    CHECK(cudaFuncGetAttributes(&fa, fp16_update_kernel));
    const dim3 grid(batch * (nc / NT));
    CHECK(cudaMemcpy(dC, dC0, C.size() * 4, cudaMemcpyDeviceToDevice));
    fp16_update_kernel<<<grid, THREADS, smem>>>(mr, nc, dV, dT, dC, dS);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    std::vector<float> out(C.size());
    CHECK(cudaMemcpy(out.data(), dC, C.size() * 4, cudaMemcpyDeviceToHost));

    // FP64 reference for the first and last matrix: error per column relative to its norm
    double worst = 0, worst_scaled = 0;
    for (int bb : {0, batch - 1}) {
        const float* v = &V[(size_t)bb * mr * WV];
        const float* tt = &T[(size_t)bb * WV * WV];
        for (int j = 0; j < nc; ++j) {
            const float* cj = &C[((size_t)bb * nc + j) * mr];
            double w[WV], w2[WV], norm = 0;
            for (int k = 0; k < WV; ++k) {
                w[k] = 0;
                for (int r = 0; r < mr; ++r) w[k] += (double)v[(size_t)k * mr + r] * cj[r];
            }
            for (int k = 0; k < WV; ++k) {  // (T^T w)_k = sum_r T(r, k) w_r
                w2[k] = 0;
                for (int r = 0; r <= k; ++r) w2[k] += (double)tt[k * WV + r] * w[r];
            }
            for (int r = 0; r < mr; ++r) norm += (double)cj[r] * cj[r];
            norm = sqrt(norm);
            double err = 0;
            for (int r = 0; r < mr; ++r) {
                double ref = cj[r];
                for (int k = 0; k < WV; ++k) ref -= (double)v[(size_t)k * mr + r] * w2[k];
                err = fmax(err, fabs(ref - out[((size_t)bb * nc + j) * mr + r]));
            }
            const double rel = norm > 0 ? err / norm : err;
            worst = fmax(worst, rel);
            if (j % 17 == 3 || j % 17 == 5) worst_scaled = fmax(worst_scaled, rel);
        }
    }
    printf("check: worst |error| / ||c_j|| %.3g (columns scaled by 1e+-25: %.3g); FP32 eps 5.96e-08\n", worst,
           worst_scaled);

    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    const int reps = 20;
    CHECK(cudaEventRecord(e0));
    for (int i = 0; i < reps; ++i) fp16_update_kernel<<<grid, THREADS, smem>>>(mr, nc, dV, dT, dC, dS);
    CHECK(cudaEventRecord(e1));
    CHECK(cudaGetLastError());
    CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, e0, e1));
    const double us = 1e3 * ms / reps, flops = 2.0 * batch * nc * (2.0 * mr * WV + WV * WV);
    const double bytes = 3.0 * batch * nc * mr * 4;  // C read twice and written once (V from L2)
    printf("fp16x3 update %d x %d x %d (STAGES %d): %.1f us a launch, %.1f TFLOP/s of FP32 work, %.2f TB/s of C; %d "
           "registers, %zu B shared, %d blocks an SM, %d blocks\n",
           batch, mr, nc, STAGES, us, flops / us * 1e-6, bytes / us * 1e-6, fa.numRegs, smem, per_sm, grid.x);

    for (int f16 = 0; f16 < 2; ++f16) {
        const int iters = 4096;
        const dim3 g(sms * 8), blk(128);
        auto k = f16 ? mma_rate_kernel<true> : mma_rate_kernel<false>;
        k<<<g, blk>>>(16, sink);
        CHECK(cudaEventRecord(e0));
        k<<<g, blk>>>(iters, sink);
        CHECK(cudaEventRecord(e1));
        CHECK(cudaGetLastError());
        CHECK(cudaEventSynchronize(e1));
        CHECK(cudaEventElapsedTime(&ms, e0, e1));
        const double per = f16 ? 2.0 * 16 * 8 * 16 : 2.0 * 16 * 8 * 8;
        printf("mma.sync %s: %.0f TFLOP/s\n", f16 ? "f16 m16n8k16" : "tf32 m16n8k8",
               per * 8.0 * iters * g.x * 4 / (ms * 1e-3) * 1e-12);
    }
    return 0;
}
