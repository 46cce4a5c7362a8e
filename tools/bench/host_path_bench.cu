// host_path_bench.cu - what each step of the op's host path costs, from C, without Python: allocations through
// torch's stable ABI and its caching allocator, kernel launches three ways, the stream and device queries, and the
// whole op called through torch's C dispatcher (empty kernel forced, and the table's route). Host nanoseconds per
// step, the median of 7 rounds of 20,000. A development aid (tools/host_path_bench.sh builds and runs it on the
// GPU machine); not part of the library.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

extern "C" {
#include "configs.h"
}
#include "torch_abi.h"

extern "C" {
AOTITorchError aoti_torch_cuda_caching_allocator_raw_alloc(uint64_t nbytes, void** ret_ptr);
AOTITorchError aoti_torch_cuda_caching_allocator_raw_delete(void* ptr);
AOTITorchError torch_from_blob(void* data, int64_t ndim, const int64_t* sizes_ptr, const int64_t* strides_ptr,
                               int64_t storage_offset, int32_t dtype, int32_t device_type, int32_t device_index,
                               AtenTensorHandle* ret, int32_t layout, const uint8_t* opaque_metadata,
                               int64_t opaque_metadata_size, void (*deleter)(void* data, void* ctx),
                               void* deleter_ctx);
int qr2_register(char* err, size_t err_len);
}

static __global__ void nothing() {}
struct big_args {
    void* p[6];
    long long q[6];
};
static __global__ void takes_args(big_args a) {
    if (a.q[0] == 42) *(int*)a.p[0] = 1;
}
static __global__ void spin(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}

#define OK(x)                                                       \
    do {                                                            \
        if ((x) != 0) {                                             \
            fprintf(stderr, "%s:%d: %s failed\n", __FILE__, __LINE__, #x); \
            exit(1);                                                \
        }                                                           \
    } while (0)

template <class F>
static double ns_per_step(F step, int iters = 20000, int rounds = 7) {
    std::vector<double> t;
    for (int r = 0; r < rounds; ++r) {
        for (int i = 0; i < 200; ++i) step();
        cudaDeviceSynchronize();
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < iters; ++i) step();
        auto t1 = std::chrono::steady_clock::now();
        cudaDeviceSynchronize();
        t.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / iters);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

// One raw block shared by two tensors: freed when the second tensor's storage goes.
struct shared_block {
    void* ptr;
    int refs;
};
static void release_block(void*, void* ctx) {
    shared_block* b = (shared_block*)ctx;
    if (--b->refs == 0) {
        aoti_torch_cuda_caching_allocator_raw_delete(b->ptr);
        delete b;
    }
}

int main() {
    char err[512];
    OK(qr2_register(err, sizeof err));
    const int32_t f32 = aoti_torch_dtype_float32(), cuda = aoti_torch_device_type_cuda();
    const int64_t hs[3] = {20, 32, 32}, hst[3] = {1024, 1, 32}, ts[2] = {20, 32}, tst[2] = {32, 1};
    void* stream = 0;
    OK(aoti_torch_get_current_cuda_stream(0, &stream));
    cudaStream_t st = (cudaStream_t)stream;

    AtenTensorHandle A = 0;
    OK(aoti_torch_empty_strided(3, hs, hst, f32, cuda, 0, &A));

    printf("%9.1f ns  empty loop\n", ns_per_step([] {}));
    printf("%9.1f ns  aoti_torch_empty_strided H + delete\n", ns_per_step([&] {
               AtenTensorHandle h;
               OK(aoti_torch_empty_strided(3, hs, hst, f32, cuda, 0, &h));
               aoti_torch_delete_tensor_object(h);
           }));
    printf("%9.1f ns  aoti_torch_empty_strided H and tau + delete both\n", ns_per_step([&] {
               AtenTensorHandle h, t;
               OK(aoti_torch_empty_strided(3, hs, hst, f32, cuda, 0, &h));
               OK(aoti_torch_empty_strided(2, ts, tst, f32, cuda, 0, &t));
               aoti_torch_delete_tensor_object(h);
               aoti_torch_delete_tensor_object(t);
           }));
    printf("%9.1f ns  caching allocator raw_alloc + raw_delete (H and tau in one block)\n", ns_per_step([&] {
               void* p;
               OK(aoti_torch_cuda_caching_allocator_raw_alloc(20 * 32 * 33 * 4, &p));
               aoti_torch_cuda_caching_allocator_raw_delete(p);
           }));
    printf("%9.1f ns  raw_alloc + torch_from_blob H and tau (shared block) + delete both\n", ns_per_step([&] {
               shared_block* b = new shared_block{0, 2};
               OK(aoti_torch_cuda_caching_allocator_raw_alloc(20 * 32 * 33 * 4, &b->ptr));
               AtenTensorHandle h, t;
               OK(torch_from_blob(b->ptr, 3, hs, hst, 0, f32, cuda, 0, &h, aoti_torch_layout_strided(), 0, 0,
                                  release_block, b));
               OK(torch_from_blob((float*)b->ptr + 20 * 32 * 32, 2, ts, tst, 0, f32, cuda, 0, &t,
                                  aoti_torch_layout_strided(), 0, 0, release_block, b));
               aoti_torch_delete_tensor_object(h);
               aoti_torch_delete_tensor_object(t);
           }));
    // The launch variants, interleaved round by round (the host and the GPU clock drift during a run).
    CUfunction fn;
    OK(cudaGetFuncBySymbol(&fn, (const void*)nothing));
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(20);
    cfg.blockDim = dim3(256);
    cfg.stream = st;
    big_args big = {};
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    cudaStream_t cap;
    OK(cudaStreamCreateWithFlags(&cap, cudaStreamNonBlocking));
    OK(cudaStreamBeginCapture(cap, cudaStreamCaptureModeThreadLocal));
    nothing<<<20, 256, 0, cap>>>();
    OK(cudaStreamEndCapture(cap, &graph));
    OK(cudaGraphInstantiate(&exec, graph, 0));
    // one kernel node whose arguments change every launch: cudaGraphExecKernelNodeSetParams, then cudaGraphLaunch
    cudaGraph_t graph2;
    cudaGraphExec_t exec2;
    cudaGraphNode_t node2;
    OK(cudaGraphCreate(&graph2, 0));
    void* kargs[1] = {&big};
    cudaKernelNodeParams kp = {};
    kp.func = (void*)takes_args;
    kp.gridDim = dim3(20);
    kp.blockDim = dim3(256);
    kp.kernelParams = kargs;
    OK(cudaGraphAddKernelNode(&node2, graph2, nullptr, 0, &kp));
    OK(cudaGraphInstantiate(&exec2, graph2, 0));
    // the same node through the driver API (the runtime's wrappers add their own checks to every call)
    CUfunction fn_args;
    OK(cudaGetFuncBySymbol(&fn_args, (const void*)takes_args));
    CUgraph graph3;
    CUgraphExec exec3;
    CUgraphNode node3;
    OK(cuGraphCreate(&graph3, 0));
    CUDA_KERNEL_NODE_PARAMS dp = {};
    dp.func = fn_args;
    dp.gridDimX = 20, dp.gridDimY = 1, dp.gridDimZ = 1;
    dp.blockDimX = 256, dp.blockDimY = 1, dp.blockDimZ = 1;
    dp.kernelParams = kargs;
    OK(cuGraphAddKernelNode(&node3, graph3, nullptr, 0, &dp));
    OK(cuGraphInstantiate(&exec3, graph3, 0));
    long long counter = 0;
    struct variant {
        const char* name;
        std::function<void()> step;
        std::vector<double> t;
    };
    std::vector<variant> v = {
        {"launch <<<20, 256, 0, stream>>> + cudaGetLastError", [&] {
             nothing<<<20, 256, 0, st>>>();
             (void)cudaGetLastError();
         }, {}},
        {"launch <<<>>> with a 96-byte argument", [&] { takes_args<<<20, 256, 0, st>>>(big); }, {}},
        {"cuLaunchKernel", [&] { OK(cuLaunchKernel(fn, 20, 1, 1, 256, 1, 1, 0, (CUstream)st, nullptr, nullptr)); }, {}},
        {"cudaLaunchKernelEx (no attributes)", [&] { OK(cudaLaunchKernelEx(&cfg, nothing)); }, {}},
        {"cudaLaunchKernelEx with a 96-byte argument", [&] { OK(cudaLaunchKernelEx(&cfg, takes_args, big)); }, {}},
        {"cudaGraphLaunch (one kernel node)", [&] { OK(cudaGraphLaunch(exec, st)); }, {}},
        {"cudaGraphExecKernelNodeSetParams (new 96-byte argument) + cudaGraphLaunch", [&] {
             big.q[1] = ++counter;
             kp.gridDim = dim3(20 + (counter & 1));
             OK(cudaGraphExecKernelNodeSetParams(exec2, node2, &kp));
             OK(cudaGraphLaunch(exec2, st));
         }, {}},
        {"cudaGraphExecKernelNodeSetParams (new 96-byte argument, same grid) + cudaGraphLaunch", [&] {
             big.q[1] = ++counter;
             kp.gridDim = dim3(20);
             OK(cudaGraphExecKernelNodeSetParams(exec2, node2, &kp));
             OK(cudaGraphLaunch(exec2, st));
         }, {}},
        {"cuGraphExecKernelNodeSetParams (new 96-byte argument, same grid) + cuGraphLaunch (driver API)", [&] {
             big.q[1] = ++counter;
             OK(cuGraphExecKernelNodeSetParams(exec3, node3, &dp));
             OK(cuGraphLaunch(exec3, (CUstream)st));
         }, {}},
        {"cuGraphLaunch (one kernel node, driver API)", [&] { OK(cuGraphLaunch(exec3, (CUstream)st)); }, {}},
        {"cudaGraphExecKernelNodeSetParams alone (new 96-byte argument, same grid)", [&] {
             big.q[1] = ++counter;
             kp.gridDim = dim3(20);
             OK(cudaGraphExecKernelNodeSetParams(exec2, node2, &kp));
         }, {}},
        {"cudaStreamIsCapturing", [&] {
             cudaStreamCaptureStatus cs;
             OK(cudaStreamIsCapturing(st, &cs));
         }, {}},
    };
    for (int r = 0; r < 9; ++r)
        for (auto& x : v) x.t.push_back(ns_per_step(x.step, 5000, 1));
    for (auto& x : v) {
        std::sort(x.t.begin(), x.t.end());
        printf("%9.1f ns  %s (median of 9 interleaved rounds; min %.1f)\n", x.t[4], x.name, x.t[0]);
    }
    // the same launches queued behind a busy GPU (a 20 ms spin first): is a launch to an idle GPU dearer?
    for (auto& x : v) x.t.clear();
    for (int r = 0; r < 9; ++r)
        for (auto& x : v) {
            cudaDeviceSynchronize();
            spin<<<1, 32, 0, st>>>(40000000ll);
            auto t0 = std::chrono::steady_clock::now();
            for (int i = 0; i < 500; ++i) x.step();
            auto t1 = std::chrono::steady_clock::now();
            x.t.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / 500);
        }
    cudaDeviceSynchronize();
    for (auto& x : v) {
        std::sort(x.t.begin(), x.t.end());
        printf("%9.1f ns  %s, GPU busy (median of 9; min %.1f)\n", x.t[4], x.name, x.t[0]);
    }
    printf("%9.1f ns  cudaGetDevice + aoti_torch_get_current_cuda_stream\n", ns_per_step([&] {
               int d;
               void* s;
               cudaGetDevice(&d);
               OK(aoti_torch_get_current_cuda_stream(d, &s));
           }));
    printf("%9.1f ns  getters: dim, sizes, strides, dtype, layout, device index, data_ptr\n", ns_per_step([&] {
               int64_t dim, *sz, *sd;
               int32_t dt, lay, dev;
               void* p;
               OK(aoti_torch_get_dim(A, &dim));
               OK(aoti_torch_get_sizes(A, &sz));
               OK(aoti_torch_get_strides(A, &sd));
               OK(aoti_torch_get_dtype(A, &dt));
               OK(aoti_torch_get_layout(A, &lay));
               OK(aoti_torch_get_device_index(A, &dev));
               OK(aoti_torch_get_data_ptr(A, &p));
           }));
    printf("%9.1f ns  aoti_torch_new_tensor_handle + delete\n", ns_per_step([&] {
               AtenTensorHandle h;
               OK(aoti_torch_new_tensor_handle(A, &h));
               aoti_torch_delete_tensor_object(h);
           }));
    const char* ops[2] = {"qr2::_geqrf_impl", "qr2::geqrf"};
    const char* routes[2] = {"empty_kernel", nullptr};
    for (const char* route : routes) {
        OK(qr2_config_force(route));
        for (const char* op : ops) {
            double t = ns_per_step([&] {
                StableIValue s[2];
                AtenTensorHandle h;
                OK(aoti_torch_new_tensor_handle(A, &h));
                s[0] = (StableIValue)(uintptr_t)h;
                OK(torch_call_dispatcher(op, "", s, QR2_TORCH_ABI_2_11));
                aoti_torch_delete_tensor_object((AtenTensorHandle)(uintptr_t)s[0]);
                aoti_torch_delete_tensor_object((AtenTensorHandle)(uintptr_t)s[1]);
            });
            printf("%9.1f ns  torch_call_dispatcher(%s), 20x32x32, %s (incl. new handle)\n", t, op,
                   route ? route : "table route");
        }
    }
    OK(qr2_config_force(nullptr));
    aoti_torch_delete_tensor_object(A);
    return 0;
}
