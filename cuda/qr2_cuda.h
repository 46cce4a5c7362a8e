/*
 * qr2_cuda.h - the CUDA launchers, as plain C. The only header of cuda/ that c_api/ includes.
 *
 * Conventions (LAPACK's): matrices are column-major, element (i, j) of matrix b lives at
 * ptr[b * batch_stride + j * ld + i]; sizes m (rows), n (columns), w (panel width).
 * Streams and cuBLAS handles travel as void*. Every launcher returns 0 on success; on failure
 * it returns non-zero and qr2_cuda_last_error() holds a message that names the failing call and
 * CUDA's (or cuBLAS's) own error text. Launchers never synchronise and never allocate.
 */
#ifndef QR2_CUDA_H
#define QR2_CUDA_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The message of this thread's last failing launcher ("" when none failed). */
const char* qr2_cuda_last_error(void);

/* Largest dynamic shared memory (bytes) one block may opt in to on `device`; cached per device. */
int qr2_cuda_smem_optin(int device, int* bytes);
/* The number of SMs of `device`; cached per device. */
int qr2_cuda_sm_count(int device, int* count);
/* The calling thread's current CUDA device. */
int qr2_cuda_current_device(int* device);

/*
 * An m x w panel to factor (LAPACK sgeqr2 semantics): min(m, w) reflectors; column j's reflector
 * annihilates rows j+1..m-1 and is applied to columns j+1..w-1.
 * src: the panel as read (any row/column/batch strides); dst: where H is written, column-major.
 * v (optional, NULL to skip; qr2_tall_panel only): the reflectors written out explicitly for compact-WY
 * updates: column c gets zeros in rows [0, v_row0 + c), 1 at row v_row0 + c, then v (ldv >= v_row0 + m).
 */
typedef struct qr2_panel_args {
    int64_t batch;
    int m, w;
    const float* src;
    int64_t src_rs, src_cs, src_bs;
    float* dst;
    int64_t ldd, dst_bs;
    float* tau;
    int64_t tau_bs;
    float* v;
    int64_t ldv, v_bs;
    int v_row0;
} qr2_panel_args;

/* The whole panel in one block's shared memory, one block per matrix (src may equal dst; v unused):
 * whether an m x w panel fits, and the launcher. */
int qr2_panel_fits_on_chip(int64_t m, int64_t w, int smem_optin);
int qr2_householder_panel(const qr2_panel_args* args, int device, void* stream);

/*
 * Householder factorisation of an m x w panel (w <= QR2_PANEL_WY_MAX_W) held in registers, one
 * thread-block cluster per matrix (the cluster grows with m and shrinks with the batch), in place in h.
 * Writes H (R and v), tau, the explicit reflectors V (as qr2_panel_args describes) and the w x w
 * compact-WY factor T (column-major, ld w): H_0 ... H_{w-1} = I - V T V^T.
 */
#define QR2_PANEL_WY_MAX_W 32
typedef struct qr2_panel_wy_args {
    int64_t batch;
    int m, w;
    float* h;
    int64_t ldh, h_bs;
    float* tau;
    int64_t tau_bs;
    float* v;
    int64_t ldv, v_bs;
    int v_row0;
    float* t;
    int64_t t_bs;
} qr2_panel_wy_args;

int qr2_panel_wy_supported(int64_t m, int64_t w);
int qr2_panel_wy(const qr2_panel_wy_args* args, int device, void* stream);

/* The same contract (H, tau, V, T of an m x w panel, in place) from the register kernel of register_qr.cu:
 * columns dealt to warps, rows across lanes, the reflector chain run warp to warp; one block or a 2-block
 * cluster per panel. w <= 32 and m <= QR2_REGISTER_PANEL_MAX_M (taller panels measured no faster than
 * qr2_panel_wy's: 24 and 32 rows per lane spill and lengthen every chain step). */
#define QR2_REGISTER_PANEL_MAX_M 512
int qr2_register_panel_supported(int64_t m, int64_t w, int smem_optin);
int qr2_register_panel(const qr2_panel_wy_args* args, int device, void* stream);

/* An m x w panel (w <= 32) of any height, in place (src == dst, src_rs 1, src_cs ldd), by many thread blocks
 * per matrix and one launch per reflector: for panels taller than qr2_panel_wy holds. Writes H, tau and V (when
 * v is not NULL; no T). work: qr2_tall_panel_work_floats(m, batch, SMs) floats, 8-byte aligned. */
#define QR2_TALL_PANEL_MAX_BLOCKS 256
int64_t qr2_tall_panel_work_floats(int64_t m, int64_t batch, int sms);
int qr2_tall_panel(const qr2_panel_args* args, void* work, int device, void* stream);

/* Whole small matrices factored in one launch (LAPACK sgeqrf semantics): reads A through its strides
 * (src may equal h), writes H (column-major, ld m, m*n apart) and tau (min(m, n) per matrix). */
typedef struct qr2_whole_qr_args {
    int64_t batch;
    int m, n;
    const float* src;
    int64_t src_rs, src_cs, src_bs;
    float* h;
    float* tau;
} qr2_whole_qr_args;

/* One warp per matrix, one lane per column (two for n > 32), whole columns in registers: n <= 64 with
 * m <= 64, or n <= 32 with m <= 96. */
#define QR2_WARP_QR_MAX_N 64
int qr2_warp_qr_supported(int64_t m, int64_t n);
int qr2_warp_qr(const qr2_whole_qr_args* args, void* stream);

/* One thread block per matrix, one quad of four lanes per column (a quarter of its rows each): m, n <= 64. */
#define QR2_QUAD_QR_MAX 64
int qr2_quad_qr_supported(int64_t m, int64_t n);
int qr2_quad_qr(const qr2_whole_qr_args* args, void* stream);

/* One thread block per matrix (cluster = 1), or a cluster of 2 or 3 blocks on as many SMs that split its columns
 * (each block 16 columns at least): whole columns in registers, each over four lanes (a quarter of its rows each, two
 * columns a lane), m, n <= QR2_BLOCK_QR_MAX on 1-2 blocks, m, n <= QR2_BLOCK_QR_CLUSTER_MAX on 3. */
#define QR2_BLOCK_QR_MAX 176
#define QR2_BLOCK_QR_CLUSTER_MAX 256
/* Whether the kernel holds m x n on `cluster` blocks, with a device's `smem_optin` bytes of shared memory a block. */
int qr2_block_qr_supported(int64_t m, int64_t n, int cluster, int smem_optin);
int qr2_block_qr(const qr2_whole_qr_args* args, int cluster, void* stream);

/* m, n <= 256 held in registers (columns dealt cyclically to the warps, rows across lanes) with every
 * reflector kept in shared memory: one thread block per matrix, or a cluster of `cluster` = 2 blocks that
 * share its columns. */
#define QR2_REGISTER_QR_MAX 256
/* Whether m x n matrices fit the registers and shared memory (smem_optin bytes per block) of one block
 * (cluster 1) or of a 2-block cluster. */
int qr2_register_qr_supported(int64_t m, int64_t n, int cluster, int smem_optin);
int qr2_register_qr(const qr2_whole_qr_args* args, int cluster, int device, void* stream);

/* An empty kernel, launched the way every route launches: measures the floor of a call. */
int qr2_launch_empty(void* stream);

/* Copies a batch of m x n matrices (any strides) into column-major dst (ld m, m*n apart). */
int qr2_copy_to_column_major(const float* src, int64_t rs, int64_t cs, int64_t bs, float* dst, int m, int n,
                             int64_t batch, void* stream);

/*
 * Apply the block reflector Q^T = (H_0 H_1 ... H_{w-1})^T of w explicit reflectors V (mr x w,
 * unit lower trapezoidal, as the panel kernels write it) to C (mr x nc), in place:
 *     G = V^T V,  T = larft(G, tau),  W = V^T C,  C -= V (T^T W)
 * T: when t is not NULL it is taken from there (w x w, ld w, t_bs apart) instead of being built.
 * work: qr2_wy_work_floats(w, nc) floats per matrix, work_bs apart. All products in FP32
 * (cuBLAS, CUBLAS_COMPUTE_32F with the default math mode: no TF32).
 */
typedef struct qr2_wy_args {
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
} qr2_wy_args;

#define QR2_WY_MAX_W 128
int64_t qr2_wy_work_floats(int w, int nc);
int qr2_apply_block_reflector(const qr2_wy_args* args, void* blas_handle, int device, void* stream);

#ifdef __cplusplus
}
#endif

#endif /* QR2_CUDA_H */
