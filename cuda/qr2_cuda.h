/*
 * qr2_cuda.h - the kernel families' launchers, as plain C. The only header of cuda/ that c_api/ includes.
 *
 * Conventions (LAPACK's): matrices are column-major, element (i, j) of matrix b lives at
 * ptr[b * batch_stride + j * ld + i]; sizes m (rows), n (columns), w (panel width).
 * Streams and cuBLAS handles travel as void*. Every launcher returns 0 on success; on failure
 * it returns non-zero and qr2_cuda_last_error() holds a message that names the failing call and
 * CUDA's (or cuBLAS's) own error text. Launchers never synchronise and never allocate.
 *
 * Two kinds of family, one interface each:
 *   whole-matrix families factor every matrix of a batch in one launch:
 *       int qr2_<family>_holds(m, n, cluster, device)      can it run this shape on this many blocks a matrix
 *       int qr2_<family>_run(args, cluster, device, stream)
 *   panel families factor one m x w panel (w <= 32) of the blocked route in place and emit V (and T):
 *       int qr2_panel_<kind>_holds(m, w, device)
 *       int qr2_panel_<kind>_run(job, work, device, stream)
 * The blocked route's update (compact WY) and the input transpose have one launcher each.
 */
#ifndef QR2_CUDA_H
#define QR2_CUDA_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the device ---- */

/* What the policy and the launchers need to know of a device; queried once per device. */
typedef struct qr2_device {
    int index;
    int sms;        /* streaming multiprocessors */
    int smem_optin; /* bytes of shared memory one block may opt in to */
    int clusters;   /* 1 when the device launches thread-block clusters (compute capability 9.0 and later) */
} qr2_device;

/* The description of device `index`, cached per device (the attributes are immutable). */
int qr2_cuda_device(int index, qr2_device* out);
/* The calling thread's current CUDA device. */
int qr2_cuda_current_device(int* device);
/* The message of this thread's last failing launcher ("" when none failed). */
const char* qr2_cuda_last_error(void);
/* Records "<what> failed: <detail>" as this thread's last error, for failures outside cuda/; returns 1. */
int qr2_cuda_fail(const char* what, const char* detail);

/* ---- whole-matrix families ---- */

/* Whole matrices factored in one launch (LAPACK sgeqrf semantics): reads A through its strides (src may equal h),
 * writes H (column-major, ld m, m*n apart) and tau (min(m, n) per matrix). */
typedef struct qr2_whole_qr_args {
    int64_t batch;
    int m, n;
    const float* src;
    int64_t src_rs, src_cs, src_bs;
    float* h;
    float* tau;
} qr2_whole_qr_args;

/* quad: one thread block per matrix, a quad of four lanes per column (a quarter of its rows each): m, n <= 64. */
#define QR2_QUAD_MAX 64
int qr2_quad_holds(int64_t m, int64_t n, int cluster, const qr2_device* dev);
int qr2_quad_run(const qr2_whole_qr_args* args, int cluster, const qr2_device* dev, void* stream);

/* warp: one warp per matrix, a lane per column (two for n > 32), whole columns in registers: n <= 64 with m <= 64,
 * or n <= 32 with m <= 96. */
#define QR2_WARP_MAX_N 64
int qr2_warp_holds(int64_t m, int64_t n, int cluster, const qr2_device* dev);
int qr2_warp_run(const qr2_whole_qr_args* args, int cluster, const qr2_device* dev, void* stream);

/* builder: one thread block per matrix (cluster 1), or a cluster of 2 or 3 blocks that split its columns; in each
 * block a builder warp builds the next reflector while the column warps apply the last: m, n <= QR2_BUILDER_MAX on
 * 1-2 blocks, m, n <= QR2_BUILDER_CLUSTER3_MAX on 3. */
#define QR2_BUILDER_MAX 176
#define QR2_BUILDER_CLUSTER3_MAX 256
int qr2_builder_holds(int64_t m, int64_t n, int cluster, const qr2_device* dev);
int qr2_builder_run(const qr2_whole_qr_args* args, int cluster, const qr2_device* dev, void* stream);

/* registers: m, n <= 256 held in registers (columns dealt cyclically to the warps, rows across lanes), each
 * reflector published in shared memory behind its own mbarrier; one block per matrix or a 2-block cluster. */
#define QR2_REGISTERS_MAX 256
int qr2_registers_holds(int64_t m, int64_t n, int cluster, const qr2_device* dev);
int qr2_registers_run(const qr2_whole_qr_args* args, int cluster, const qr2_device* dev, void* stream);

/* shared_memory: the whole matrix in one block's shared memory, one block per matrix (cluster 1). */
int qr2_shared_memory_holds(int64_t m, int64_t n, int cluster, const qr2_device* dev);
int qr2_shared_memory_run(const qr2_whole_qr_args* args, int cluster, const qr2_device* dev, void* stream);

/* ---- the blocked route's panels ---- */

/*
 * An m x w panel (w <= QR2_PANEL_MAX_W) factored in place in h (LAPACK sgeqr2 semantics: min(m, w) reflectors).
 * Writes H (R and v), tau, the explicit reflectors V (column c: zeros in rows [0, v_row0 + c), 1 at row v_row0 + c,
 * then v; ldv >= v_row0 + m) and, where the panel kind builds it, the w x w compact-WY factor T (column-major, ld w):
 * H_0 ... H_{w-1} = I - V T V^T.
 */
#define QR2_PANEL_MAX_W 32
typedef struct qr2_panel_job {
    int64_t batch;
    int m, w;
    float* h;
    int64_t ldh, h_bs;
    float* tau;
    int64_t tau_bs;
    float* v;
    int64_t ldv, v_bs;
    int v_row0;
    float* t; /* unused by panel kinds that build no T */
    int64_t t_bs;
    const int* done; /* Householder kinds: matrix b is skipped where done[b] != 0 (the CholeskyQR panel factored it);
                        NULL: none is */
    /* The registers kind leaves matrix b as it is, but for tau = 0, where col0 (the panel's first column in the whole
     * matrix) >= zero_from[b]: its columns from there on are exactly zero (qr2_zero_tail_run). NULL: none. */
    const int* zero_from;
    int col0;
    /* cholqr only: the previous panel's reflectors, which it applies to its own columns first (C -= V T^T V^T C, from
     * the W rows above the panel's top): prev_v its explicit V from that row (ld prev_ldv, prev_v_bs apart), prev_t
     * its T (column-major, ld W, prev_t_bs apart). NULL: none. */
    const float* prev_v;
    int64_t prev_ldv, prev_v_bs;
    const float* prev_t;
    int64_t prev_t_bs;
} qr2_panel_job;

/* cholqr: CholeskyQR2 in FP64 with Householder reconstruction, a cluster of up to 16 blocks per panel (m <= 4096,
 * w == 32, m >= 64); builds T. done[b] (one int per matrix) says whether matrix b passed its guard and was written;
 * a matrix that did not is left untouched for a Householder kind (run it next with job.done = done). */
int qr2_panel_cholqr_holds(int64_t m, int64_t w, const qr2_device* dev);
int qr2_panel_cholqr_run(const qr2_panel_job* job, int* done, const qr2_device* dev, void* stream);
/* Whether it can also apply the previous panel's reflectors (job.prev_v) to a panel of m x w first. */
int qr2_panel_cholqr_applies_previous(int64_t m, int64_t w, const qr2_device* dev);
/* cholqr_grid: the same, for panels taller than a cluster holds (m > 8192): five to seven launches over 256-row
 * blocks of the grid and one block a matrix; builds T. work: qr2_panel_cholqr_grid_work_floats(m, batch, dev) floats,
 * 8-byte aligned. */
int qr2_panel_cholqr_grid_holds(int64_t m, int64_t w, const qr2_device* dev);
int64_t qr2_panel_cholqr_grid_work_floats(int64_t m, int64_t batch, const qr2_device* dev);
int qr2_panel_cholqr_grid_run(const qr2_panel_job* job, int* done, void* work, const qr2_device* dev, void* stream);

/* registers: the register kernel of the `registers` family in panel mode, one block per panel; builds T.
 * m <= QR2_PANEL_REGISTERS_MAX_M (taller panels measured no faster than the cluster panel's: 24 and 32 rows per
 * lane spill and lengthen every chain step). */
#define QR2_PANEL_REGISTERS_MAX_M 512
int qr2_panel_registers_holds(int64_t m, int64_t w, const qr2_device* dev);
int qr2_panel_registers_run(const qr2_panel_job* job, void* work, const qr2_device* dev, void* stream);

/* cluster: the panel in registers across a thread-block cluster (up to 8 blocks), one cluster-wide reduction per
 * reflector; builds T. */
int qr2_panel_cluster_holds(int64_t m, int64_t w, const qr2_device* dev);
int qr2_panel_cluster_run(const qr2_panel_job* job, void* work, const qr2_device* dev, void* stream);

/* tall: any height, by many thread blocks per matrix: one launch a panel where the batch's blocks fit on the device
 * at once with their rows in shared memory (the resident form, which also builds T where job.t is set:
 * qr2_panel_tall_builds_t), else one launch per reflector, which builds no T. work:
 * qr2_panel_tall_work_floats(m, batch, dev) floats, 8-byte aligned. For tests: the resident form's blocks a matrix
 * for a job (0: it takes one launch per reflector), and a run that always takes one launch per reflector. */
#define QR2_PANEL_TALL_MAX_BLOCKS 256
int qr2_panel_tall_holds(int64_t m, int64_t w, const qr2_device* dev);
int64_t qr2_panel_tall_work_floats(int64_t m, int64_t batch, const qr2_device* dev);
int qr2_panel_tall_run(const qr2_panel_job* job, void* work, const qr2_device* dev, void* stream);
int qr2_panel_tall_builds_t(const qr2_panel_job* job, const qr2_device* dev);
int qr2_panel_tall_resident_blocks(const qr2_panel_job* job, const qr2_device* dev);
int qr2_panel_tall_run_launches(const qr2_panel_job* job, void* work, const qr2_device* dev, void* stream);

/* ---- the blocked route's update and the input transpose ---- */

/*
 * Apply the block reflector Q^T = (H_0 H_1 ... H_{w-1})^T of w explicit reflectors V (mr x w,
 * unit lower trapezoidal, as the panel kernels write it) to C (mr x nc), in place:
 *     G = V^T V,  T = larft(G, tau),  W = V^T C,  C -= V (T^T W)
 * or, with apply_q, Q itself: C -= V (T W).
 * T: when t is not NULL it is taken from there (w x w, ld w, t_bs apart) instead of being built.
 * work: qr2_update_work_floats(w, nc) floats per matrix, work_bs apart, then qr2_update_split_floats(m, n, w, batch, dev)
 * floats for the whole call (rows split over blocks when a few matrices leave SMs idle). G in FP32 (partial sums
 * over row ranges, added in order); the products with C on tensor cores at FP32 accuracy (3xTF32), or FP32 cuBLAS GEMMs
 * where fewer 32-column strips than SMs would leave the GPU idle.
 */
typedef struct qr2_update_args {
    int64_t batch;
    int mr, w, nc;
    const float* v;
    int64_t ldv, v_bs;
    const float* tau;
    int64_t tau_bs;
    const float* t;
    int64_t t_bs;
    float* c;
    int64_t ldc, c_bs;
    float* work;
    int64_t work_bs;
    int apply_q; /* 0: C = Q^T C (the factorisation's update); 1: C = Q C */
    /* Where C's entries are read when C does not hold them yet (NULL: in C): a row-major source, element (i, j) of
     * matrix b at c_from[b from_bs + i from_rs + j] (the caller's input, so that the first update does the input's
     * transpose instead of a pass of its own). C is then written in full. */
    const float* c_from;
    int64_t from_rs, from_bs;
    /* Not NULL: C's column j is column col0 + j of the whole matrix, and a strip of C from zero_from[b] on (exactly
     * zero: qr2_zero_tail_run) is left alone (copied into C as it is when read from c_from). */
    const int* zero_from;
    int col0;
} qr2_update_args;

#define QR2_UPDATE_MAX_W 128
int64_t qr2_update_work_floats(int w, int nc);
/* T of the w1 + w2 reflectors V = [V1 V2] (mr x (w1 + w2), ld ldv, v_bs apart, as the panel kernels write them) from
 * the T factors of its halves, w1, w2 <= QR2_PANEL_MAX_W: t1 (w1 x w1, ld w1) and t2 (w2 x w2, ld w2), t_bs apart,
 * into t ((w1 + w2) square, ld w1 + w2, out_bs apart): T = [T1, -T1 (V1^T V2) T2; 0, T2]. work: where the rows are
 * split into parts (qr2_update_merge_t_parts > 1), 1024 floats a part and matrix, which the update's split region
 * (qr2_update_split_floats) of a problem of at least mr rows holds; else unused (may be NULL). */
int qr2_update_merge_t(int64_t batch, int mr, int w1, int w2, const float* v, int64_t ldv, int64_t v_bs,
                       const float* t1, const float* t2, int64_t t_bs, float* t, int64_t out_bs, float* work,
                       const qr2_device* dev, void* stream);
int qr2_update_merge_t_parts(int64_t batch, int mr, int w1, const qr2_device* dev);
int64_t qr2_update_split_floats(int64_t m, int64_t n, int w, int64_t batch, const qr2_device* dev);
int qr2_update_run(const qr2_update_args* args, void* blas_handle, const qr2_device* dev, void* stream);
/* Whether some update of a batch of m-row matrices may need blas_handle (it never does from SMs matrices on). */
int qr2_update_may_use_blas(int64_t m, int64_t batch, const qr2_device* dev);

/* ---- applying stored reflectors (orgqr, ormqr) ---- */

/* The explicit V (mr x w, column-major, ld ldv, v_bs apart) of the w reflectors stored in h as geqrf leaves them
 * (element (i, j) at h[i rs + j cs], h_bs apart; v below the diagonal): zeros above the diagonal, ones on it. */
int qr2_reflectors_unpack(int64_t batch, int mr, int w, const float* h, int64_t rs, int64_t cs, int64_t h_bs,
                          float* v, int64_t ldv, int64_t v_bs, void* stream);
/* The m x n identity in column-major q (ld m, m*n apart). */
int qr2_identity_run(int64_t batch, int m, int n, float* q, void* stream);

/* zero_from[b] = 1 + the last column of matrix b (element (i, j) at a[b bs + i rs + j cs]) with a non-zero entry,
 * 0 for a zero matrix: its columns from there on are exactly zero, and so are the factorisation's. */
int qr2_zero_tail_run(const float* a, int64_t rs, int64_t cs, int64_t bs, int m, int n, int64_t batch, int* zero_from,
                      void* stream);
/* Copies a batch of m x n matrices (any strides) into column-major dst (ld ldd, dst_bs apart). */
int qr2_transpose_run(const float* src, int64_t rs, int64_t cs, int64_t bs, float* dst, int64_t ldd, int64_t dst_bs,
                      int m, int n, int64_t batch, void* stream);

/* The calling thread's side stream for `device` (created on first use; `urgent`: its second one, at the device's
 * highest stream priority), made to wait for the work queued on `stream` so far; *side is NULL (and 0 returned) while
 * that stream is held by a graph capture other than `stream`'s.
 * qr2_side_join makes `stream` wait for the work queued on the side stream so far. Stream-ordered (no host wait) and
 * capturable: inside a capture the side stream joins it. */
enum { QR2_SIDE_PLAIN = 0, QR2_SIDE_URGENT = 1 }; /* qr2_side_fork's and qr2_side_join's `urgent` */
int qr2_side_fork(void* stream, int device, int urgent, void** side);
int qr2_side_join(void* stream, int device, int urgent);

/* An empty kernel, launched the way the single-kernel configurations launch: measures the floor of a call. */
int qr2_empty_run(void* stream);

#ifdef __cplusplus
}
#endif

#endif /* QR2_CUDA_H */
