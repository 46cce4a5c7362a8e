/*
 * blocked.c - the blocked family's schedule: blocked Householder QR with compact-WY updates.
 *
 * For each outer panel of nb columns: factor it (a panel of up to leaf_nb columns is one panel kernel; a wider one is
 * split in two with an update between the halves), then apply its reflectors to the columns right of it:
 * C -= V (T^T (V^T C)). The panel kernel is the first kind that holds the panel's height: registers (up to 512
 * rows, measured 2x faster than the cluster panel there at batch 1), cluster (while one cluster of up to 8 blocks
 * holds the rows) and tall (many blocks a matrix, any height). Configurations with `cholqr` first run the CholeskyQR
 * panel on 32-column panels it holds that are taller than the registers kind holds (below that height the registers
 * panel measured faster: docs/tuning.md); the cluster or tall kind then factors only the matrices whose guard failed.
 * Kernels launched without clusters are programmatic dependent launches that first wait for the kernel before them
 * (2x4096 2 % faster; with clusters it lost: docs/results/2026-12-03-h200-pdl.txt). Each matrix's exactly zero
 * trailing columns are found first (qr2_zero_tail_run); the register panels and the updates leave them alone.
 * Large batches run as two halves, one panel apart, the second on a side stream (qr2_blocked_halves).
 */
#include "configs.h"

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

int qr2_blocked_holds(const qr2_config* c, int64_t m, int64_t n, const qr2_device* dev) {
    (void)c, (void)m, (void)n, (void)dev;
    return 1; /* any shape */
}

/* The tall panel's partial sums and counters (doubles first, first in the workspace), when some panel is taller than
 * a cluster holds. */
static int64_t tall_panel_floats(const qr2_problem* p) {
    if (qr2_panel_cluster_holds(p->m, 1, p->dev)) return 0;
    return qr2_panel_tall_work_floats(p->m, p->batch, p->dev);
}

/* The widest outer panel: nb columns, or all min(m, n) reflectors when there are fewer (a 2 x 10^7 matrix must not
 * ask for 32 columns of workspace per row). */
static int outer_panel_width(const qr2_config* c, const qr2_problem* p) {
    const int kmin = p->m < p->n ? p->m : p->n;
    return kmin < c->nb ? kmin : c->nb;
}

/* Per matrix, the T factors: one for each half of a split panel (QR2_PANEL_MAX_W square each) and the two merged;
 * one half's worth where outer panels are single panels. */
#define T_HALF_FLOATS (QR2_PANEL_MAX_W * QR2_PANEL_MAX_W)
static int64_t t_floats(const qr2_config* c) { return c->nb > c->leaf_nb ? 6 * T_HALF_FLOATS : T_HALF_FLOATS; }

static int64_t schedule_workspace_floats(const qr2_config* c, const qr2_problem* p) {
    /* per matrix: explicit V of one outer panel (m x its width), the T factors, the update's scratch; after the
     * split update's regions, one int a matrix each for the CholeskyQR panels' flags and for zero_from */
    const int w = outer_panel_width(c, p);
    return tall_panel_floats(p) + p->batch * ((int64_t)p->m * w + t_floats(c) + qr2_update_work_floats(w, p->n)) +
           qr2_update_split_floats(p->m, p->n, w, p->batch, p->dev) + (c->cholqr ? p->batch : 0) + p->batch;
}

/* A large batch runs as two halves, the second on a side stream one panel behind the first, so that one half's panels
 * (latency-bound chains) run beside the other half's updates (bound by memory). Each half needs enough update work
 * to fill the GPU beside the other's panels, counted in 64-column strips (ceil(n / 64) a matrix, about what the first
 * update covers): 4 waves of SMs where the register panel holds the rows, 2 beyond (H200,
 * docs/results/2026-12-04-h200-batch-halves-rule.txt: 160 x 512 -18 %, 640 x 512 -5 %, 60 x 1024 0 to -6 %; halves
 * below it lost: 120 x 352 (2.7 waves) +6 %, 30 x 1024 (1.8) +5 %; 16 x 2048, which won at 1.9 waves, stays whole).
 * Three or four parts lost to two on every shape measured, and halves of one matrix lost (2 x 4096 +2 %). Matrices
 * of fewer than HALVES_MIN_COLUMNS reflectors (four panels; wide or thin shapes, not measured) have little panel time
 * to hide. Panels taller than a cluster holds (the tall panel) are not measured this way either,
 * and halves whose updates might call cuBLAS (its handle is bound to the caller's stream) would fail: all these stay
 * whole. */
#define HALVES_MIN_COLUMNS 128

int qr2_blocked_halves(int64_t m, int64_t n, int64_t batch, const qr2_device* dev) {
    const int64_t half = batch / 2, kmin = m < n ? m : n;
    if (half < 2 || kmin < HALVES_MIN_COLUMNS || dev->sms <= 0 || !qr2_panel_cluster_holds(m, 1, dev) ||
        qr2_update_may_use_blas(m, half, dev))
        return 0;
    const int64_t strips = (n - 1) / 64 + 1, waves = qr2_panel_registers_holds(m, 1, dev) ? 4 : 2;
    return half >= (waves * dev->sms + strips - 1) / strips; /* half * strips >= waves * SMs, without overflow */
}

/* Sizing passes no pointers (NULL a, h, tau). */
static int split_in_halves(const qr2_problem* p, qr2_problem half[2]) {
    if (!qr2_blocked_halves(p->m, p->n, p->batch, p->dev)) return 0;
    const int64_t first = p->batch / 2, kmin = p->m < p->n ? p->m : p->n;
    half[0] = *p, half[1] = *p;
    half[0].batch = first, half[1].batch = p->batch - first;
    if (p->a) half[1].a = p->a + first * p->a_bs;
    if (p->h) half[1].h = p->h + first * (int64_t)p->m * p->n;
    if (p->tau) half[1].tau = p->tau + first * kmin;
    half[1].blas_handle = 0; /* never called (above); an update that would call cuBLAS fails instead */
    return 1;
}

/* The first half's workspace, rounded up to 256 bytes: the second half's starts aligned as the whole one's does. */
static int64_t first_half_floats(const qr2_config* c, const qr2_problem* half) {
    return (schedule_workspace_floats(c, half) + 63) / 64 * 64;
}

int64_t qr2_blocked_workspace_floats(const qr2_config* c, const qr2_problem* p) {
    qr2_problem half[2];
    if (split_in_halves(p, half)) return first_half_floats(c, &half[0]) + schedule_workspace_floats(c, &half[1]);
    return schedule_workspace_floats(c, p);
}

/* The second half of a split batch and where it went. */
typedef struct behind_half {
    const qr2_problem* p;
    float* work;
    int started; /* queued, on the side stream or (while that belongs to another capture) on the first's stream */
    int on_side; /* on the side stream: the first half's stream must join it */
} behind_half;

typedef struct schedule {
    const qr2_config* config;
    const qr2_problem* p;
    void* blas;   /* torch's cuBLAS handle for the stream */
    int k_outer;  /* first column of the current outer panel */
    float* v;     /* explicit reflectors of the outer panel: (m - k_outer) x its width, ld m - k_outer */
    int64_t v_bs;
    float* t;     /* T factors, t_bs apart: the left half's, the right half's, their merge (each ld its width) */
    int64_t t_bs;
    float* wy;    /* the update's scratch */
    int64_t wy_bs;
    void* tall;   /* the tall panel's partials (NULL: no panel needs them) */
    int* done;    /* CholeskyQR panels: per matrix, whether the last one factored it (NULL: not this configuration) */
    int* zero_from; /* per matrix, where its exactly zero trailing columns start (qr2_zero_tail_run) */
    behind_half* behind; /* the second half of a split batch, started after this schedule's first panel */
} schedule;

static int ldv_of(const schedule* s) { return s->p->m - s->k_outer; }

/* Applies the reflectors of columns [k0, k0 + w) (outer-panel column jo) to columns [k0 + w, k0 + w + nc);
 * t: their T factor (ld w, s->t_bs apart) when the panel kernels built it (NULL: built here from V); from_a: whether
 * those columns are still only in A (the first update, see qr2_blocked_run). */
static int apply_reflectors(const schedule* s, int k0, int jo, int w, int nc, const float* t, int from_a) {
    const qr2_problem* p = s->p;
    const int kmin = p->m < p->n ? p->m : p->n;
    const int ldv = ldv_of(s);
    const qr2_update_args a = {
        .batch = p->batch, .mr = p->m - k0, .w = w, .nc = nc,
        .v = s->v + (int64_t)jo * ldv + jo, .ldv = ldv, .v_bs = s->v_bs,
        .tau = p->tau + k0, .tau_bs = kmin,
        .t = t, .t_bs = s->t_bs,
        .c = p->h + (int64_t)(k0 + w) * p->m + k0, .ldc = p->m, .c_bs = (int64_t)p->m * p->n,
        .work = s->wy, .work_bs = s->wy_bs,
        .c_from = from_a ? p->a + k0 + w : 0, .from_rs = p->a_rs, .from_bs = p->a_bs,
        .zero_from = s->zero_from, .col0 = k0 + w,
    };
    return qr2_update_run(&a, s->blas, p->dev, p->stream);
}

static int split_width(int w) {
    int half = w / 2;
    if (w > 16) half = (half + 7) / 8 * 8; /* keep GEMM operands 32-byte aligned in width */
    return half < w ? half : w - 1;
}

/* Factors columns [k0, k0 + w) of rows [k0, m); *t: their T factor (ld w) when the kernels built it, else NULL.
 * half: which of the two half slots of s->t a panel kernel writes its T into; want_t: whether an update follows. */
static int factor_panel(const schedule* s, int k0, int jo, int w, int half, int want_t, const float** t) {
    const qr2_problem* p = s->p;
    const int mr = p->m - k0;
    const int kmin = p->m < p->n ? p->m : p->n;
    float* t_leaf = s->t + half * T_HALF_FLOATS;
    *t = 0;
    if (w <= s->config->leaf_nb) {
        qr2_panel_job job = {
            .batch = p->batch, .m = mr, .w = w,
            .h = p->h + (int64_t)k0 * p->m + k0, .ldh = p->m, .h_bs = (int64_t)p->m * p->n,
            .tau = p->tau + k0, .tau_bs = kmin,
            .v = s->v + (int64_t)jo * ldv_of(s), .ldv = ldv_of(s), .v_bs = s->v_bs, .v_row0 = jo,
            .t = t_leaf, .t_bs = s->t_bs,
            .zero_from = s->zero_from, .col0 = k0,
        };
        const int registers = qr2_panel_registers_holds(mr, w, p->dev);
        if (s->done && !registers && qr2_panel_cholqr_holds(mr, w, p->dev)) {
            /* the matrices it leaves (done[b] == 0) take the Householder kind below */
            if (qr2_panel_cholqr_run(&job, s->done, p->dev, p->stream)) return 1;
            job.done = s->done;
        }
        if (registers) {
            *t = t_leaf;
            return qr2_panel_registers_run(&job, 0, p->dev, p->stream);
        }
        if (qr2_panel_cluster_holds(mr, w, p->dev)) {
            *t = t_leaf;
            return qr2_panel_cluster_run(&job, 0, p->dev, p->stream);
        }
        if (qr2_panel_tall_builds_t(&job, p->dev)) *t = t_leaf; /* its resident form, one launch a panel */
        return qr2_panel_tall_run(&job, s->tall, p->dev, p->stream);
    }
    const int w1 = split_width(w), w2 = w - w1;
    const float *left = 0, *right = 0;
    if (factor_panel(s, k0, jo, w1, 0, 1, &left)) return 1;
    if (apply_reflectors(s, k0, jo, w1, w2, left, 0)) return 1;
    if (factor_panel(s, k0 + w1, jo + w1, w2, 1, want_t, &right)) return 1;
    /* Both halves single panel kernels that built their T (so the right one left the left one's slot alone): T from
     * theirs, T12 = -T1 V1^T V2 T2, instead of from V's Gram matrix in the update. The merge walks a matrix's rows on
     * one block: a few tall matrices keep cuBLAS's Gram GEMM, which splits the rows (a guess, not yet measured). */
    if (!want_t || !left || !right || w1 > s->config->leaf_nb || w2 > s->config->leaf_nb) return 0;
    if (mr > 1024 && p->batch < p->dev->sms) return 0;
    const int ldv = ldv_of(s);
    float* merged = s->t + 2 * T_HALF_FLOATS;
    if (qr2_update_merge_t(p->batch, mr, w1, w2, s->v + (int64_t)jo * ldv + jo, ldv, s->v_bs, left, right, s->t_bs,
                           merged, s->t_bs, p->stream))
        return 1;
    *t = merged;
    return 0;
}

static int run_schedule(const qr2_config* c, const qr2_problem* p, float* work, behind_half* behind);

/* Queues the whole schedule of s->behind, once, on the calling thread's side stream after what s's stream holds so
 * far (on s's stream itself while the side stream belongs to another graph capture). */
static int start_behind(const schedule* s) {
    behind_half* b = s->behind;
    qr2_problem rest = *b->p;
    void* side = 0;
    b->started = 1;
    if (qr2_side_fork(s->p->stream, s->p->dev->index, &side)) return 1;
    if (side) rest.stream = side, b->on_side = 1;
    return run_schedule(s->config, &rest, b->work, 0);
}

static int run_schedule(const qr2_config* c, const qr2_problem* p, float* work, behind_half* behind) {
    schedule s = {.config = c, .p = p, .behind = behind};
    if (p->blas_handle && p->blas_handle(&s.blas))
        return qr2_cuda_fail("torch_get_current_cuda_blas_handle", "torch logged the reason");
    const int width = outer_panel_width(c, p); /* every panel below is at most this wide */
    /* A row-major input: only the first outer panel's columns are copied into H here; the first update reads the
     * rest from A and writes them into H, one pass over the matrices fewer (640 x 512 x 512: the whole transpose took
     * 0.32 ms of 5.0). */
    const int first_from_a = p->a != p->h && p->a_cs == 1 && p->a_rs != 1 && width < p->n;
    if (p->a != p->h && qr2_transpose_run(p->a, p->a_rs, p->a_cs, p->a_bs, p->h, p->m, (int64_t)p->m * p->n, p->m,
                                          first_from_a ? width : p->n, p->batch, p->stream))
        return 1;
    const int64_t tall = tall_panel_floats(p);
    s.tall = tall > 0 ? work : 0;
    s.v = work + tall;
    s.v_bs = (int64_t)p->m * width;
    s.t = s.v + p->batch * s.v_bs;
    s.t_bs = t_floats(c);
    s.wy = s.t + p->batch * s.t_bs;
    s.wy_bs = qr2_update_work_floats(width, p->n);
    int* flags = (int*)(s.wy + p->batch * s.wy_bs + qr2_update_split_floats(p->m, p->n, width, p->batch, p->dev));
    if (c->cholqr) s.done = flags, flags += p->batch;
    s.zero_from = flags;
    /* Exactly zero trailing columns (rank-deficient inputs) stay zero: the panels and updates leave them alone
     * (640 x 512 rankdef 4.91 -> 3.92 ms: docs/results/2026-12-04-h200-zero-tails.txt; what the search costs dense
     * inputs: docs/results/2026-12-04-h200-zero-tail-scan.txt) */
    if (qr2_zero_tail_run(p->a, p->a_rs, p->a_cs, p->a_bs, p->m, p->n, p->batch, s.zero_from, p->stream)) return 1;
    const int kmin = p->m < p->n ? p->m : p->n;
    for (int k = 0; k < kmin; k += c->nb) {
        const int w = (int)min64(c->nb, kmin - k);
        const float* t = 0;
        s.k_outer = k;
        if (factor_panel(&s, k, 0, w, 0, k + w < p->n, &t)) return 1;
        if (k == 0 && behind && start_behind(&s)) return 1;
        if (k + w < p->n && apply_reflectors(&s, k, 0, w, p->n - k - w, t, k == 0 && first_from_a)) return 1;
    }
    return behind && !behind->started ? start_behind(&s) : 0; /* no panel at all */
}

int qr2_blocked_run(const qr2_config* c, const qr2_problem* p, float* work) {
    qr2_problem half[2];
    if (!split_in_halves(p, half)) return run_schedule(c, p, work, 0);
    /* the second half starts on the side stream once the first half's first panel is queued; the caller's stream
     * then waits for it, also after a failure (a capture must not end with the side stream still forked) */
    behind_half second = {.p = &half[1], .work = work + first_half_floats(c, &half[0])};
    const int failed = run_schedule(c, &half[0], work, &second);
    return (second.on_side && qr2_side_join(p->stream, p->dev->index)) || failed;
}
