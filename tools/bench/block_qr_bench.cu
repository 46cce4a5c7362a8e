// block_qr_bench.cu - the builder kernel (cuda/whole/builder.cu) alone, without the library: time per call by
// CUDA-graph replay of 20 launches, and the FP64 factor and orthogonality residuals (QR2's scaling) of the first and
// last matrix of each batch (the first has a column scaled by 1e-30: the FP64 path). A development aid: it compiles
// in seconds, so two versions of the kernel can be timed in one GPU run (tools/block_qr_bench.sh). Not part of the
// library: setup.py builds cuda/ only.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#ifndef BQ_FILE
#define BQ_FILE "../../cuda/whole/builder.cu"
#endif
#ifndef TAG
#define TAG "kernel"
#endif
#include BQ_FILE

#include "library_stubs.cuh"

// ||QR - A|| / (||A|| eps max(m, n)) and ||Q^T Q - I|| / (eps m) in FP64, from one column-major m x n matrix A and
// its H (column-major) and tau.
static void residuals(int m, int n, const float* A, const float* H, const float* tau, double* factor, double* orth) {
    const int K = m < n ? m : n;
    std::vector<double> Q(m * m, 0.0), v(m);  // Q = H_0 ... H_{K-1}, column-major, built from I backwards
    for (int i = 0; i < m; ++i) Q[i * m + i] = 1.0;
    for (int j = K - 1; j >= 0; --j) {
        for (int r = 0; r < m; ++r) v[r] = r < j ? 0.0 : r == j ? 1.0 : H[j * m + r];
        for (int c = 0; c < m; ++c) {
            double d = 0.0;
            for (int r = j; r < m; ++r) d += v[r] * Q[c * m + r];
            for (int r = j; r < m; ++r) Q[c * m + r] -= tau[j] * d * v[r];
        }
    }
    double err = 0.0, norm = 0.0, oerr = 0.0;
    for (int c = 0; c < n; ++c)
        for (int r = 0; r < m; ++r) {
            double qr = 0.0;
            for (int k = 0; k <= c && k < m; ++k) qr += Q[k * m + r] * H[c * m + k];  // R = triu(H)
            const double a = A[c * m + r];
            err += (qr - a) * (qr - a);
            norm += a * a;
        }
    for (int a = 0; a < m; ++a)
        for (int b = 0; b < m; ++b) {
            double s = a == b ? -1.0 : 0.0;
            for (int r = 0; r < m; ++r) s += Q[a * m + r] * Q[b * m + r];
            oerr += s * s;
        }
    const double eps = std::ldexp(1.0, -24);
    *factor = std::sqrt(err / norm) / (eps * (m > n ? m : n));
    *orth = std::sqrt(oerr) / (eps * m);
}

// The kernel under test: with -DBQ_CLUSTER=2 (or 3) a cluster of two (three) blocks per matrix where it holds the
// shape, else one block; shapes neither holds are skipped.
#ifndef BQ_CLUSTER
#define BQ_CLUSTER 1
#endif
static const qr2_device H200 = {0, 132, 232448, 1};
static int cluster_for(int m, int n) {
    return qr2_builder_holds(m, n, BQ_CLUSTER, &H200) ? BQ_CLUSTER : qr2_builder_holds(m, n, 1, &H200) ? 1 : 0;
}
static int run(const qr2_whole_qr_args* a, cudaStream_t stream) {
    return qr2_builder_run(a, cluster_for(a->m, a->n), &H200, stream);
}

int main(int argc, char** argv) {
    const int only = argc > 1 ? atoi(argv[1]) : 1 << 30;  // the first `only` shapes (a profiler run)
    int done = 0;
    const int shapes[][3] = {{40, 176, 176}, {1, 176, 176}, {40, 160, 160}, {40, 128, 128}, {40, 100, 100},
                             {132, 160, 160}, {40, 64, 64}, {640, 176, 176}, {640, 128, 128}, {40, 176, 100},
                             {40, 100, 176}, {20, 32, 32}, {3, 175, 175}, {3, 33, 33}, {2, 1, 1}, {2, 3, 5},
                             {2, 5, 3}, {2, 17, 17}, {2, 130, 99}, {2, 99, 130}, {4, 64, 63}, {2, 176, 1}, {1, 32, 32},
                             {20, 16, 16}, {640, 32, 32}, {20, 32, 20},
                             {40, 256, 256}, {1, 256, 256}, {40, 200, 200}, {40, 256, 128}, {3, 255, 199}};
    for (const auto& s : shapes) {
        if (done++ == only) break;
        const int batch = s[0], m = s[1], n = s[2], K = m < n ? m : n;
        if (!cluster_for(m, n)) continue;
        const size_t count = (size_t)batch * m * n;
        std::vector<float> A(count);
        srand(7);
        for (float& x : A) x = (float)rand() / RAND_MAX * 2 - 1;
        if (n > 4)
            for (int r = 0; r < m; ++r) A[(size_t)(n / 2) * m + r] *= 1e-30f;  // matrix 0: the FP64 path
        float *dA, *dH, *dtau;
        cudaMalloc(&dA, count * 4);
        cudaMalloc(&dH, count * 4);
        cudaMalloc(&dtau, (size_t)batch * K * 4);
        cudaMemcpy(dA, A.data(), count * 4, cudaMemcpyHostToDevice);
        qr2_whole_qr_args a{};
        a.batch = batch, a.m = m, a.n = n, a.src = dA, a.src_rs = 1, a.src_cs = m, a.src_bs = (int64_t)m * n;
        a.h = dH, a.tau = dtau;
        cudaStream_t stream;
        cudaStreamCreate(&stream);
        if (run(&a, stream) || cudaStreamSynchronize(stream) != cudaSuccess) {
            printf("%s %dx%dx%d: %s\n", TAG, batch, m, n, cudaGetErrorString(cudaGetLastError()));
            return 1;
        }
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal);
        for (int i = 0; i < 20; ++i) run(&a, stream);
        cudaStreamEndCapture(stream, &graph);
        cudaGraphInstantiate(&exec, graph, 0);
        cudaEvent_t start, stop;
        cudaEventCreate(&start);
        cudaEventCreate(&stop);
        float best = 1e30f;
        for (int rep = 0; rep < 20; ++rep) {
            cudaEventRecord(start, stream);
            cudaGraphLaunch(exec, stream);
            cudaEventRecord(stop, stream);
            cudaEventSynchronize(stop);
            float ms;
            cudaEventElapsedTime(&ms, start, stop);
            best = ms < best ? ms : best;
        }
        std::vector<float> H(count), tau((size_t)batch * K);
        cudaMemcpy(H.data(), dH, count * 4, cudaMemcpyDeviceToHost);
        cudaMemcpy(tau.data(), dtau, tau.size() * 4, cudaMemcpyDeviceToHost);
        double f0, o0, f1, o1;
        const size_t last = (size_t)(batch - 1) * m * n;
        residuals(m, n, A.data(), H.data(), tau.data(), &f0, &o0);
        residuals(m, n, A.data() + last, H.data() + last, tau.data() + (size_t)(batch - 1) * K, &f1, &o1);
        printf("%-6s %4dx%4dx%-4d %9.2f us  first: factor %.3f orth %.3f  last: factor %.3f orth %.3f\n", TAG, batch,
               m, n, best * 1e3f / 20, f0, o0, f1, o1);
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
        cudaStreamDestroy(stream);
        cudaFree(dA);
        cudaFree(dH);
        cudaFree(dtau);
    }
    return 0;
}
