/*
 * configs.h - the kernel configurations qr2 can run, the policy that picks one for a problem, and the problem itself.
 *
 * A configuration is one kernel family with its parameters (blocks per matrix, panel widths); configs.c lists them.
 * The policy (policy.c) maps a problem's shape, batch and device to a configuration; nothing else decides.
 */
#ifndef QR2_CONFIGS_H
#define QR2_CONFIGS_H

#include <stddef.h>
#include <stdint.h>

#include "qr2_cuda.h"

#define QR2_EXPORT __attribute__((visibility("default")))

/* One FP32 problem on one device: batch matrices of m x n. */
typedef struct qr2_problem {
    int64_t batch;
    int m, n;
    const float* a; /* input: element (i, j) of matrix b at a[b*a_bs + i*a_rs + j*a_cs]; may be h */
    int64_t a_rs, a_cs, a_bs;
    float* h;   /* output H: column-major, ld m, matrices m*n apart */
    float* tau; /* output tau: min(m, n) per matrix */
    const qr2_device* dev;
    void* stream;
    /* torch's cuBLAS handle bound to `stream`; fetched only by the families that call cuBLAS. 0 on success. */
    int (*blas_handle)(void** handle);
} qr2_problem;

typedef struct qr2_config qr2_config;

/* A kernel family as the dispatch layer sees it: one interface for all. */
typedef struct qr2_family {
    const char* name;
    /* whether configuration c can run m x n matrices on the device (the policy's preferences aside) */
    int (*holds)(const qr2_config* c, int64_t m, int64_t n, const qr2_device* dev);
    /* floats of device workspace for the problem (0: none) */
    int64_t (*workspace_floats)(const qr2_config* c, const qr2_problem* p);
    /* enqueues the kernels on p->stream; 0 on success, else qr2_cuda_last_error() says why */
    int (*run)(const qr2_config* c, const qr2_problem* p, float* work);
    /* whole-matrix families: the launcher pair of qr2_cuda.h that holds and run forward to */
    int (*kernel_holds)(int64_t m, int64_t n, int cluster, const qr2_device* dev);
    int (*kernel_run)(const qr2_whole_qr_args* a, int cluster, const qr2_device* dev, void* stream);
} qr2_family;

struct qr2_config {
    const char* name;
    const qr2_family* family;
    int cluster; /* thread blocks per matrix (1: no cluster) */
    int nb;      /* blocked: outer panel width (<= QR2_UPDATE_MAX_W) */
    int leaf_nb; /* blocked: widest panel one panel kernel factors (<= QR2_PANEL_MAX_W) */
    const char* what; /* one line for people */
    int cholqr;  /* blocked: 32-column panels by CholeskyQR2 first, the Householder kinds for the matrices it leaves */
    int lookahead; /* blocked: the next panel on a side stream beside the update of the rest (blocked.c) */
};

/* The configurations (configs.c), by name. */
extern const qr2_config qr2_quad, qr2_warp, qr2_builder, qr2_builder_cluster2, qr2_builder_cluster3, qr2_registers,
    qr2_registers_cluster2, qr2_shared_memory, qr2_blocked_cholqr_nb32_lookahead, qr2_blocked_cholqr_nb32,
    qr2_blocked_nb64, qr2_blocked_nb32;

/* Whether c can run the shape on dev: its family holds it, and a cluster configuration needs a device with clusters. */
int qr2_config_holds(const qr2_config* c, int64_t m, int64_t n, const qr2_device* dev);
/* The policy (policy.c): the configuration for a batch of m x n problems on dev, or the forced one (below). */
const qr2_config* qr2_policy_pick(int64_t m, int64_t n, int64_t batch, const qr2_device* dev);
/* The configuration qr2_config_force set (NULL: none). */
const qr2_config* qr2_config_forced(void);

/* The blocked family (blocked.c): blocked Householder, panels plus compact-WY updates. */
int qr2_blocked_holds(const qr2_config* c, int64_t m, int64_t n, const qr2_device* dev);
int64_t qr2_blocked_workspace_floats(const qr2_config* c, const qr2_problem* p);
int qr2_blocked_run(const qr2_config* c, const qr2_problem* p, float* work);
/* Whether the blocked schedule runs a batch of m x n matrices as two halves on two streams. */
int qr2_blocked_halves(int64_t m, int64_t n, int64_t batch, const qr2_device* dev);

/* Introspection for Python (tests, README, tools). A device is described by its SMs, opt-in shared memory per block
 * and cluster support, so that tests can ask what the policy picks on GPUs they do not have. */
QR2_EXPORT int qr2_config_count(void);
QR2_EXPORT const char* qr2_config_name(int index);
QR2_EXPORT const char* qr2_config_family(int index);
QR2_EXPORT const char* qr2_config_description(int index);
/* The index of the configuration the policy picks (-1: none). */
QR2_EXPORT int qr2_config_index_for(int64_t m, int64_t n, int64_t batch, int sms, int smem_optin, int clusters);
/* Whether configuration `name` can run m x n at all, the policy aside (-1: no such configuration). */
QR2_EXPORT int qr2_config_can_run(const char* name, int64_t m, int64_t n, int sms, int smem_optin, int clusters);
/* Whether the blocked schedule runs a batch of m x n as two halves on two streams. */
QR2_EXPORT int qr2_config_blocked_halves(int64_t m, int64_t n, int64_t batch, int sms, int smem_optin, int clusters);
/* Tests only: bytes of device workspace configuration `name` asks for a batch of m x n (-1: no such configuration). */
QR2_EXPORT int64_t qr2_config_workspace_bytes(const char* name, int64_t m, int64_t n, int64_t batch, int sms,
                                              int smem_optin, int clusters);
/* Tests and tools only: run `name` for every shape it can run, whatever the policy prefers (NULL: back to the
 * policy). "empty_kernel" (not a configuration) makes every FP32 CUDA call launch one empty kernel and return H and
 * tau uninitialised: the floor of a call, for the benchmark. */
QR2_EXPORT int qr2_config_force(const char* name);

#endif /* QR2_CONFIGS_H */
