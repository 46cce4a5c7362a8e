// fp16_update_bench.cu - the FP16 update (cuda/blocked/update_fp16.cu) alone, without the library: C -= V (T^T (V^T C))
// for a batch of random reflectors (T from them, so I - V T V^T is orthogonal), checked against FP64 on the host and
// timed; and the mma.sync rates of TF32 m16n8k8 and FP16 m16n8k16 on this GPU. A development aid (it compiles in
// seconds); not part of the library (setup.py builds cuda/ only):
//
//   nvcc -O3 -std=c++17 -arch=sm_90a -Icuda tools/bench/fp16_update_bench.cu -o /tmp/fp16_update_bench
//   /tmp/fp16_update_bench [batch mr nc]        (default 640 512 448: the first 64-wide update of 640 x 512)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "../../cuda/blocked/update_fp16.cu"

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));    \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#include "library_stubs.cuh"

namespace {

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
    if (mr % 4 || mr < WV || nc < 1) {
        fprintf(stderr, "mr must be a multiple of 4 (>= 64), nc at least 1\n");
        return 1;
    }
    int dev = 0, sms = 0;
    CHECK(cudaGetDevice(&dev));
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));

    // V: unit lower trapezoidal, |v| <= 1; T: the compact-WY T of V's reflectors (tau = 2 / v^T v, LAPACK's slarft in
    // FP64), so I - V T V^T is orthogonal and repeated launches keep C's column norms (and the scales valid);
    // C: normal, some columns scaled far out
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    std::normal_distribution<float> nd(0.f, 1.f);
    std::vector<float> V((size_t)batch * mr * WV), T((size_t)batch * WV * WV, 0.f), C((size_t)batch * mr * nc);
    std::vector<int> ks((size_t)batch * nc);
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
            ks[(size_t)bb * nc + j] = 14 - e;  // as qr2_column_scales_run
        }
    }
    float *dV, *dT, *dC, *dC0, *sink;
    int* dK;
    CHECK(cudaMalloc(&dV, V.size() * 4));
    CHECK(cudaMalloc(&dT, T.size() * 4));
    CHECK(cudaMalloc(&dC, C.size() * 4));
    CHECK(cudaMalloc(&dC0, C.size() * 4));
    CHECK(cudaMalloc(&dK, ks.size() * 4));
    CHECK(cudaMalloc(&sink, 4096));
    CHECK(cudaMemcpy(dV, V.data(), V.size() * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dT, T.data(), T.size() * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dC0, C.data(), C.size() * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dK, ks.data(), ks.size() * 4, cudaMemcpyHostToDevice));

    const size_t smem = sizeof(Smem);
    const auto kernel = fp16_update_kernel<WyPart::whole>;
    CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    int per_sm = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, THREADS, smem));
    cudaFuncAttributes fa;
    CHECK(cudaFuncGetAttributes(&fa, kernel));
    const dim3 grid(batch * ((nc + NT - 1) / NT));
    WyArgs args{};
    args.batch = batch, args.mr = mr, args.w = WV, args.nc = nc;
    args.v = dV, args.ldv = mr, args.v_bs = (int64_t)mr * WV;
    args.t = dT, args.t_rs = 1, args.t_cs = WV, args.t_bs = WV * WV;
    args.c = dC, args.ldc = mr, args.c_bs = (int64_t)mr * nc;
    args.scale_exp = dK, args.scale_bs = nc;
    auto launch = [&] {
        if (qr2_update_fp16_run(args, WyPart::whole, mr, WySplitWork{}, nullptr)) exit(1);
    };
    CHECK(cudaMemcpy(dC, dC0, C.size() * 4, cudaMemcpyDeviceToDevice));
    launch();
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
    const bool passed = worst < std::max(1e-5, mr * 0x1p-24);  // FP32's bound for dot products of length mr
    printf("check %s: worst |error| / ||c_j|| %.3g (columns scaled by 1e+-25: %.3g); FP32 eps 5.96e-08\n",
           passed ? "PASSED" : "FAILED", worst, worst_scaled);
    if (!passed) return 1;

    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    const int reps = 20;
    CHECK(cudaEventRecord(e0));
    for (int i = 0; i < reps; ++i) launch();
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
