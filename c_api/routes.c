/*
 * routes.c - the route table and the schedules behind it. This is the one place that knows the
 * order of steps for a shape; the kernels in cuda/ know nothing of each other.
 */
#include "routes.h"

#include <string.h>

#include "qr2_cuda.h"

/* The first row that admits a problem runs it. */
static const qr2_route routes[] = {
    /* name, kind, min_m, max_m, min_n, max_n, min_batch, max_batch, nb, leaf_nb, cluster, why */
    /* m, n <= 32 up to 640 matrices. Fourteenth session (H200, both forced in one run; per call as the benchmark
     * times it, and kernel alone by CUDA-graph replay): 20 x 32 x 32 8.9 us per call against 12.1 for
     * `warp_columns` (kernel 7.8 against 10.4), 1 x 32 x 32 8.7 against 11.8, 640 x 32 x 32 13.7 against 14.4,
     * 20 x 16 x 16 kernel 4.4 against 5.2, 20 x 8 x 8 2.8 against 3.4. Past 640 its four warps a matrix cost
     * more than they save: 1000 x 32 x 32 18.0 against 14.4 us, 3000 x 32 x 32 45.1 against 31.3 */
    {"quad_columns", QR2_ROUTE_QUAD, 0, 32, 0, 32, 0, 640, 0, 0, 1,
     "small matrices (m, n <= 32) factored whole by one thread block each, a quad of four lanes per column (a "
     "quarter of its rows each): every lane computes the scalars from the published column, two shuffles per dot, "
     "one block barrier per reflector"},
    /* m, n <= 32 past 640 matrices: one warp per matrix, up to four matrices per block. Kernel alone (H200, seventh
     * session): 2000 x 32 x 32 20.3 us against 66.7 for `registers` */
    {"warp_columns", QR2_ROUTE_WARP, 0, 32, 0, 32, 0, 0, 0, 0, 1,
     "large batches of small matrices (m, n <= 32) factored whole by one warp each, a lane per column: dots are "
     "a lane's own FMAs, each reflector's column published through shared memory, one __syncwarp per reflector"},
    /* Past one wave of one block per matrix (132 SMs) the warp kernel also wins for the taller shapes it holds,
     * several matrices per block: 2000 x 96 x 32 65.4 against 112.0 us for `registers` */
    {"warp_columns_many", QR2_ROUTE_WARP, 0, 0, 0, 32, 133, 0, 0, 0, 1,
     "the `warp_columns` kernel for batches of more than 132 matrices of n <= 32 with m <= 96 (up to four "
     "matrices per block)"},
    /* 33 <= n <= 64 (m <= 64) only past one wave of `block_columns` (one block per matrix; the crossovers fit six
     * blocks per SM for n <= 48 and four for n >= 49, on 132 SMs). Per call (H200, twelfth session, squares, both
     * forced in one run), block_columns / warp_columns = 0.54-0.95 at batches 133-480 for every n 33-64; 0.73-0.87
     * at 560-640 for n <= 48, 1.08-1.28 for n >= 49; 1.11-1.39 at 800-1000 for every n. Batch 640: 64 x 40 32.1
     * against 43.1 us, 40 x 64 46.5 against 36.1 */
    {"warp_columns_many_n48", QR2_ROUTE_WARP, 0, 0, 33, 48, 793, 0, 0, 0, 1,
     "the `warp_columns` kernel for batches of more than 792 matrices of 33 <= n <= 48 with m <= 64 (two lanes "
     "per column, several matrices per block)"},
    {"warp_columns_many_n64", QR2_ROUTE_WARP, 0, 0, 49, QR2_WARP_QR_MAX_N, 529, 0, 0, 0, 1,
     "the `warp_columns` kernel for batches of more than 528 matrices of 49 <= n <= 64 with m <= 64 (two lanes "
     "per column, several matrices per block)"},
    /* 33 <= n <= 64 (m <= 64) up to one block per SM. Fifteenth session (H200, routes forced in one run; per call as
     * the benchmark times it / kernel alone by CUDA-graph replay): 20 x 64 x 64 21.7 / 20.5 us against 23.2 / 22.0
     * for `block_columns`, 20 x 40 x 40 14.3 / 13.1 against 15.5 / 14.2, 1 x 56 x 56 19.2 against 20.9; even at 132
     * (132 x 48 x 48 18.1 against 17.9); past one wave one block per matrix costs more: 264 x 64 x 64 32.6 against
     * 26.0, 640 x 48 x 48 50.1 against 26.3 */
    {"quad_columns_n64", QR2_ROUTE_QUAD, 0, QR2_QUAD_QR_MAX, 33, QR2_QUAD_QR_MAX, 0, 132, 0, 0, 1,
     "the `quad_columns` kernel for 33 <= n <= 64 (m <= 64) up to 132 matrices: 16 rows a lane, up to eight warps"},
    /* 17 <= n <= 176 at every batch (m <= 176; the warp routes keep their shapes). Twelfth session, per call, routes
     * forced in one run: n 33-39 at batch 1-132 12.9-14.8 us against 17.6-20.9 for `registers`; n 17-32 with
     * m > 32: 40 x 176 x 32 28.6 against 37.7, 500 x 176 x 32 37.7 against 80.8 (`registers_many_small`),
     * 1000 x 97 x 32 56.9 against 109.6, 1000 x 176 x 17 46.5 against 69.1; at n <= 16 `registers` is as fast or
     * faster (132 x 176 x 4 17.3 against 20.3). Placed by the
     * eighth session's sweep (H200, time per call, same runs), when the kernel was 1.5x slower than now: batch 1-40
     * n 48-128 1.03-1.15x faster than registers_cluster2, batch 132 1.13-1.6x faster than registers, batch 640
     * 1.1-1.5x faster than registers_many_small and blocked_nb32. Tenth session (kernel alone, CUDA-graph replay):
     * 40 x 176 80.0 us, 40 x 128 48.8, 640 x 176 415.5; batch 1, n 40-88, per call: 15.2-34.5 us against 20.7-47.8
     * for registers_cluster2 */
    /* n >= 72, batch <= 66: one wave of 2-block clusters on the H200's 132 SMs. Per call against one block per
     * matrix (thirteenth session, both forced in one run, batches 1-66): n 176 69.5-71.1 against 82.5-83.3 us, n 128
     * 46.2-46.6 against 50.7-51.1, n 96 35.6-36.3 against 37.6-38.1, n 72 28.1-29.2 against 29.4-29.6, n 64
     * 26.1-26.9 against 23.2-23.4; 40 x 100 x 176 56.8 against 63.5 (quick_times). Kernel alone: 132 x 160 (two
     * waves) 126.5 against 76.2. Nineteenth session (the builder's row bands in both), per call, batches 1-40: n 176
     * 65.6-66.5 against 79.7-80.8, n 72 28.1-29.8 against 28.9-30.4 */
    {"block_columns_cluster2", QR2_ROUTE_BLOCK, 0, 0, 72, QR2_BLOCK_QR_MAX, 0, 66, 0, 0, 2,
     "the `block_columns` kernel on a 2-block cluster per matrix: block 0 factors the left half of the columns and "
     "forwards each reflector by st.async into block 1, which applies them as they land and then factors the rest"},
    {"block_columns", QR2_ROUTE_BLOCK, 0, 0, 17, QR2_BLOCK_QR_MAX, 0, 0, 0, 0, 1,
     "small matrices (m, n <= 176, n >= 17) factored whole by one thread block each: warps holding two columns a "
     "thread apply the reflectors, one more warp builds each from the next column over its 32 lanes, one block "
     "barrier per reflector"},
    /* A 3-block cluster per matrix past one or two blocks' registers, where it measured faster than every other route
     * (sixteenth session, H200, kernels alone by CUDA-graph replay, routes forced in one run). n 177-256 up to 132
     * matrices: 256 x 256 at batch 1-33 122-124 us against 345-347 for `registers_cluster2`, at 40-44 175 (past one
     * wave of 3-block clusters) against 347, at 66 226 against 348; 40 x 184 130.8 against 154.4, 40 x 208 140.9
     * against 257.0, 40 x 232 163.9 against 304.9; 132 x 184 268.6 against 297.9 for `blocked_nb32`, 132 x 100 x 250
     * 171.0 against 200.9; 40 x 100 x 250 81.8 against 98.4, 40 x 176 x 256 108.3 against 226.2. Not for m <= 64:
     * 40 x 64 x 200 60.2 against 44.9 for `registers_cluster2` */
    {"block_columns_cluster3", QR2_ROUTE_BLOCK, 65, 0, 177, QR2_BLOCK_QR_CLUSTER_MAX, 0, 132, 0, 0, 3,
     "the `block_columns` kernel on a 3-block cluster per matrix for n 177-256 (65 <= m <= 256), up to 132 "
     "matrices: each block factors a third of the columns after applying the reflectors forwarded by st.async "
     "from the blocks before it"},
    /* Tall, m 177-256 with n 48-176, up to 66 matrices: 40 x 256 x 48 31.0 us against 42.5 for
     * `registers_cluster2`, 40 x 256 x 64 37.8 against 58.3, 66 x 256 x 64 45.9 against 58.6, 40 x 200 x 96 52.2
     * against 80.9, 1 x 256 x 128 62.6 against 133.9, 66 x 256 x 128 109.1 against 135.0, 40 x 256 x 176 118.4 against
     * 182.2, 66 x 200 x 176 148.3 against 158.7. At 132 `registers` is as fast or faster for n <= 128 (132 x 256 x 64
     * 81.4 against 72.7) */
    {"block_columns_cluster3_tall", QR2_ROUTE_BLOCK, 177, 0, 48, 176, 0, 66, 0, 0, 3,
     "the `block_columns_cluster3` kernel for tall matrices (m 177-256, n 48-176) up to 66 matrices"},
    /* Large batches, m and n 177-256 (n >= 193): 264 x 232 630 us against 844 for `blocked_nb32`, 640 x 200 1212
     * against 1381, 640 x 256 1546 against 1905, 1000 x 200 1860 against 1963, 2000 x 208 3729 against 3868, 2000 x
     * 256 4659 against 5226. Not for n <= 192, where the general route's six panels win from about 264 matrices
     * (528 x 184 967 against 819), nor for wide matrices (640 x 128 x 256 821 against 710) */
    {"block_columns_cluster3_many", QR2_ROUTE_BLOCK, 177, 0, 193, QR2_BLOCK_QR_CLUSTER_MAX, 133, 0, 0, 0, 3,
     "the `block_columns_cluster3` kernel for batches of more than 132 matrices with m 177-256 and n 193-256"},
    /* batch <= 66: one wave of 2-block clusters on the H200's 132 SMs (now only what no block_columns route takes:
     * m <= 64 with n 177-256, where it measured faster than the 3-block cluster). There, for
     * 48 <= n <= 160, it measured 1.1-1.5x faster than `registers`; at batch 100 and beyond one block is 1.3-1.8x
     * faster */
    {"registers_cluster2", QR2_ROUTE_REGISTERS, 0, 0, 48, QR2_REGISTER_QR_MAX, 0, 66, 0, 0, 2,
     "small batches of small matrices (n >= 48, m, n <= 256): a 2-block cluster per matrix deals the "
     "columns to both blocks' warps; reflectors reach the other block by st.async into its shared memory"},
    /* batch <= 132: one block per matrix on each of the H200's 132 SMs. Beyond, from n 104 on, the blocked
     * route measured as fast or faster (batch 200: n 128 232 against 270 us; batch 640: n 128 466 against
     * 666 us; n 104 and 152 even at 200-264) */
    {"registers", QR2_ROUTE_REGISTERS, 0, 0, 0, QR2_REGISTER_QR_MAX, 0, 132, 0, 0, 1,
     "small matrices (m, n <= 256 whose columns, dealt cyclically to the warps, fit one block's "
     "registers) factored whole in one launch: each reflector built by its column's warp and published "
     "in shared memory behind its own mbarrier"},
    /* n <= 96 at any batch: at 640 matrices still faster than the blocked route (n 96: 250 against 294 us).
     * n 161-192 past 66 matrices go to the blocked route: the 2-block cluster kernel measured slower there
     * (batch 132, n 176: 396 against 317 us; batch 640: 1959 against 1033) */
    {"registers_many_small", QR2_ROUTE_REGISTERS, 0, 0, 0, 96, 0, 0, 0, 0, 1,
     "the `registers` kernel for large batches of n <= 96 (4-8 columns per warp, several matrices per SM)"},
    {"on_chip", QR2_ROUTE_ON_CHIP, 0, 0, 0, 8, 0, 0, 0, 0, 1,
     "tall matrices of n <= 8 columns factored whole in one block's shared memory: one launch"},
    /* n >= 512 and batch >= 100: a 64-column outer panel (two 32-column panels, then one update of the rest)
     * halves the passes of the memory-bound trailing update over C. Measured (H200) against blocked_nb32:
     * 640 x 512 1.07x, 100 x 1024 1.10x, 200 x 1024 1.16x, 200 x 672 1.04x faster; 100 x 672 1.02x slower;
     * n 224-320 at batch 100-640 and every n at batch <= 40 slower */
    {"blocked_nb64", QR2_ROUTE_BLOCKED, 0, 0, 512, 0, 100, 0, 64, 32, 1,
     "`blocked_nb32` with 64-column outer panels: each is factored as two 32-column panels with an update "
     "between them, then applied to the rest of the matrix at once (T built from V's Gram matrix)"},
    {"blocked_nb32", QR2_ROUTE_BLOCKED, 0, 0, 0, 0, 0, 0, 32, 32, 1,
     "blocked Householder with 32-column panels, any shape. Panels of up to 512 rows are factored by the "
     "`registers` kernel (columns dealt to warps, the reflector chain run warp to warp), taller ones in "
     "registers across a thread-block cluster (one cluster-wide reduction per reflector); either also writes "
     "V and T. The trailing update C -= V (T^T (V^T C)) is three FP32 cuBLAS GEMMs"},
};
enum { ROUTE_COUNT = sizeof routes / sizeof routes[0] };

/* Measurement only: the floor of a call (validation, allocation, one launch); see qr2_route_force. */
static const qr2_route empty_route = {"empty_kernel", QR2_ROUTE_EMPTY, 0, 0, 0, 0, 0, 0, 0, 0, 1,
                                      "one empty kernel; H and tau are left unset"};

static const qr2_route* forced; /* set only by tests and benchmarks, see qr2_route_force */

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Whether the route's kernels can hold the shape at all (the table's limits aside). */
static int can_run(const qr2_route* r, int64_t m, int64_t n, int smem_optin) {
    if (r->kind == QR2_ROUTE_QUAD) return qr2_quad_qr_supported(m, n);
    if (r->kind == QR2_ROUTE_WARP) return qr2_warp_qr_supported(m, n);
    if (r->kind == QR2_ROUTE_BLOCK) return qr2_block_qr_supported(m, n, r->cluster, smem_optin);
    if (r->kind == QR2_ROUTE_REGISTERS) return qr2_register_qr_supported(m, n, r->cluster, smem_optin);
    if (r->kind == QR2_ROUTE_ON_CHIP) return qr2_panel_fits_on_chip(m, n, smem_optin);
    return 1;
}

static int admits(const qr2_route* r, int64_t m, int64_t n, int64_t batch, int smem_optin) {
    if (m < r->min_m || (r->max_m > 0 && m > r->max_m)) return 0;
    if (n < r->min_n || (r->max_n > 0 && n > r->max_n)) return 0;
    if (batch < r->min_batch) return 0;
    if (r->max_batch > 0 && batch > r->max_batch) return 0;
    return can_run(r, m, n, smem_optin);
}

const qr2_route* qr2_route_pick(int64_t m, int64_t n, int64_t batch, int smem_optin) {
    if (forced && can_run(forced, m, n, smem_optin)) return forced;
    int i = qr2_route_index_for(m, n, batch, smem_optin);
    return i < 0 ? 0 : &routes[i];
}

/* The tall-panel kernel's partial sums (doubles, first in the workspace), when some panel is taller than
 * one cluster of panel_wy holds. */
static int64_t tall_panel_floats(const qr2_problem* p) {
    if (qr2_panel_wy_supported(p->m, 1)) return 0;
    int sms = 0;
    if (qr2_cuda_sm_count(p->device, &sms)) sms = 2 * QR2_TALL_PANEL_MAX_BLOCKS; /* enough; the launch fails anyway */
    return qr2_tall_panel_work_floats(p->m, p->batch, sms);
}

/* The widest outer panel: nb columns, or all min(m, n) reflectors when there are fewer (a 2 x 10^7 matrix must
 * not ask for 32 columns of workspace per row). */
static int outer_panel_width(const qr2_route* r, const qr2_problem* p) {
    const int kmin = p->m < p->n ? p->m : p->n;
    return kmin < r->nb ? kmin : r->nb;
}

int64_t qr2_route_workspace_floats(const qr2_route* r, const qr2_problem* p) {
    if (r->kind != QR2_ROUTE_BLOCKED) return 0;
    /* per matrix: explicit V of one outer panel (m x its width), the leaf's T, the compact-WY scratch */
    const int w = outer_panel_width(r, p);
    return tall_panel_floats(p) + p->batch * ((int64_t)p->m * w + QR2_PANEL_WY_MAX_W * QR2_PANEL_WY_MAX_W +
                                              qr2_wy_work_floats(w, p->n));
}

/* ---- warp_columns, block_columns, registers ---- */

static qr2_whole_qr_args whole_args(const qr2_problem* p) {
    qr2_whole_qr_args a = {
        .batch = p->batch, .m = p->m, .n = p->n,
        .src = p->a, .src_rs = p->a_rs, .src_cs = p->a_cs, .src_bs = p->a_bs,
        .h = p->h, .tau = p->tau,
    };
    return a;
}

static int run_registers(const qr2_route* r, const qr2_problem* p) {
    const qr2_whole_qr_args a = whole_args(p);
    return qr2_register_qr(&a, r->cluster, p->device, p->stream);
}

static int run_block(const qr2_route* r, const qr2_problem* p) {
    const qr2_whole_qr_args a = whole_args(p);
    return qr2_block_qr(&a, r->cluster, p->stream);
}

static int run_quad(const qr2_problem* p) {
    const qr2_whole_qr_args a = whole_args(p);
    return qr2_quad_qr(&a, p->stream);
}

static int run_warp(const qr2_problem* p) {
    const qr2_whole_qr_args a = whole_args(p);
    return qr2_warp_qr(&a, p->stream);
}

/* ---- on_chip ---- */

static int run_on_chip(const qr2_problem* p) {
    const int kmin = p->m < p->n ? p->m : p->n;
    qr2_panel_args a = {
        .batch = p->batch, .m = p->m, .w = p->n,
        .src = p->a, .src_rs = p->a_rs, .src_cs = p->a_cs, .src_bs = p->a_bs,
        .dst = p->h, .ldd = p->m, .dst_bs = (int64_t)p->m * p->n,
        .tau = p->tau, .tau_bs = kmin,
        .v = 0,
    };
    return qr2_householder_panel(&a, p->device, p->stream);
}

/* ---- blocked ---- */

typedef struct blocked_ctx {
    const qr2_route* route;
    const qr2_problem* p;
    int smem_optin;
    int k_outer;  /* first column of the current outer panel */
    float* v;     /* explicit reflectors of the outer panel: (m - k_outer) x its width, ld m - k_outer */
    int64_t v_bs;
    float* t;     /* T of the last register-panel leaf: 32 x 32 per matrix */
    float* wy;    /* compact-WY scratch */
    int64_t wy_bs;
    void* tall;   /* the tall-panel kernel's partials (NULL: no panel needs it) */
} blocked_ctx;

static int ldv_of(const blocked_ctx* c) { return c->p->m - c->k_outer; }

/* Applies the reflectors of columns [k0, k0 + w) (outer-panel column jo) to columns [k0 + w, k0 + w + nc);
 * t: their T factor when a leaf built it (NULL: built here from V). */
static int apply_reflectors(const blocked_ctx* c, int k0, int jo, int w, int nc, const float* t) {
    const qr2_problem* p = c->p;
    const int kmin = p->m < p->n ? p->m : p->n;
    const int ldv = ldv_of(c);
    qr2_wy_args a = {
        .batch = p->batch, .mr = p->m - k0, .w = w, .nc = nc,
        .v = c->v + (int64_t)jo * ldv + jo, .ldv = ldv, .v_bs = c->v_bs,
        .tau = p->tau + k0, .tau_bs = kmin,
        .t = t, .t_bs = (int64_t)w * w,
        .c = p->h + (int64_t)(k0 + w) * p->m + k0, .ldc = p->m, .c_bs = (int64_t)p->m * p->n,
        .work = c->wy, .work_bs = c->wy_bs,
    };
    return qr2_apply_block_reflector(&a, p->blas, p->device, p->stream);
}

static int split_width(int w) {
    int half = w / 2;
    if (w > 16) half = (half + 7) / 8 * 8; /* keep GEMM operands 32-byte aligned in width */
    return half < w ? half : w - 1;
}

/* Factors columns [k0, k0 + w) of rows [k0, m). A panel of at most leaf_nb (<= 32) columns is one kernel: the
 * `registers` kernel in panel mode up to 512 rows (measured 2x faster than panel_wy there at batch 1), then
 * panel_wy's cluster while one cluster holds the rows (both also build T: *t_ready = 1), and the many-block
 * tall-panel kernel beyond. A wider panel: left half, update of the right half, right half. */
static int factor_panel(const blocked_ctx* c, int k0, int jo, int w, int* t_ready) {
    const qr2_problem* p = c->p;
    const int mr = p->m - k0;
    const int kmin = p->m < p->n ? p->m : p->n;
    float* panel = p->h + (int64_t)k0 * p->m + k0;
    *t_ready = 0;
    if (w <= c->route->leaf_nb) {
        const int registers = qr2_register_panel_supported(mr, w, c->smem_optin);
        if (registers || qr2_panel_wy_supported(mr, w)) {
            qr2_panel_wy_args a = {
                .batch = p->batch, .m = mr, .w = w,
                .h = panel, .ldh = p->m, .h_bs = (int64_t)p->m * p->n,
                .tau = p->tau + k0, .tau_bs = kmin,
                .v = c->v + (int64_t)jo * ldv_of(c), .ldv = ldv_of(c), .v_bs = c->v_bs, .v_row0 = jo,
                .t = c->t, .t_bs = (int64_t)w * w,
            };
            *t_ready = 1;
            return registers ? qr2_register_panel(&a, p->device, p->stream) : qr2_panel_wy(&a, p->device, p->stream);
        }
        qr2_panel_args a = {
            .batch = p->batch, .m = mr, .w = w,
            .src = panel, .src_rs = 1, .src_cs = p->m, .src_bs = (int64_t)p->m * p->n,
            .dst = panel, .ldd = p->m, .dst_bs = (int64_t)p->m * p->n,
            .tau = p->tau + k0, .tau_bs = kmin,
            .v = c->v + (int64_t)jo * ldv_of(c), .ldv = ldv_of(c), .v_bs = c->v_bs, .v_row0 = jo,
        };
        return qr2_tall_panel(&a, c->tall, p->device, p->stream);
    }
    const int w1 = split_width(w);
    int left_t = 0, right_t = 0;
    if (factor_panel(c, k0, jo, w1, &left_t)) return 1;
    if (apply_reflectors(c, k0, jo, w1, w - w1, left_t ? c->t : 0)) return 1;
    return factor_panel(c, k0 + w1, jo + w1, w - w1, &right_t);
}

static int run_blocked(const qr2_route* r, const qr2_problem* p, float* work) {
    blocked_ctx c = {.route = r, .p = p};
    if (qr2_cuda_smem_optin(p->device, &c.smem_optin)) return 1;
    if (p->a != p->h &&
        qr2_copy_to_column_major(p->a, p->a_rs, p->a_cs, p->a_bs, p->h, p->m, p->n, p->batch, p->stream))
        return 1;
    const int64_t tall = tall_panel_floats(p);
    c.tall = tall > 0 ? work : 0;
    c.v = work + tall;
    const int width = outer_panel_width(r, p); /* every panel below is at most this wide */
    c.v_bs = (int64_t)p->m * width;
    c.t = c.v + p->batch * c.v_bs;
    c.wy = c.t + p->batch * QR2_PANEL_WY_MAX_W * QR2_PANEL_WY_MAX_W;
    c.wy_bs = qr2_wy_work_floats(width, p->n);
    const int kmin = p->m < p->n ? p->m : p->n;
    for (int k = 0; k < kmin; k += r->nb) {
        const int w = (int)min64(r->nb, kmin - k);
        int t_ready = 0;
        c.k_outer = k;
        if (factor_panel(&c, k, 0, w, &t_ready)) return 1;
        if (k + w < p->n && apply_reflectors(&c, k, 0, w, p->n - k - w, t_ready ? c.t : 0)) return 1;
    }
    return 0;
}

int qr2_route_run(const qr2_route* route, const qr2_problem* p, float* work) {
    if (p->batch == 0 || p->m == 0 || p->n == 0) return 0;
    switch (route->kind) {
        case QR2_ROUTE_QUAD: return run_quad(p);
        case QR2_ROUTE_WARP: return run_warp(p);
        case QR2_ROUTE_BLOCK: return run_block(route, p);
        case QR2_ROUTE_REGISTERS: return run_registers(route, p);
        case QR2_ROUTE_ON_CHIP: return run_on_chip(p);
        case QR2_ROUTE_BLOCKED: return run_blocked(route, p, work);
        case QR2_ROUTE_EMPTY: return qr2_launch_empty(p->stream);
    }
    return 1;
}

/* ---- introspection ---- */

int qr2_route_count(void) { return ROUTE_COUNT; }
const char* qr2_route_name(int i) { return i >= 0 && i < ROUTE_COUNT ? routes[i].name : 0; }
const char* qr2_route_description(int i) { return i >= 0 && i < ROUTE_COUNT ? routes[i].why : 0; }

int qr2_route_index_for(int64_t m, int64_t n, int64_t batch, int smem_optin) {
    for (int i = 0; i < ROUTE_COUNT; ++i)
        if (admits(&routes[i], m, n, batch, smem_optin)) return i;
    return -1;
}

int qr2_route_holds(const char* name, int64_t m, int64_t n, int smem_optin) {
    for (int i = 0; i < ROUTE_COUNT; ++i)
        if (strcmp(routes[i].name, name) == 0) return can_run(&routes[i], m, n, smem_optin);
    return -1;
}

int64_t qr2_route_workspace_bytes(const char* name, int64_t m, int64_t n, int64_t batch) {
    const qr2_problem p = {.batch = batch, .m = (int)m, .n = (int)n, .device = 0};
    for (int i = 0; i < ROUTE_COUNT; ++i)
        if (strcmp(routes[i].name, name) == 0) return 4 * qr2_route_workspace_floats(&routes[i], &p);
    return -1;
}

int qr2_route_force(const char* name) {
    forced = 0;
    if (!name) return 0;
    if (strcmp(name, empty_route.name) == 0) forced = &empty_route;
    for (int i = 0; i < ROUTE_COUNT; ++i)
        if (strcmp(routes[i].name, name) == 0) forced = &routes[i];
    return forced ? 0 : -1;
}
