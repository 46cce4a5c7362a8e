// graph_launch.cu - single-kernel launches replayed from cached one-node CUDA graphs.
//
// Why: on the H200's host a kernel launch costs ~3.3 us of CPU, while updating the arguments of an instantiated
// one-node graph and launching it costs ~1.7 (0.3 + 1.4; cuda/bench/host_path_bench.cu). For a small matrix that is
// a quarter of a call. Each (device, stream, kernel, grid, block, shared memory) launched twice gets its own graph:
// its kernel node's arguments are set before every launch (cudaGraphExecKernelNodeSetParams changes only later
// launches, never ones already queued), and launches of one graph on one stream keep the stream's order.
//
// A stream being captured (a user's CUDA graph) always gets a plain launch, so the captured graph holds a plain
// kernel node. A configuration seen once is launched plainly and only remembered: instantiating costs tens of
// microseconds, so a caller cycling through more configurations than the cache holds never pays it.
#include <atomic>
#include <mutex>

#include "common.cuh"

namespace {

constexpr int SLOTS = 32;

struct Slot {
    const void* kernel;  // nullptr: free
    cudaStream_t stream;
    int device;
    dim3 grid, block;
    size_t smem;
    cudaGraph_t graph;  // null until the configuration is launched a second time
    cudaGraphExec_t exec;
    cudaGraphNode_t node;
    unsigned long long last_use;
};

// One cache for the process, behind a mutex: a slot's argument update and its launch must not interleave with
// another thread's. Slots are never freed at exit (the driver releases them with the context).
std::mutex mutex;
Slot slots[SLOTS];
unsigned long long clock_ticks;
long long replays, instantiations;  // for tests (qr2_launch_counts)
std::atomic<bool> enabled{true};     // measurements only (qr2_launch_replay)

bool same(const Slot& s, const void* kernel, cudaStream_t stream, int device, dim3 grid, dim3 block, size_t smem) {
    return s.kernel == kernel && s.stream == stream && s.device == device && s.smem == smem && s.grid.x == grid.x &&
           s.grid.y == grid.y && s.grid.z == grid.z && s.block.x == block.x && s.block.y == block.y &&
           s.block.z == block.z;
}

void release(Slot& s) {
    // An executable graph still queued or running is freed by the driver when it completes. A failure here (a reset
    // device) must not linger as the thread's last error for someone else's launch check.
    if (s.exec && cudaGraphExecDestroy(s.exec) != cudaSuccess) (void)cudaGetLastError();
    if (s.graph && cudaGraphDestroy(s.graph) != cudaSuccess) (void)cudaGetLastError();
    s = Slot{};
}

// Builds the slot's graph with `params` as its kernel's arguments. False (and the slot left without a graph) when
// CUDA refuses: the caller then launches plainly, and that launch reports any real error.
bool instantiate(Slot& s, const cudaKernelNodeParams& params) {
    // Relaxed capture mode: another thread capturing in global mode must not see these calls as unsafe.
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&mode);
    bool ok = cudaGraphCreate(&s.graph, 0) == cudaSuccess &&
              cudaGraphAddKernelNode(&s.node, s.graph, nullptr, 0, &params) == cudaSuccess &&
              cudaGraphInstantiate(&s.exec, s.graph, 0) == cudaSuccess;
    cudaThreadExchangeStreamCaptureMode(&mode);
    if (!ok) {
        (void)cudaGetLastError();
        if (s.graph) cudaGraphDestroy(s.graph);
        s.graph = nullptr, s.exec = nullptr, s.node = nullptr;
    }
    return ok;
}

// The slot for the configuration, its graph instantiated if it has been launched before; nullptr: launch plainly.
// Called with the mutex held.
Slot* find(const void* kernel, cudaStream_t stream, int device, dim3 grid, dim3 block, size_t smem,
           const cudaKernelNodeParams& params) {
    Slot* oldest = &slots[0];
    for (Slot& s : slots) {
        if (s.kernel && same(s, kernel, stream, device, grid, block, smem)) {
            s.last_use = ++clock_ticks;
            if (s.exec) return &s;
            if (!instantiate(s, params)) return nullptr;
            ++instantiations;
            return &s;
        }
        if (s.last_use < oldest->last_use) oldest = &s;
    }
    release(*oldest);  // first sight: remember the configuration only
    *oldest = Slot{kernel, stream, device, grid, block, smem, nullptr, nullptr, nullptr, ++clock_ticks};
    return nullptr;
}

}  // namespace

int qr2_launch_kernel(const void* kernel, dim3 grid, dim3 block, size_t smem, void* stream_ptr, void** args,
                      const char* what) {
    cudaStream_t stream = (cudaStream_t)stream_ptr;
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    int device = -1;
    bool replayable = false;
    if (enabled) {
        const cudaError_t asked = cudaStreamIsCapturing(stream, &capture);
        // e.g. the legacy stream while another thread captures: the plain launch below reports it
        if (asked != cudaSuccess) (void)cudaGetLastError();
        replayable = asked == cudaSuccess && capture == cudaStreamCaptureStatusNone &&
                     cudaGetDevice(&device) == cudaSuccess;
    }
    if (replayable) {
        cudaKernelNodeParams params = {};
        params.func = const_cast<void*>(kernel);
        params.gridDim = grid;
        params.blockDim = block;
        params.sharedMemBytes = (unsigned)smem;
        params.kernelParams = args;
        std::lock_guard<std::mutex> lock(mutex);
        Slot* s = find(kernel, stream, device, grid, block, smem, params);
        if (s && cudaGraphExecKernelNodeSetParams(s->exec, s->node, &params) == cudaSuccess &&
            cudaGraphLaunch(s->exec, stream) == cudaSuccess) {
            ++replays;
            return 0;
        }
        if (s) {  // the graph failed: forget it and launch plainly (which reports a real error)
            (void)cudaGetLastError();
            release(*s);
        }
    }
    QR2_CHECK_CUDA(cudaLaunchKernel(kernel, grid, block, args, smem, stream), what);
    return 0;
}

extern "C" __attribute__((visibility("default"))) void qr2_launch_counts(long long* replayed, long long* instantiated) {
    std::lock_guard<std::mutex> lock(mutex);
    *replayed = replays, *instantiated = instantiations;
}

// Measurements only: 0 turns replay off (every launch plain), 1 back on.
extern "C" __attribute__((visibility("default"))) void qr2_launch_replay(int on) { enabled = on != 0; }
