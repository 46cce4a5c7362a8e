/*
 * routes.h - the route table: which CUDA schedule factors an FP32 problem of a given shape.
 */
#ifndef QR2_ROUTES_H
#define QR2_ROUTES_H

#include <stddef.h>
#include <stdint.h>

#define QR2_EXPORT __attribute__((visibility("default")))

typedef enum qr2_route_kind {
    QR2_ROUTE_QUAD,      /* whole matrix in one block's registers, a quad of four lanes per column: one launch */
    QR2_ROUTE_WARP,      /* whole matrix in one warp's registers, a lane per column: one launch */
    QR2_ROUTE_BLOCK,     /* whole matrix in one block's registers, two lanes per column: one launch */
    QR2_ROUTE_REGISTERS, /* whole matrix in the registers of one block or a cluster: one launch */
    QR2_ROUTE_ON_CHIP,   /* whole matrix in one block's shared memory: one launch */
    QR2_ROUTE_BLOCKED,   /* blocked Householder: recursive panels + compact-WY GEMM updates */
    QR2_ROUTE_EMPTY      /* measurement only (never in the table): one empty kernel, H and tau unset */
} qr2_route_kind;

typedef struct qr2_route {
    const char* name;
    qr2_route_kind kind;
    int64_t min_m;   /* the route admits m >= min_m */
    int64_t max_m;   /* ... and m <= max_m (0: any m) */
    int64_t min_n;   /* ... and n >= min_n */
    int64_t max_n;   /* ... and n <= max_n (0: any n) */
    int64_t min_batch; /* ... and batches of at least min_batch matrices */
    int64_t max_batch; /* ... and of at most max_batch (0: any) */
    int nb;          /* blocked: outer panel width (<= QR2_WY_MAX_W) */
    int leaf_nb;     /* blocked: widest panel one kernel factors (<= 32) */
    int cluster;     /* registers, block: thread blocks per matrix */
    const char* why; /* one line for people: what the route is for */
} qr2_route;

/* One FP32 problem on one device: batch matrices of m x n. */
typedef struct qr2_problem {
    int64_t batch;
    int m, n;
    const float* a; /* input: element (i, j) of matrix b at a[b*a_bs + i*a_rs + j*a_cs]; may be h */
    int64_t a_rs, a_cs, a_bs;
    float* h;   /* output H: column-major, ld m, matrices m*n apart */
    float* tau; /* output tau: min(m, n) per matrix */
    int device;
    void* stream;
    void* blas; /* cuBLAS handle bound to `stream` (blocked routes only) */
} qr2_problem;

/* The route for a batch of m x n problems on a device with `smem_optin` bytes of shared memory per block. */
const qr2_route* qr2_route_pick(int64_t m, int64_t n, int64_t batch, int smem_optin);
/* Floats of device workspace the route needs for the problem (0: none). */
int64_t qr2_route_workspace_floats(const qr2_route* route, const qr2_problem* p);
/* Enqueues the route's kernels on p->stream. 0 on success, else qr2_cuda_last_error() says why. */
int qr2_route_run(const qr2_route* route, const qr2_problem* p, float* work);

/* Introspection for Python (tests, README): the table in order, and the pick for a shape. */
QR2_EXPORT int qr2_route_count(void);
QR2_EXPORT const char* qr2_route_name(int index);
QR2_EXPORT const char* qr2_route_description(int index);
QR2_EXPORT int qr2_route_index_for(int64_t m, int64_t n, int64_t batch, int smem_optin);
/* Whether route `name`'s kernels can hold m x n at all, the table's limits aside (-1: no such route). */
QR2_EXPORT int qr2_route_holds(const char* name, int64_t m, int64_t n, int smem_optin);
/* Tests only: bytes of device workspace route `name` asks for a batch of m x n on device 0 (-1: no such route). */
QR2_EXPORT int64_t qr2_route_workspace_bytes(const char* name, int64_t m, int64_t n, int64_t batch);
/* Tests and benchmarks only: run `name` for every shape it can run, whatever the table's limits
 * (NULL: back to the table). "empty_kernel" (not a row of the table) makes every FP32 CUDA call launch
 * one empty kernel and return H and tau uninitialised: the floor of a call, for the benchmark. */
QR2_EXPORT int qr2_route_force(const char* name);

#endif /* QR2_ROUTES_H */
