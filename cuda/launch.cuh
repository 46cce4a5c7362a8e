// launch.cuh - the host side every launcher shares: error recording, and the one launch helper.
#pragma once

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

#include <type_traits>

#include "qr2_cuda.h"

// Records "<what> failed: <CUDA error name>: <CUDA message>" for qr2_cuda_last_error(); returns 1.
int qr2_record_cuda_error(cudaError_t err, const char* what);
// Records a failure that has no CUDA error code (e.g. a cuBLAS status); returns 1.
int qr2_record_error(const char* what, const char* detail);

#define QR2_CHECK_CUDA(call, what)                                                 \
    do {                                                                           \
        cudaError_t qr2_err_ = (call);                                             \
        if (qr2_err_ != cudaSuccess) return qr2_record_cuda_error(qr2_err_, what); \
    } while (0)

// A single-kernel launch replayed from a cached one-node CUDA graph once the same host thread launched the same
// configuration before on the same stream and device; a stream being captured gets a plain launch (launch.cu).
int qr2_replay_launch(const void* kernel, dim3 grid, dim3 block, size_t smem, void* stream, void** args,
                      const char* what);

// How a kernel is launched.
struct Qr2Launch {
    dim3 grid, block;
    size_t smem = 0;         // dynamic shared memory
    size_t smem_limit = 0;   // the dynamic shared memory to opt in to, when more than smem: one value for every call
                             // of a kernel leaves no window in which another host thread's call lowers it
    size_t static_smem = 0;  // the kernel's static shared memory, which counts against the same opt-in limit
    unsigned cluster = 1;    // thread blocks per cluster, along x
    bool replay = false;     // through qr2_replay_launch (single-block configurations only)
    bool pdl = false;        // programmatic dependent launch: may start while the previous kernel drains
    bool cooperative = false;  // every block resident at once (or the launch fails): blocks may wait for each other
};

// The device side of a programmatic dependent launch (Qr2Launch::pdl), first in a kernel so launched: nothing after
// this runs before the previous kernel has completed and its writes are visible; the launch itself may overlap that
// kernel's last blocks. Without the launch attribute it is a no-op.
__device__ __forceinline__ void qr2_follow_previous_kernel() {
    asm volatile("griddepcontrol.wait;" ::: "memory");
}

// Launches kernel(args...) on `stream` as `how` says: shared-memory opt-in past the default 48 KB, cluster,
// programmatic-dependent-launch and cooperative attributes, or graph replay. The one launch path of every family.
template <typename... Params, typename... Args>
int qr2_launch(void (*kernel)(Params...), const Qr2Launch& how, void* stream, const char* what, const Args&... args) {
    static_assert((std::is_same<Params, Args>::value && ...), "pass each argument as the kernel's own type");
    const size_t limit = how.smem_limit > how.smem ? how.smem_limit : how.smem;
    if (limit + how.static_smem > 48 * 1024)
        QR2_CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)limit), what);
    void* argv[sizeof...(Args) + 1] = {const_cast<Args*>(&args)...};
    if (how.replay && how.cluster == 1 && !how.pdl && !how.cooperative)
        return qr2_replay_launch((const void*)kernel, how.grid, how.block, how.smem, stream, argv, what);
    cudaLaunchAttribute attrs[3];
    unsigned count = 0;
    if (how.cluster > 1) {
        attrs[count].id = cudaLaunchAttributeClusterDimension;
        attrs[count].val.clusterDim.x = how.cluster;
        attrs[count].val.clusterDim.y = 1;
        attrs[count].val.clusterDim.z = 1;
        ++count;
    }
    if (how.pdl) {
        attrs[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attrs[count].val.programmaticStreamSerializationAllowed = 1;
        ++count;
    }
    if (how.cooperative) {
        attrs[count].id = cudaLaunchAttributeCooperative;
        attrs[count].val.cooperative = 1;
        ++count;
    }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = how.grid;
    cfg.blockDim = how.block;
    cfg.dynamicSmemBytes = how.smem;
    cfg.stream = (cudaStream_t)stream;
    cfg.attrs = attrs;
    cfg.numAttrs = count;
    cudaError_t err = cudaLaunchKernelExC(&cfg, (const void*)kernel, argv);
    // also an error left pending by earlier work (a failed cuBLAS call, say), reported and cleared here rather than
    // in torch's next launch check
    const cudaError_t pending = cudaGetLastError();
    if (err == cudaSuccess) err = pending;
    return err == cudaSuccess ? 0 : qr2_record_cuda_error(err, what);
}
