/*
 * blocked_schedule_host.c - c_api/blocked.c's schedules run on the host, every CUDA entry point they call replaced by
 * a check of its pointer arguments (built and run by tests/test_blocked_schedule.py; no GPU needed).
 *
 * For each configuration named on the command line, over shapes, batches, layouts and two SM counts: every V, T,
 * scratch, flag and scale pointer a kernel would get lies inside the workspace the schedule asked for, every output
 * inside H and tau, every input inside A; the side streams forked are joined before the call returns, and a kernel
 * is queued only on the caller's stream or a side stream forked from it and not yet joined. The kernels' own
 * workspace rules are stood in for by monotone bounds (the split region below), so what is checked is blocked.c's
 * carving of its workspace, not the kernels' use of their share.
 *
 *     blocked_schedule_host NAME...     (exit status 0: no violation; the violations are printed)
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "configs.h"

/* ---- the current call's buffers and what went wrong ---- */

typedef struct buffer {
    const char* name;
    const void* lo;
    const void* hi;
} buffer;

static buffer ws, h_buf, tau_buf, a_buf;
static void* main_stream;
static int sides_open[2]; /* forks not yet joined, per kind */
static long violations;
static char shape[96];

static void fail(const char* fmt, ...) {
    if (++violations > 20) return;
    va_list args;
    va_start(args, fmt);
    printf("%s: ", shape);
    vprintf(fmt, args);
    printf("\n");
    va_end(args);
}

/* The workspace's ranges seen in this call, by role (V, T, scratch, ...): ranges of different roles must not meet. */
typedef struct range {
    const char* role;
    const char* lo;
    const char* hi;
} range;
static range seen[4096];
static int nseen;

/* [p, p + count) of `size`-byte elements inside buffer b; in the workspace, with its role */
static void inside_as(const buffer* b, const char* role, const void* p, int64_t count, size_t size, const char* what) {
    const char* lo = p;
    if (!p) {
        fail("%s: NULL", what);
        return;
    }
    const char* hi = lo + count * (int64_t)size;
    if (count < 0 || lo < (const char*)b->lo || hi > (const char*)b->hi) {
        fail("%s: [%td, %td) bytes outside %s of %td", what, lo - (const char*)b->lo, hi - (const char*)b->lo,
             b->name, (const char*)b->hi - (const char*)b->lo);
        return;
    }
    if (!role) return;
    for (int i = 0; i < nseen; ++i)
        if (seen[i].role != role && lo < seen[i].hi && seen[i].lo < hi)
            fail("%s (%s) meets the workspace's %s", what, role, seen[i].role);
    if (nseen < (int)(sizeof seen / sizeof seen[0])) seen[nseen++] = (range){role, lo, hi};
}
static void inside(const buffer* b, const void* p, int64_t count, size_t size, const char* what) {
    inside_as(b, 0, p, count, size, what);
}
static const char V[] = "V", T[] = "T", SCRATCH[] = "scratch", FLAGS[] = "flags", ZERO_FROM[] = "zero_from",
                  SCALES[] = "scales", TALL[] = "tall-panel work";

static void on_stream(void* stream, const char* what) {
    const int side = stream == (void*)&sides_open[QR2_SIDE_PLAIN] ? QR2_SIDE_PLAIN
                     : stream == (void*)&sides_open[QR2_SIDE_URGENT] ? QR2_SIDE_URGENT
                                                                     : -1;
    if (side < 0 ? stream != main_stream : sides_open[side] == 0) fail("%s queued on a stream not forked", what);
}

/* ---- stand-ins for the CUDA side ---- */

int qr2_panel_registers_holds(int64_t m, int64_t w, const qr2_device* dev) { return (void)dev, m <= 512 && w <= 32; }
int qr2_panel_cluster_holds(int64_t m, int64_t w, const qr2_device* dev) {
    return m <= 8192 && w <= 32 && (m <= 512 || dev->clusters);
}
int qr2_panel_cholqr_holds(int64_t m, int64_t w, const qr2_device* dev) {
    return w == 32 && m >= 64 && m <= 4096 && dev->clusters;
}
int64_t qr2_panel_tall_work_floats(int64_t m, int64_t batch, const qr2_device* dev) {
    return (void)m, (void)dev, batch * 2 * 257 * 33 * 2;
}
int qr2_panel_cholqr_grid_holds(int64_t m, int64_t w, const qr2_device* dev) { return (void)dev, w == 32 && m > 8192; }
int64_t qr2_panel_cholqr_grid_work_floats(int64_t m, int64_t batch, const qr2_device* dev) {
    return (void)dev, batch * ((m + 255) / 256 * 2049 + 6980) + 16;
}
int64_t qr2_update_work_floats(int w, int nc) { return 2 * (int64_t)w * w + 2 * (int64_t)w * nc; }
/* The split region, as update.cu sizes it in shape: partial Grams or merge_t's partials (at most 16 parts a matrix)
 * below the SMs' count and past 256 rows; the split update's partials below two waves and from 512 rows; the larger
 * of the two. Here a bound that grows with every argument, so that an update of fewer rows, columns or reflectors
 * than the schedule sized for fits. */
int64_t qr2_update_split_floats(int64_t m, int64_t n, int w, int64_t batch, const qr2_device* dev) {
    const int64_t ww = w > 32 ? w : 32;
    const int64_t gram = batch < dev->sms && m > 256 ? batch * 16 * ww * ww : 0;
    const int64_t update = batch < 2 * (int64_t)dev->sms && m >= 512 && n > 0
                               ? batch * ((n + 63) / 64) * (m / 256 + 1) * ww * 64 + 8 * (int64_t)dev->sms * 64
                               : 0;
    return gram > update ? gram : update;
}
int qr2_update_may_use_blas(int64_t m, int64_t batch, const qr2_device* dev) { return batch < dev->sms && m > 4096; }

static void panel_job(const qr2_panel_job* j, void* stream, const char* what) {
    on_stream(stream, what);
    inside(&h_buf, j->h, (j->batch - 1) * j->h_bs + (int64_t)(j->w - 1) * j->ldh + j->m, sizeof(float), what);
    inside(&tau_buf, j->tau, (j->batch - 1) * j->tau_bs + j->w, sizeof(float), what);
    inside_as(&ws, V, j->v, (j->batch - 1) * j->v_bs + (int64_t)(j->w - 1) * j->ldv + j->v_row0 + j->m, sizeof(float),
              what);
    if (j->t) inside_as(&ws, T, j->t, (j->batch - 1) * j->t_bs + (int64_t)j->w * j->w, sizeof(float), what);
    if (j->done) inside_as(&ws, FLAGS, j->done, j->batch, sizeof(int), what);
    if (j->zero_from) inside_as(&ws, ZERO_FROM, j->zero_from, j->batch, sizeof(int), what);
}
int qr2_panel_registers_run(const qr2_panel_job* j, void* work, const qr2_device* dev, void* stream) {
    (void)work, (void)dev;
    panel_job(j, stream, "registers panel");
    return 0;
}
int qr2_panel_cluster_run(const qr2_panel_job* j, void* work, const qr2_device* dev, void* stream) {
    (void)work, (void)dev;
    panel_job(j, stream, "cluster panel");
    return 0;
}
int qr2_panel_cholqr_run(const qr2_panel_job* j, int* done, const qr2_device* dev, void* stream) {
    (void)dev;
    panel_job(j, stream, "cholqr panel");
    inside_as(&ws, FLAGS, done, j->batch, sizeof(int), "cholqr panel's flags");
    return 0;
}
int qr2_panel_cholqr_grid_run(const qr2_panel_job* j, int* done, void* work, const qr2_device* dev, void* stream) {
    panel_job(j, stream, "grid cholqr panel");
    inside_as(&ws, FLAGS, done, j->batch, sizeof(int), "grid cholqr panel's flags");
    inside_as(&ws, TALL, work, qr2_panel_cholqr_grid_work_floats(j->m, j->batch, dev), sizeof(float),
              "grid cholqr panel's work");
    return 0;
}
int qr2_panel_tall_run(const qr2_panel_job* j, void* work, const qr2_device* dev, void* stream) {
    panel_job(j, stream, "tall panel");
    inside_as(&ws, TALL, work, qr2_panel_tall_work_floats(j->m, j->batch, dev), sizeof(float), "tall panel's partials");
    return 0;
}

int qr2_update_run(const qr2_update_args* a, void* blas, const qr2_device* dev, void* stream) {
    (void)blas;
    on_stream(stream, "update");
    inside_as(&ws, V, a->v, (a->batch - 1) * a->v_bs + (int64_t)(a->w - 1) * a->ldv + a->mr, sizeof(float),
              "update's V");
    if (a->t) inside_as(&ws, T, a->t, (a->batch - 1) * a->t_bs + (int64_t)a->w * a->w, sizeof(float), "update's T");
    inside_as(&ws, SCRATCH, a->work, a->batch * a->work_bs + qr2_update_split_floats(a->mr, a->nc, a->w, a->batch, dev),
              sizeof(float), "update's scratch");
    inside(&h_buf, a->c, (a->batch - 1) * a->c_bs + (int64_t)(a->nc - 1) * a->ldc + a->mr, sizeof(float), "update's C");
    if (a->c_from)
        inside(&a_buf, a->c_from, (a->batch - 1) * a->from_bs + (int64_t)(a->mr - 1) * a->from_rs + a->nc,
               sizeof(float), "update's source");
    if (a->zero_from) inside_as(&ws, ZERO_FROM, a->zero_from, a->batch, sizeof(int), "update's zero_from");
    if (a->scale_exp)
        inside_as(&ws, SCALES, a->scale_exp + a->col0, (a->batch - 1) * a->scale_bs + a->nc, sizeof(int),
                  "update's scales");
    return 0;
}

int qr2_update_merge_t(int64_t batch, int mr, int w1, int w2, const float* v, int64_t ldv, int64_t v_bs,
                       const float* t1, const float* t2, int64_t t_bs, float* t, int64_t out_bs, float* work,
                       const qr2_device* dev, void* stream) {
    on_stream(stream, "merge_t");
    inside_as(&ws, V, v, (batch - 1) * v_bs + (int64_t)(w1 + w2 - 1) * ldv + mr, sizeof(float), "merge_t's V");
    inside_as(&ws, T, t1, (batch - 1) * t_bs + (int64_t)w1 * w1, sizeof(float), "merge_t's T1");
    inside_as(&ws, T, t2, (batch - 1) * t_bs + (int64_t)w2 * w2, sizeof(float), "merge_t's T2");
    inside_as(&ws, T, t, (batch - 1) * out_bs + (int64_t)(w1 + w2) * (w1 + w2), sizeof(float), "merge_t's T");
    if (batch < dev->sms && mr - w1 > 256)
        inside_as(&ws, SCRATCH, work, batch * 16 * 1024, sizeof(float), "merge_t's partials");
    return 0;
}

int qr2_transpose_run(const float* src, int64_t rs, int64_t cs, int64_t bs, float* dst, int64_t ldd, int64_t dst_bs,
                      int m, int n, int64_t batch, void* stream) {
    on_stream(stream, "transpose");
    inside(&a_buf, src, (batch - 1) * bs + (int64_t)(m - 1) * rs + (int64_t)(n - 1) * cs + 1, sizeof(float),
           "transpose's source");
    inside(&h_buf, dst, (batch - 1) * dst_bs + (int64_t)(n - 1) * ldd + m, sizeof(float), "transpose's output");
    return 0;
}

int qr2_zero_tail_run(const float* a, int64_t rs, int64_t cs, int64_t bs, int m, int n, int64_t batch,
                      int* zero_from, void* stream) {
    (void)a, (void)rs, (void)cs, (void)bs, (void)m, (void)n;
    on_stream(stream, "zero_tail");
    inside_as(&ws, ZERO_FROM, zero_from, batch, sizeof(int), "zero_from");
    return 0;
}

int qr2_column_scales_run(const float* a, int64_t rs, int64_t cs, int64_t bs, int m, int n, int64_t batch,
                          int* k_out, void* stream) {
    (void)a, (void)rs, (void)cs, (void)bs, (void)m;
    on_stream(stream, "column_scales");
    inside_as(&ws, SCALES, k_out, batch * n, sizeof(int), "column scales");
    return 0;
}

int qr2_side_fork(void* stream, int device, int urgent, void** side) {
    (void)device;
    on_stream(stream, "fork");
    ++sides_open[urgent];
    *side = &sides_open[urgent];
    return 0;
}

int qr2_side_join(void* stream, int device, int urgent) {
    (void)device;
    on_stream(stream, "join");
    if (sides_open[urgent]-- <= 0) fail("a join without a fork");
    return 0;
}

int qr2_cuda_fail(const char* what, const char* detail) {
    fail("%s: %s", what, detail);
    return 1;
}

/* the whole-matrix families (configs.c's table): never run here */
static int none_holds(int64_t m, int64_t n, int cluster, const qr2_device* dev) {
    return (void)m, (void)n, (void)cluster, (void)dev, 0;
}
static int none_run(const qr2_whole_qr_args* a, int cluster, const qr2_device* dev, void* stream) {
    return (void)a, (void)cluster, (void)dev, (void)stream, 1;
}
int qr2_quad_holds(int64_t m, int64_t n, int c, const qr2_device* d) { return none_holds(m, n, c, d); }
int qr2_warp_holds(int64_t m, int64_t n, int c, const qr2_device* d) { return none_holds(m, n, c, d); }
int qr2_builder_holds(int64_t m, int64_t n, int c, const qr2_device* d) { return none_holds(m, n, c, d); }
int qr2_registers_holds(int64_t m, int64_t n, int c, const qr2_device* d) { return none_holds(m, n, c, d); }
int qr2_shared_memory_holds(int64_t m, int64_t n, int c, const qr2_device* d) { return none_holds(m, n, c, d); }
int qr2_quad_run(const qr2_whole_qr_args* a, int c, const qr2_device* d, void* s) { return none_run(a, c, d, s); }
int qr2_warp_run(const qr2_whole_qr_args* a, int c, const qr2_device* d, void* s) { return none_run(a, c, d, s); }
int qr2_builder_run(const qr2_whole_qr_args* a, int c, const qr2_device* d, void* s) { return none_run(a, c, d, s); }
int qr2_registers_run(const qr2_whole_qr_args* a, int c, const qr2_device* d, void* s) { return none_run(a, c, d, s); }
int qr2_shared_memory_run(const qr2_whole_qr_args* a, int c, const qr2_device* d, void* s) {
    return none_run(a, c, d, s);
}
int qr2_empty_run(void* stream) { return (void)stream, 0; }

/* ---- the sweep ---- */

static int blas_handle(void** handle) {
    *handle = (void*)&blas_handle;
    return 0;
}

enum { ROW_MAJOR, COLUMN_MAJOR, IN_PLACE };

static void run_one(const qr2_config* c, int64_t batch, int m, int n, int layout, const qr2_device* dev) {
    snprintf(shape, sizeof shape, "%s %lldx%dx%d layout %d, %d SMs", c->name, (long long)batch, m, n, layout,
             dev->sms);
    const int64_t entries = batch * m * (int64_t)n, kmin = m < n ? m : n;
    float* h = malloc((size_t)entries * sizeof(float));
    float* a = layout == IN_PLACE ? h : malloc((size_t)entries * sizeof(float));
    float* tau = malloc((size_t)(batch * kmin) * sizeof(float));
    qr2_problem p = {.batch = batch, .m = m, .n = n, .a = a, .h = h, .tau = tau, .dev = dev,
                     .stream = main_stream, .blas_handle = blas_handle};
    p.a_rs = layout == ROW_MAJOR ? n : 1;
    p.a_cs = layout == ROW_MAJOR ? 1 : m;
    p.a_bs = (int64_t)m * n;
    const int64_t floats = qr2_blocked_workspace_floats(c, &p);
    float* work = malloc((size_t)(floats > 0 ? floats : 1) * sizeof(float));
    ws = (buffer){"the workspace", work, work + floats};
    h_buf = (buffer){"H", h, h + entries};
    a_buf = (buffer){"A", a, a + entries};
    tau_buf = (buffer){"tau", tau, tau + batch * kmin};
    sides_open[0] = sides_open[1] = 0;
    nseen = 0;
    if (h && a && tau && work) {
        if (qr2_blocked_run(c, &p, work)) fail("the schedule failed");
        if (sides_open[0] || sides_open[1]) fail("a side stream left forked");
    }
    if (a != h) free(a);
    free(h), free(tau), free(work);
}

int main(int argc, char** argv) {
    static const int shapes[][3] = {{1, 300, 300},  {2, 513, 513},  {3, 700, 700},  {2, 1024, 1024}, {60, 1024, 1024},
                                    {2, 1100, 400}, {1, 4100, 130}, {1, 9000, 70},  {300, 200, 200}, {140, 512, 512},
                                    {40, 352, 352}, {8, 2048, 2048}, {2, 300, 777}, {5, 1030, 1030}, {67, 290, 200},
                                    {1, 20000, 100}, {2, 9000, 300}};
    main_stream = &main_stream;
    long checked = 0;
    for (int i = 1; i < argc; ++i) {
        if (qr2_config_force(argv[i])) {
            printf("no configuration named %s\n", argv[i]);
            return 2;
        }
        const qr2_config* c = qr2_config_forced();
        for (int s = 0; s < 2; ++s) {
            const qr2_device dev = {.index = 0, .sms = s ? 16 : 132, .smem_optin = 232448, .clusters = 1};
            for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; ++k)
                for (int layout = ROW_MAJOR; layout <= IN_PLACE; ++layout) {
                    if (!qr2_config_holds(c, shapes[k][1], shapes[k][2], &dev)) continue;
                    run_one(c, shapes[k][0], shapes[k][1], shapes[k][2], layout, &dev);
                    ++checked;
                }
        }
    }
    printf("%ld schedules checked, %ld violations\n", checked, violations);
    return violations != 0;
}
