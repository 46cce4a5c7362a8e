// launch.cu - single-kernel launches replayed from cached one-node CUDA graphs; the side streams a schedule forks part
// of its work onto (at the end of the file).
//
// Why: on the H200's host a kernel launch costs ~3.3 us of CPU, while updating the arguments of an instantiated
// one-node graph and launching it costs ~1.7 (0.3 + 1.4; tools/bench/host_path_bench.cu). For a small matrix that is
// a quarter of a call. Each (device, stream, kernel, grid, block, shared memory) launched a second time gets its own
// graph: its kernel node's arguments are set before every launch (cudaGraphExecKernelNodeSetParams changes only later
// launches, never ones already queued), and a graph's launches keep the stream's order.
//
// A stream being captured (a user's CUDA graph) always gets a plain launch, so the captured graph holds a plain
// kernel node. A configuration is remembered after its first plain launch succeeds and instantiated at its second:
// instantiating costs tens of microseconds, so a caller cycling through more configurations than the cache holds
// never pays it. Each host thread has its own cache: no lock, so no thread ever waits on another's launch.
//
// The replay calls the driver's cuGraphExecKernelNodeSetParams and cuGraphLaunch directly when the runtime hands out
// their entry points: their runtime wrappers cost ~0.15 us more per launch (1.78 against 1.62 us on the H200's host).
#include <cuda.h>
#include <pthread.h>
#include <stdlib.h>

#include <atomic>

#include "launch.cuh"

namespace {

constexpr int SLOTS = 32;

struct Slot {
    const void* kernel;  // nullptr: free
    cudaStream_t stream;
    int device;
    dim3 grid, block;
    size_t smem;
    bool refused;       // CUDA would not instantiate or replay it: plain launches only
    cudaGraph_t graph;  // null until the configuration is launched a second time
    cudaGraphExec_t exec;
    cudaGraphNode_t node;
    unsigned long long last_use;
    CUfunction function;  // the kernel's driver handle, for the driver's replay (null: the runtime's replay)
};

std::atomic<long long> replays{0}, instantiations{0}, driver_replays{0};  // for tests (qr2_launch_counts)

// The driver's replay entry points, resolved once per process (null where the runtime or driver does not hand them
// out: the runtime's calls then do the same).
struct DriverReplay {
    CUresult (*add_node)(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, const CUDA_KERNEL_NODE_PARAMS*) = nullptr;
    CUresult (*set_params)(CUgraphExec, CUgraphNode, const CUDA_KERNEL_NODE_PARAMS*) = nullptr;
    CUresult (*launch)(CUgraphExec, CUstream) = nullptr;
    DriverReplay() {
        const char* names[3] = {"cuGraphAddKernelNode", "cuGraphExecKernelNodeSetParams", "cuGraphLaunch"};
        void* fns[3] = {};
        for (int i = 0; i < 3; ++i) {
            cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
            // the ABI of this header's CUDA_KERNEL_NODE_PARAMS; legacy default-stream semantics, as the runtime's here
            if (cudaGetDriverEntryPointByVersion(names[i], &fns[i], CUDA_VERSION, cudaEnableLegacyStream, &found) !=
                    cudaSuccess ||
                found != cudaDriverEntryPointSuccess || !fns[i]) {
                (void)cudaGetLastError();
                return;
            }
        }
        add_node = reinterpret_cast<decltype(add_node)>(fns[0]);
        set_params = reinterpret_cast<decltype(set_params)>(fns[1]);
        launch = reinterpret_cast<decltype(launch)>(fns[2]);
    }
};

const DriverReplay& driver_replay() {
    static const DriverReplay d;  // thread-safe initialisation
    return d;
}

CUDA_KERNEL_NODE_PARAMS driver_params(CUfunction function, const cudaKernelNodeParams& params) {
    CUDA_KERNEL_NODE_PARAMS p = {};
    p.func = function;
    p.gridDimX = params.gridDim.x, p.gridDimY = params.gridDim.y, p.gridDimZ = params.gridDim.z;
    p.blockDimX = params.blockDim.x, p.blockDimY = params.blockDim.y, p.blockDimZ = params.blockDim.z;
    p.sharedMemBytes = params.sharedMemBytes;
    p.kernelParams = params.kernelParams;
    return p;
}

// Sets the slot's kernel arguments and launches its graph: false if CUDA refuses.
bool replay(const Slot& s, const cudaKernelNodeParams& params, cudaStream_t stream) {
    if (s.function) {  // its node was made by the driver
        const DriverReplay& d = driver_replay();
        const CUDA_KERNEL_NODE_PARAMS p = driver_params(s.function, params);
        if (d.set_params(s.exec, s.node, &p) != CUDA_SUCCESS || d.launch(s.exec, stream) != CUDA_SUCCESS) return false;
        driver_replays.fetch_add(1, std::memory_order_relaxed);
        return true;
    }
    return cudaGraphExecKernelNodeSetParams(s.exec, s.node, &params) == cudaSuccess &&
           cudaGraphLaunch(s.exec, stream) == cudaSuccess;
}

// Relaxed stream-capture mode for this thread while alive: creating, instantiating, uploading or destroying a graph
// while another thread captures in global mode (torch.cuda.graph's default) must not invalidate that capture.
struct RelaxedCapture {
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    bool set;
    RelaxedCapture() : set(cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess) {
        if (!set) (void)cudaGetLastError();
    }
    ~RelaxedCapture() {
        if (set) cudaThreadExchangeStreamCaptureMode(&mode);
    }
};

void drop_graph(Slot& s) {
    if (!s.exec && !s.graph) return;
    RelaxedCapture relaxed;
    // An executable graph still queued or running is freed by the driver when it completes. A failure here (a reset
    // device) must not linger as the thread's last error for someone else's launch check.
    if (s.exec && cudaGraphExecDestroy(s.exec) != cudaSuccess) (void)cudaGetLastError();
    if (s.graph && cudaGraphDestroy(s.graph) != cudaSuccess) (void)cudaGetLastError();
    s.graph = nullptr, s.exec = nullptr, s.node = nullptr;
}

// Set once the process exits (or in a forked child): a thread that ends after that (a daemon thread during Python's
// finalisation) leaves its graphs to the driver instead of calling a CUDA runtime that may be torn down.
std::atomic<bool> exiting{false};

void mark_exiting() { exiting = true; }

// Once per process, from the first object whose destructor reads `exiting`: registered after the CUDA runtime's own
// exit handlers, so it runs before them.
void watch_exit() {
    static const bool registered = atexit(mark_exiting) == 0 && pthread_atfork(nullptr, nullptr, mark_exiting) == 0;
    (void)registered;
}

struct Cache {
    Slot slots[SLOTS] = {};
    unsigned long long ticks = 0;
    Cache() { watch_exit(); }
    ~Cache() {  // the thread exits
        if (exiting) return;
        for (Slot& s : slots) drop_graph(s);
    }
};

thread_local Cache cache;
std::atomic<bool> enabled{true};                        // measurements only (qr2_launch_replay)

bool same(const Slot& s, const void* kernel, cudaStream_t stream, int device, dim3 grid, dim3 block, size_t smem) {
    return s.kernel == kernel && s.stream == stream && s.device == device && s.smem == smem && s.grid.x == grid.x &&
           s.grid.y == grid.y && s.grid.z == grid.z && s.block.x == block.x && s.block.y == block.y &&
           s.block.z == block.z;
}

// Builds, instantiates and uploads the slot's graph with `params` as its kernel's arguments. False when CUDA refuses
// (the slot is then marked refused and launched plainly from then on, which reports any real error).
bool instantiate(Slot& s, const cudaKernelNodeParams& params, cudaStream_t stream) {
    RelaxedCapture relaxed;
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    cudaGraphNode_t node = nullptr;
    const DriverReplay& d = driver_replay();
    CUfunction function = nullptr;
    if (d.add_node && cudaGetFuncBySymbol(&function, params.func) != cudaSuccess) {
        (void)cudaGetLastError();
        function = nullptr;
    }
    const bool made = cudaGraphCreate(&graph, 0) == cudaSuccess;
    bool added = false;
    if (made && function) {
        const CUDA_KERNEL_NODE_PARAMS p = driver_params(function, params);
        added = d.add_node(&node, graph, nullptr, 0, &p) == CUDA_SUCCESS;
    } else if (made) {
        added = cudaGraphAddKernelNode(&node, graph, nullptr, 0, &params) == cudaSuccess;
    }
    const bool ok = added && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
    s.graph = made ? graph : nullptr;  // only what CUDA made: drop_graph destroys it
    s.exec = ok ? exec : nullptr, s.node = node, s.function = function;
    if (!ok || cudaGraphUpload(exec, stream) != cudaSuccess) {
        (void)cudaGetLastError();
        drop_graph(s);
        s.refused = true;
        return false;
    }
    return true;
}

}  // namespace

int qr2_replay_launch(const void* kernel, dim3 grid, dim3 block, size_t smem, void* stream_ptr, void** args,
                      const char* what) {
    cudaStream_t stream = (cudaStream_t)stream_ptr;
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    int device = -1;
    bool replayable = false;
    if (enabled.load(std::memory_order_relaxed)) {
        const cudaError_t asked = cudaStreamIsCapturing(stream, &capture);
        // e.g. the legacy stream while another thread captures a blocking stream: the plain launch below reports it
        if (asked != cudaSuccess) (void)cudaGetLastError();
        replayable = asked == cudaSuccess && capture == cudaStreamCaptureStatusNone;
        if (replayable && cudaGetDevice(&device) != cudaSuccess) {
            (void)cudaGetLastError();
            replayable = false;
        }
    }
    Slot* slot = nullptr;
    if (replayable) {
        for (Slot& s : cache.slots)
            if (s.kernel && same(s, kernel, stream, device, grid, block, smem)) slot = &s;
    }
    if (slot) slot->last_use = ++cache.ticks;  // a refused one too: evicting it would retry it
    if (slot && !slot->refused) {
        cudaKernelNodeParams params = {};
        params.func = const_cast<void*>(kernel);
        params.gridDim = grid;
        params.blockDim = block;
        params.sharedMemBytes = (unsigned)smem;
        params.kernelParams = args;
        const bool fresh = !slot->exec;  // launched once before: instantiate with these arguments
        if (fresh && instantiate(*slot, params, stream)) instantiations.fetch_add(1, std::memory_order_relaxed);
        if (slot->exec) {
            if (fresh ? cudaGraphLaunch(slot->exec, stream) == cudaSuccess : replay(*slot, params, stream)) {
                replays.fetch_add(1, std::memory_order_relaxed);
                return 0;
            }
            (void)cudaGetLastError();  // the graph failed: plain launches from now on, and the one below reports
            drop_graph(*slot);
            slot->refused = true;
        }
    }
    const cudaError_t err = cudaLaunchKernel(kernel, grid, block, args, smem, stream);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();  // reported here: it must not surface again in torch's next launch check
        return qr2_record_cuda_error(err, what);
    }
    if (replayable && !slot) {  // first sight, launched: remember it in the least recently used slot
        Slot* oldest = &cache.slots[0];
        for (Slot& s : cache.slots)
            if (s.last_use < oldest->last_use) oldest = &s;
        drop_graph(*oldest);
        *oldest = Slot{kernel, stream, device, grid, block, smem, false, nullptr, nullptr, nullptr, ++cache.ticks,
                       nullptr};
    }
    return 0;
}

extern "C" __attribute__((visibility("default"))) void qr2_launch_counts(long long* replayed, long long* instantiated,
                                                                          long long* through_driver) {
    *replayed = replays.load(), *instantiated = instantiations.load(), *through_driver = driver_replays.load();
}

// Measurements only: 0 turns replay off (every launch plain), 1 back on.
extern "C" __attribute__((visibility("default"))) void qr2_launch_replay(int on) { enabled = on != 0; }

// ---- side streams ----
// A second stream for each host thread and device, on which a schedule runs part of a batch beside the caller's
// stream; and an urgent one, at the device's highest priority, for work on the schedule's critical path beside the
// rest (the lookahead's next panel, whose blocks should then take SMs as the update's drain; not yet measured). One
// of each per thread: a side stream pulled into a user's graph capture (by waiting on an event recorded in the
// capturing stream) stays in that capture until the capture ends, and no other thread's work may land on it then.
// While it is in a capture other than the caller's, qr2_side_fork hands out none (the caller runs both halves
// itself). Calls of one thread on different streams share its side stream, so their second halves queue behind one
// another. Destroyed when the thread exits (not after the process began exiting, like the graph cache above).
namespace {

constexpr int SIDE_DEVICES = 64;
std::atomic<long long> side_forks{0};

struct SideStreams {
    cudaStream_t stream[2][SIDE_DEVICES] = {};  // [urgent][device]
    cudaEvent_t event[2][SIDE_DEVICES] = {};    // recorded on one stream, waited on by the other, in both directions
    SideStreams() { watch_exit(); }
    ~SideStreams() {
        if (exiting) return;
        for (int u = 0; u < 2; ++u)
            for (int d = 0; d < SIDE_DEVICES; ++d) {
                if (event[u][d]) (void)cudaEventDestroy(event[u][d]);
                if (stream[u][d]) (void)cudaStreamDestroy(stream[u][d]);
            }
    }
};

thread_local SideStreams sides;

}  // namespace

extern "C" int qr2_side_fork(void* stream, int device, int urgent, void** side) {
    if (device < 0 || device >= SIDE_DEVICES) return qr2_record_error("side stream", "device index past 63");
    urgent = urgent != 0;
    if (!sides.stream[urgent][device]) {
        RelaxedCapture relaxed;  // creating them is allowed while this or another thread captures a graph
        cudaStream_t s = nullptr;
        cudaEvent_t e = nullptr;
        int greatest = 0;  // numerically the lowest
        QR2_CHECK_CUDA(cudaDeviceGetStreamPriorityRange(nullptr, &greatest), "cudaDeviceGetStreamPriorityRange");
        QR2_CHECK_CUDA(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, urgent ? greatest : 0),
                       "cudaStreamCreateWithPriority (side stream)");
        const cudaError_t err = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
        if (err != cudaSuccess) {
            (void)cudaStreamDestroy(s);
            return qr2_record_cuda_error(err, "cudaEventCreateWithFlags (side stream)");
        }
        sides.stream[urgent][device] = s, sides.event[urgent][device] = e;
    }
    *side = nullptr;
    cudaStreamCaptureStatus side_status = cudaStreamCaptureStatusNone, own_status = cudaStreamCaptureStatusNone;
    unsigned long long side_id = 0, own_id = 0;
    // Still in a capture: usable only from within the same one. A query CUDA refuses: no side stream either (the call
    // then runs both halves on its own stream).
    if (cudaStreamGetCaptureInfo(sides.stream[urgent][device], &side_status, &side_id) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    if (side_status != cudaStreamCaptureStatusNone) {
        const cudaError_t asked = cudaStreamGetCaptureInfo((cudaStream_t)stream, &own_status, &own_id);
        if (asked != cudaSuccess) (void)cudaGetLastError();
        if (asked != cudaSuccess || own_status != cudaStreamCaptureStatusActive || own_id != side_id) return 0;
    }
    QR2_CHECK_CUDA(cudaEventRecord(sides.event[urgent][device], (cudaStream_t)stream),
                   "cudaEventRecord (side stream fork)");
    QR2_CHECK_CUDA(cudaStreamWaitEvent(sides.stream[urgent][device], sides.event[urgent][device], 0),
                   "cudaStreamWaitEvent (fork)");
    *side = sides.stream[urgent][device];
    side_forks.fetch_add(1, std::memory_order_relaxed);
    return 0;
}

// Tests only: how many times a side stream was forked since the library was loaded.
extern "C" __attribute__((visibility("default"))) long long qr2_side_fork_count(void) { return side_forks.load(); }

extern "C" int qr2_side_join(void* stream, int device, int urgent) {
    urgent = urgent != 0;
    if (device < 0 || device >= SIDE_DEVICES || !sides.stream[urgent][device]) return 0;  // nothing was forked
    QR2_CHECK_CUDA(cudaEventRecord(sides.event[urgent][device], sides.stream[urgent][device]),
                   "cudaEventRecord (side stream join)");
    QR2_CHECK_CUDA(cudaStreamWaitEvent((cudaStream_t)stream, sides.event[urgent][device], 0),
                   "cudaStreamWaitEvent (join)");
    return 0;
}
