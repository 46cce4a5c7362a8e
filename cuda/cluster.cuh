// cluster.cuh - mbarriers and distributed shared memory: how the blocks of a thread-block cluster hand reflectors
// to each other.
#pragma once

#include <cuda_runtime.h>
#include <stdint.h>


__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void bar_init(uint64_t* bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}

__device__ __forceinline__ void bar_arrive(uint64_t* bar) {
    asm volatile("{\n\t.reg .b64 st;\n\tmbarrier.arrive.release.cta.shared::cta.b64 st, [%0];\n\t}"
                 ::"r"(smem_addr(bar))
                 : "memory");
}

// Arms an mbarrier that another block of the cluster feeds with st.async: it completes once `bytes` have landed.
__device__ __forceinline__ void bar_expect_bytes(uint64_t* bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}

// The shared::cluster address of `p`'s twin in block `rank` of the cluster.
__device__ __forceinline__ unsigned remote_addr(const void* p, unsigned rank) {
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_addr(p)), "r"(rank));
    return remote;
}

// Stores one float into another block's shared memory and counts its 4 bytes on that block's mbarrier
// (`bar`, also remote): no fence and no release on the producer's side.
__device__ __forceinline__ void store_remote(unsigned addr, float value, unsigned bar) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(addr),
                 "r"(__float_as_uint(value)), "r"(bar)
                 : "memory");
}

// The same for four floats (16 bytes, 16-byte aligned).
__device__ __forceinline__ void store_remote4(unsigned addr, float4 v, unsigned bar) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];"
                 ::"r"(addr), "r"(__float_as_uint(v.x)), "r"(__float_as_uint(v.y)), "r"(__float_as_uint(v.z)),
                 "r"(__float_as_uint(v.w)), "r"(bar)
                 : "memory");
}

// Waits until the reflector behind `bar` is published (each mbarrier completes once: phase parity 0).
// CTA-scope acquire: the reflector sits in this block's shared memory beside the mbarrier, whether this
// block's warps stored it or the other block's st.async did (a cluster-scope acquire would invalidate L1
// on every wait: measured, a third of the old kernel's stall samples).
__device__ __forceinline__ void bar_wait(uint64_t* bar) {
    unsigned done = 0;
    while (!done)
        asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(done) : "r"(smem_addr(bar)) : "memory");
}
