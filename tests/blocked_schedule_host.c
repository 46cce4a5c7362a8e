/*
 * blocked_schedule_host.c - c_api/blocked.c's schedules run on the host, every CUDA entry point they call replaced by
 * a check of its pointer arguments (built and run by tests/test_blocked_schedule.py; no GPU needed).
 *
 * For each configuration named on the command line, over shapes, batches, layouts and two SM counts: every V, T,
 * scratch and flag pointer a kernel would get lies inside the workspace the schedule asked for, every output
 * inside H and tau, every input inside A; the side streams forked are joined before the call returns, and a kernel
 * is queued only on the caller's stream or a side stream forked from it and not yet joined. And no two kernels that
 * the streams leave unordered (one on a side stream between a fork and its join, the other on the stream it was
 * forked from) touch the same bytes where one of them writes: each kernel's reads and writes are recorded as the
 * batched strided blocks it is given (a matrix's columns of its rows), the streams' order as vector clocks. Each
 * schedule runs twice: with side streams, and with forks that hand out none (a side stream held by another graph
 * capture), where the caller's stream does all. The kernels' own workspace rules are stood in for by monotone bounds
 * (the split region below), so what is checked is blocked.c's carving of its workspace and ordering of its streams,
 * not the kernels' use of their share.
 *
 *     blocked_schedule_host [--drop-joins] NAME...   (exit status 0: no violation; the violations are printed)
 *     blocked_schedule_host --check-overlap          (overlap() against a byte-by-byte count)
 *
 * --drop-joins: joins order nothing (a schedule that forks must then show races: the race check's own test).
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
static int no_sides;      /* forks hand out no side stream */
static int drop_joins;    /* --drop-joins */
static long violations, races;
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

/* ---- the streams' order and the kernels' accesses ---- */

/* Streams: the caller's, then the two side streams (QR2_SIDE_PLAIN, QR2_SIDE_URGENT). Vector clocks: kernel A is
 * ordered before kernel B when B's clock has seen A's tick on A's stream. */
enum { STREAMS = 3 };
typedef struct vclock {
    long tick[STREAMS];
} vclock;
static vclock stream_clock[STREAMS];

/* One access, a region read or written: for each of `batch` matrices (`bs` elements apart) and each of its `cols`
 * columns (`ld` apart), `rows` consecutive elements of `size` bytes from `base`. */
typedef struct region {
    const char* base;
    int64_t batch, bs, cols, ld, rows;
    int size, write;
    const char* what;
} region;

typedef struct kernel {
    const char* what;
    int stream;
    vclock at;
    int first, count; /* its accesses */
} kernel;

static kernel* kernels;
static region* accesses;
static int nkernels, naccesses, kernels_cap, accesses_cap;
static int recording; /* the kernel begun last is on a known stream: its accesses are recorded */

static void* grow(void* p, int* cap, size_t size) {
    *cap = *cap ? 2 * *cap : 256;
    void* q = realloc(p, (size_t)*cap * size);
    if (!q) {
        printf("out of memory\n");
        exit(3);
    }
    return q;
}

static int stream_index(void* stream) {
    if (stream == main_stream) return 0;
    if (stream == (void*)&sides_open[QR2_SIDE_PLAIN]) return 1 + QR2_SIDE_PLAIN;
    if (stream == (void*)&sides_open[QR2_SIDE_URGENT]) return 1 + QR2_SIDE_URGENT;
    return -1;
}

static void on_stream(void* stream, const char* what) {
    const int i = stream_index(stream);
    if (i < 0 || (i > 0 && sides_open[i - 1] == 0)) fail("%s queued on a stream not forked", what);
}

/* A kernel queued on `stream`: the accesses recorded next are its own. */
static void begin_kernel(void* stream, const char* what) {
    on_stream(stream, what);
    const int i = stream_index(stream);
    recording = i >= 0;
    if (!recording) return;
    if (nkernels == kernels_cap) kernels = grow(kernels, &kernels_cap, sizeof *kernels);
    ++stream_clock[i].tick[i];
    kernels[nkernels++] = (kernel){what, i, stream_clock[i], naccesses, 0};
}

static void record(const region* a) {
    if (!recording) return;
    if (naccesses == accesses_cap) accesses = grow(accesses, &accesses_cap, sizeof *accesses);
    accesses[naccesses++] = *a;
    ++kernels[nkernels - 1].count;
}

/* `to` waits for everything queued on `from` so far. */
static void wait_for(int to, int from) {
    for (int k = 0; k < STREAMS; ++k)
        if (stream_clock[from].tick[k] > stream_clock[to].tick[k])
            stream_clock[to].tick[k] = stream_clock[from].tick[k];
}

static int ordered(const kernel* a, const kernel* b) {
    return a->at.tick[a->stream] <= b->at.tick[a->stream] || b->at.tick[b->stream] <= a->at.tick[b->stream];
}

static int64_t floor_div(int64_t a, int64_t b) { return a / b - (a % b != 0 && (a < 0) != (b < 0)); }

/* Whether y touches a byte of [lo, hi): the matrices whose span meets it, then their columns that do. */
static int meets(const region* y, const char* lo, const char* hi) {
    const int64_t col = y->ld * y->size, len = y->rows * y->size, span = (y->cols - 1) * col + len,
                  step = y->bs * y->size;
    const int64_t from = lo - y->base, to = hi - y->base; /* [from, to) relative to y's first byte */
    int64_t b0 = 0, b1 = y->batch - 1;
    if (y->batch > 1 && step > 0) {
        b0 = floor_div(from - span, step) + 1, b1 = floor_div(to - 1, step);
        if (b0 < 0) b0 = 0;
        if (b1 > y->batch - 1) b1 = y->batch - 1;
    }
    for (int64_t b = b0; b <= b1; ++b) {
        const int64_t at = b * step; /* matrix b's first byte */
        if (y->cols == 1 || col <= 0) {
            if (at < to && at + span > from) return 1;
            continue;
        }
        int64_t c0 = floor_div(from - at - len, col) + 1, c1 = floor_div(to - 1 - at, col);
        if (c0 < 0) c0 = 0;
        if (c1 > y->cols - 1) c1 = y->cols - 1;
        if (c0 <= c1) return 1;
    }
    return 0;
}

/* Whether accesses x and y share a byte, x's blocks walked one by one. */
static int overlap(const region* x, const region* y) {
    for (int64_t b = 0; b < x->batch; ++b)
        for (int64_t c = 0; c < x->cols; ++c) {
            const char* lo = x->base + (b * x->bs + c * x->ld) * x->size;
            if (meets(y, lo, lo + x->rows * x->size)) return 1;
        }
    return 0;
}

/* --check-overlap: overlap() against a byte-by-byte count on random small accesses (its own test). */
static int check_overlap(void) {
    static char arena[4096], mark[4096];
    long wrong = 0;
    srand(1);
    for (int trial = 0; trial < 200000; ++trial) {
        region xy[2];
        for (int k = 0; k < 2; ++k) {
            region* a = &xy[k];
            a->size = 1 + 3 * (rand() % 2), a->batch = 1 + rand() % 4, a->cols = 1 + rand() % 5,
            a->rows = 1 + rand() % 9, a->ld = rand() % 12, a->bs = rand() % 60;
            a->base = arena + rand() % 512 * 4;
        }
        memset(mark, 0, sizeof mark);
        int shared = 0;
        for (int k = 0; k < 2; ++k)
            for (int64_t b = 0; b < xy[k].batch; ++b)
                for (int64_t c = 0; c < xy[k].cols; ++c)
                    for (int64_t r = 0; r < xy[k].rows * xy[k].size; ++r) {
                        const int64_t at = xy[k].base - arena + (b * xy[k].bs + c * xy[k].ld) * xy[k].size + r;
                        if (k == 0) mark[at] = 1;
                        else shared |= mark[at];
                    }
        if (overlap(&xy[0], &xy[1]) != shared || overlap(&xy[1], &xy[0]) != shared) ++wrong;
    }
    printf("%ld wrong\n", wrong);
    return wrong != 0;
}

static void region_bounds(const region* a, const char** lo, const char** hi) {
    *lo = a->base;
    *hi = a->base + ((a->batch - 1) * a->bs + (a->cols - 1) * a->ld + a->rows) * a->size;
}

/* Every pair of kernels the streams leave unordered: no byte written by one and touched by the other. */
static void check_races(void) {
    for (int i = 0; i < nkernels; ++i)
        for (int j = i + 1; j < nkernels; ++j) {
            const kernel *a = &kernels[i], *b = &kernels[j];
            if (a->stream == b->stream || ordered(a, b)) continue;
            for (int x = a->first; x < a->first + a->count; ++x)
                for (int y = b->first; y < b->first + b->count; ++y) {
                    const region *p = &accesses[x], *q = &accesses[y];
                    const char *plo, *phi, *qlo, *qhi;
                    region_bounds(p, &plo, &phi), region_bounds(q, &qlo, &qhi);
                    if (!(p->write || q->write) || plo >= qhi || qlo >= phi) continue;
                    if (p->cols * p->batch <= q->cols * q->batch ? overlap(p, q) : overlap(q, p)) {
                        ++races;
                        fail("race: %s (%s, stream %d) and %s (%s, stream %d), unordered", a->what, p->what,
                             a->stream, b->what, q->what, b->stream);
                    }
                }
        }
}

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

enum { READ = 0, WRITE = 1 };

/* A kernel's access to buffer b (in the workspace with a role): checked to lie inside it, and recorded. */
static void touch_as(const buffer* b, const char* role, const void* p, int64_t batch, int64_t bs, int64_t cols,
                     int64_t ld, int64_t rows, size_t size, int write, const char* what) {
    if (batch <= 0 || cols <= 0 || rows <= 0) return; /* nothing */
    inside_as(b, role, p, (batch - 1) * bs + (cols - 1) * ld + rows, size, what);
    if (p) record(&(region){p, batch, bs, cols, ld, rows, (int)size, write, what});
}
static void touch(const buffer* b, const void* p, int64_t batch, int64_t bs, int64_t cols, int64_t ld, int64_t rows,
                  size_t size, int write, const char* what) {
    touch_as(b, 0, p, batch, bs, cols, ld, rows, size, write, what);
}
/* the same, `count` elements a matrix */
static void touch_flat(const buffer* b, const char* role, const void* p, int64_t batch, int64_t bs, int64_t count,
                       size_t size, int write, const char* what) {
    touch_as(b, role, p, batch, bs, 1, 0, count, size, write, what);
}

static const char V[] = "V", T[] = "T", SCRATCH[] = "scratch", FLAGS[] = "flags", ZERO_FROM[] = "zero_from",
                  TALL[] = "tall-panel work";

/* ---- stand-ins for the CUDA side ---- */

int qr2_panel_registers_holds(int64_t m, int64_t w, const qr2_device* dev) { return (void)dev, m <= 512 && w <= 32; }
int qr2_panel_cluster_holds(int64_t m, int64_t w, const qr2_device* dev) {
    return m <= 8192 && w <= 32 && (m <= 512 || dev->clusters);
}
int qr2_panel_cholqr_holds(int64_t m, int64_t w, const qr2_device* dev) {
    return w == 32 && m >= 64 && m <= 4096 && dev->clusters;
}
int qr2_panel_cholqr_applies_previous(int64_t m, int64_t w, const qr2_device* dev) {
    return qr2_panel_cholqr_holds(m, w, dev);
}
int64_t qr2_panel_tall_work_floats(int64_t m, int64_t batch, const qr2_device* dev) {
    return (void)m, (void)dev, batch * 2 * 257 * 33 * 2;
}
/* the tall panel's resident form, which builds T: where the batch's rows fit in the SMs' shared memory, about */
int qr2_panel_tall_builds_t(const qr2_panel_job* j, const qr2_device* dev) {
    return j->t && j->batch * (int64_t)j->m <= 1727 * (int64_t)dev->sms;
}
int qr2_panel_cholqr_grid_holds(int64_t m, int64_t w, const qr2_device* dev) { return (void)dev, w == 32 && m > 8192; }
int64_t qr2_panel_cholqr_grid_work_floats(int64_t m, int64_t batch, const qr2_device* dev) {
    return (void)dev, batch * ((m + 255) / 256 * 2049 + 2048 + 6980) + 16;
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

/* A panel kernel: its columns of H and its tau written, its V (from row 0 of the outer panel's) and T written; the
 * flags read and written, zero_from read. */
static void panel_job(const qr2_panel_job* j, void* stream, const char* what) {
    begin_kernel(stream, what);
    touch(&h_buf, j->h, j->batch, j->h_bs, j->w, j->ldh, j->m, sizeof(float), WRITE, what);
    touch(&tau_buf, j->tau, j->batch, j->tau_bs, 1, 0, j->w, sizeof(float), WRITE, what);
    touch_as(&ws, V, j->v, j->batch, j->v_bs, j->w, j->ldv, j->v_row0 + j->m, sizeof(float), WRITE, what);
    if (j->t) touch_flat(&ws, T, j->t, j->batch, j->t_bs, (int64_t)j->w * j->w, sizeof(float), WRITE, what);
    if (j->done) touch_flat(&ws, FLAGS, j->done, 1, 0, j->batch, sizeof(int), WRITE, what);
    if (j->zero_from) touch_flat(&ws, ZERO_FROM, j->zero_from, 1, 0, j->batch, sizeof(int), READ, what);
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
    touch_flat(&ws, FLAGS, done, 1, 0, j->batch, sizeof(int), WRITE, "cholqr panel's flags");
    if (j->prev_v) { /* the previous panel's V and T read; its columns' W rows above the panel written */
        const char* what = "cholqr panel's previous reflectors";
        /* within one kernel the race check sees nothing: the V and T it reads must not be the ones it writes */
        const region pv = {(const char*)j->prev_v, j->batch, j->prev_v_bs, j->w, j->prev_ldv, 32 + j->m,
                           sizeof(float), READ, what};
        const region v = {(const char*)j->v, j->batch, j->v_bs, j->w, j->ldv, j->v_row0 + j->m, sizeof(float), WRITE,
                          what};
        const region pt = {(const char*)j->prev_t, j->batch, j->prev_t_bs, 1, 0, 32 * 32, sizeof(float), READ, what};
        const region t = {(const char*)j->t, j->batch, j->t_bs, 1, 0, (int64_t)j->w * j->w, sizeof(float), WRITE, what};
        if (overlap(&pv, &v) || overlap(&v, &pv)) fail("%s: the previous V overlaps the V it writes", what);
        if (j->t && (overlap(&pt, &t) || overlap(&t, &pt))) fail("%s: the previous T overlaps the T it writes", what);
        touch_as(&ws, V, j->prev_v, j->batch, j->prev_v_bs, j->w, j->prev_ldv, 32 + j->m, sizeof(float), READ, what);
        touch_flat(&ws, T, j->prev_t, j->batch, j->prev_t_bs, 32 * 32, sizeof(float), READ, what);
        touch(&h_buf, j->h - 32, j->batch, j->h_bs, j->w, j->ldh, 32, sizeof(float), WRITE, what);
    }
    return 0;
}
int qr2_panel_cholqr_grid_run(const qr2_panel_job* j, int* done, void* work, const qr2_device* dev, void* stream) {
    panel_job(j, stream, "grid cholqr panel");
    touch_flat(&ws, FLAGS, done, 1, 0, j->batch, sizeof(int), WRITE, "grid cholqr panel's flags");
    touch_flat(&ws, TALL, work, 1, 0, qr2_panel_cholqr_grid_work_floats(j->m, j->batch, dev), sizeof(float), WRITE,
               "grid cholqr panel's work");
    return 0;
}
int qr2_panel_tall_run(const qr2_panel_job* j, void* work, const qr2_device* dev, void* stream) {
    panel_job(j, stream, "tall panel");
    touch_flat(&ws, TALL, work, 1, 0, qr2_panel_tall_work_floats(j->m, j->batch, dev), sizeof(float), WRITE,
               "tall panel's partials");
    return 0;
}

int qr2_update_run(const qr2_update_args* a, void* blas, const qr2_device* dev, void* stream) {
    (void)blas;
    begin_kernel(stream, "update");
    touch_as(&ws, V, a->v, a->batch, a->v_bs, a->w, a->ldv, a->mr, sizeof(float), READ, "update's V");
    touch(&tau_buf, a->tau, a->batch, a->tau_bs, 1, 0, a->w, sizeof(float), READ, "update's tau");
    if (a->t) touch_flat(&ws, T, a->t, a->batch, a->t_bs, (int64_t)a->w * a->w, sizeof(float), READ, "update's T");
    touch_flat(&ws, SCRATCH, a->work, 1, 0, a->batch * a->work_bs + qr2_update_split_floats(a->mr, a->nc, a->w,
               a->batch, dev), sizeof(float), WRITE, "update's scratch");
    touch(&h_buf, a->c, a->batch, a->c_bs, a->nc, a->ldc, a->mr, sizeof(float), WRITE, "update's C");
    if (a->c_from) /* row-major: a matrix's rows are the blocks */
        touch(&a_buf, a->c_from, a->batch, a->from_bs, a->mr, a->from_rs, a->nc, sizeof(float), READ,
              "update's source");
    if (a->zero_from) touch_flat(&ws, ZERO_FROM, a->zero_from, 1, 0, a->batch, sizeof(int), READ, "update's zero_from");
    return 0;
}

int qr2_update_merge_t(int64_t batch, int mr, int w1, int w2, const float* v, int64_t ldv, int64_t v_bs,
                       const float* t1, const float* t2, int64_t t_bs, float* t, int64_t out_bs, float* work,
                       const qr2_device* dev, void* stream) {
    begin_kernel(stream, "merge_t");
    touch_as(&ws, V, v, batch, v_bs, w1 + w2, ldv, mr, sizeof(float), READ, "merge_t's V");
    touch_flat(&ws, T, t1, batch, t_bs, (int64_t)w1 * w1, sizeof(float), READ, "merge_t's T1");
    touch_flat(&ws, T, t2, batch, t_bs, (int64_t)w2 * w2, sizeof(float), READ, "merge_t's T2");
    touch_flat(&ws, T, t, batch, out_bs, (int64_t)(w1 + w2) * (w1 + w2), sizeof(float), WRITE, "merge_t's T");
    if (batch < dev->sms && mr - w1 > 256)
        touch_flat(&ws, SCRATCH, work, 1, 0, batch * 16 * 1024, sizeof(float), WRITE, "merge_t's partials");
    return 0;
}

/* The whole input read, as a flat range a matrix (any strides). */
static void read_input(const float* a, int64_t rs, int64_t cs, int64_t bs, int m, int n, int64_t batch,
                       const char* what) {
    touch(&a_buf, a, batch, bs, 1, 0, (int64_t)(m - 1) * rs + (int64_t)(n - 1) * cs + 1, sizeof(float), READ, what);
}

int qr2_transpose_run(const float* src, int64_t rs, int64_t cs, int64_t bs, float* dst, int64_t ldd, int64_t dst_bs,
                      int m, int n, int64_t batch, void* stream) {
    begin_kernel(stream, "transpose");
    read_input(src, rs, cs, bs, m, n, batch, "transpose's source");
    touch(&h_buf, dst, batch, dst_bs, n, ldd, m, sizeof(float), WRITE, "transpose's output");
    return 0;
}

int qr2_zero_tail_run(const float* a, int64_t rs, int64_t cs, int64_t bs, int m, int n, int64_t batch,
                      int* zero_from, void* stream) {
    begin_kernel(stream, "zero_tail");
    read_input(a, rs, cs, bs, m, n, batch, "zero_tail's input");
    touch_flat(&ws, ZERO_FROM, zero_from, 1, 0, batch, sizeof(int), WRITE, "zero_from");
    return 0;
}

int qr2_side_fork(void* stream, int device, int urgent, void** side) {
    (void)device;
    on_stream(stream, "fork");
    *side = 0;
    if (no_sides) return 0;
    ++sides_open[urgent];
    *side = &sides_open[urgent];
    if (stream_index(stream) >= 0) wait_for(1 + urgent, stream_index(stream));
    return 0;
}

int qr2_side_join(void* stream, int device, int urgent) {
    (void)device;
    on_stream(stream, "join");
    if (sides_open[urgent]-- <= 0) fail("a join without a fork");
    if (!drop_joins && stream_index(stream) >= 0) wait_for(stream_index(stream), 1 + urgent);
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

static long forks; /* schedules that forked a side stream */

static void run_one(const qr2_config* c, int64_t batch, int m, int n, int layout, const qr2_device* dev) {
    snprintf(shape, sizeof shape, "%s %lldx%dx%d layout %d, %d SMs%s", c->name, (long long)batch, m, n, layout,
             dev->sms, no_sides ? ", no side streams" : "");
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
    nseen = nkernels = naccesses = recording = 0;
    memset(stream_clock, 0, sizeof stream_clock);
    if (h && a && tau && work) {
        if (qr2_blocked_run(c, &p, work)) fail("the schedule failed");
        if (sides_open[0] || sides_open[1]) fail("a side stream left forked");
        /* what the caller's stream may do once the call returns: read or overwrite the outputs and the input, and
         * give the workspace back to torch's allocator for the next kernel on that stream */
        begin_kernel(main_stream, "the caller's next kernel");
        touch_flat(&h_buf, 0, h, 1, 0, entries, sizeof(float), WRITE, "H after the call");
        touch_flat(&tau_buf, 0, tau, 1, 0, batch * kmin, sizeof(float), WRITE, "tau after the call");
        touch_flat(&a_buf, 0, a, 1, 0, entries, sizeof(float), WRITE, "A after the call");
        touch_flat(&ws, 0, work, 1, 0, floats, sizeof(float), WRITE, "the workspace after the call");
        int forked = 0;
        for (int k = 0; k < nkernels; ++k) forked |= kernels[k].stream != 0;
        forks += forked;
        check_races();
    }
    if (a != h) free(a);
    free(h), free(tau), free(work);
}

int main(int argc, char** argv) {
    static const int shapes[][3] = {{1, 300, 300},  {2, 513, 513},  {3, 700, 700},  {2, 1024, 1024}, {60, 1024, 1024},
                                    {2, 1100, 400}, {1, 4100, 130}, {1, 9000, 70},  {300, 200, 200}, {140, 512, 512},
                                    {40, 352, 352}, {8, 2048, 2048}, {2, 300, 777}, {5, 1030, 1030}, {67, 290, 200},
                                    {1, 20000, 100}, {2, 9000, 300}};
    if (argc > 1 && !strcmp(argv[1], "--check-overlap")) return check_overlap();
    main_stream = &main_stream;
    long checked = 0;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--drop-joins")) {
            drop_joins = 1;
            continue;
        }
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
                    for (no_sides = 0; no_sides < 2; ++no_sides, ++checked)
                        run_one(c, shapes[k][0], shapes[k][1], shapes[k][2], layout, &dev);
                }
        }
    }
    printf("%ld schedules checked, %ld with side streams, %ld races, %ld violations\n", checked, forks, races,
           violations);
    free(kernels), free(accesses);
    return violations != 0;
}
