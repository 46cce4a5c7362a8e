/*
 * blocked.c - the blocked family's schedule: blocked Householder QR with compact-WY updates.
 *
 * For each outer panel of nb columns: factor it (a panel of up to leaf_nb columns is one panel kernel; a wider one is
 * split in two with an update between the halves), then apply its reflectors to the columns right of it:
 * C -= V (T^T (V^T C)). The panel kernel is the first kind that holds the panel's height: registers (up to 512
 * rows, measured 2x faster than the cluster panel there at batch 1), cluster (while one cluster of up to 8 blocks
 * holds the rows) and tall (many blocks a matrix, any height). Configurations with `cholqr` first run the CholeskyQR
 * panel on 32-column panels it holds that are taller than the registers kind holds (below that height the registers
 * panel measured faster: docs/tuning.md), or its grid form on panels taller than a cluster holds; the cluster or tall
 * kind then factors only the matrices whose guard failed.
 * Kernels launched without clusters are programmatic dependent launches that first wait for the kernel before them
 * (2x4096 2 % faster; with clusters it lost: docs/results/2026-12-03-h200-pdl.txt). Each matrix's exactly zero
 * trailing columns are found first (qr2_zero_tail_run); the register panels and the updates leave them alone.
 * Large batches run as two halves, one panel apart, the second on a side stream (qr2_blocked_halves); configurations
 * with `lookahead` factor each next panel on a side stream beside the update of the rest (use_lookahead).
 */
#include "configs.h"

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

int qr2_blocked_holds(const qr2_config* c, int64_t m, int64_t n, const qr2_device* dev) {
    (void)c, (void)m, (void)n, (void)dev;
    return 1; /* any shape */
}

/* The tall panel's partial sums and counters (doubles first, first in the workspace), when some panel is taller than
 * a cluster holds; with cholqr, or the grid CholeskyQR panel's partials and states, whichever is larger. */
static int64_t tall_panel_floats(const qr2_config* c, const qr2_problem* p) {
    if (qr2_panel_cluster_holds(p->m, 1, p->dev)) return 0;
    const int64_t tall = qr2_panel_tall_work_floats(p->m, p->batch, p->dev);
    const int64_t grid = c->cholqr ? qr2_panel_cholqr_grid_work_floats(p->m, p->batch, p->dev) : 0;
    const int64_t most = tall > grid ? tall : grid;
    return (most + 63) / 64 * 64; /* V after it starts 256-byte aligned, as the updates' fast paths need */
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
    return tall_panel_floats(c, p) + p->batch * ((int64_t)p->m * w + t_floats(c) + qr2_update_work_floats(w, p->n)) +
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

/* Lookahead (configurations with `lookahead`): each step's update split in two, the next panel's columns first and that
 * panel factored right after them on a side stream, beside the update of the rest on the caller's stream; the two join
 * before the next step. For few matrices, whose panels no other matrix's update can hide (halves). Never with halves,
 * and never where an update might call cuBLAS (its handle is bound to the caller's stream). */
static int use_lookahead(const qr2_config* c, const qr2_problem* p) {
    const int64_t kmin = p->m < p->n ? p->m : p->n;
    return c->lookahead && kmin > c->nb && !qr2_update_may_use_blas(p->m, p->batch, p->dev) &&
           !qr2_blocked_halves(p->m, p->n, p->batch, p->dev);
}

/* The lookahead's own V, T and update scratch, after the schedule's (64-float aligned). */
static int64_t lookahead_floats(const qr2_config* c, const qr2_problem* p) {
    const int w = outer_panel_width(c, p);
    return p->batch * ((int64_t)p->m * w + t_floats(c) + qr2_update_work_floats(w, p->n)) +
           qr2_update_split_floats(p->m, p->n, w, p->batch, p->dev);
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

/* A schedule's workspace rounded up to 256 bytes: what follows it (the second half's, the lookahead's) starts aligned
 * as the whole one's does. */
static int64_t aligned_schedule_floats(const qr2_config* c, const qr2_problem* p) {
    return (schedule_workspace_floats(c, p) + 63) / 64 * 64;
}

int64_t qr2_blocked_workspace_floats(const qr2_config* c, const qr2_problem* p) {
    qr2_problem half[2];
    if (split_in_halves(p, half)) return aligned_schedule_floats(c, &half[0]) + schedule_workspace_floats(c, &half[1]);
    if (use_lookahead(c, p)) return aligned_schedule_floats(c, p) + lookahead_floats(c, p); /* after it, aligned */
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
    /* lookahead: the previous panel's V (from its top row, ld prev_ldv) and T, which the next CholeskyQR panel
     * applies to its own columns first (NULL: an update has) */
    const float* prev_v;
    int64_t prev_ldv;
    const float* prev_t;
} schedule;

static int ldv_of(const schedule* s) { return s->p->m - s->k_outer; }

/* Applies the reflectors of columns [k0, k0 + w) (outer-panel column jo) to columns [c0, c0 + nc), c0 = k0 + w + off;
 * t: their T factor (ld w, s->t_bs apart) when the panel kernels built it (NULL: built here from V); from_a: whether
 * those columns are still only in A (the first update, see qr2_blocked_run). */
static int apply_reflectors(const schedule* s, int k0, int jo, int w, int off, int nc, const float* t, int from_a) {
    const qr2_problem* p = s->p;
    const int kmin = p->m < p->n ? p->m : p->n;
    const int ldv = ldv_of(s);
    const qr2_update_args a = {
        .batch = p->batch, .mr = p->m - k0, .w = w, .nc = nc,
        .v = s->v + (int64_t)jo * ldv + jo, .ldv = ldv, .v_bs = s->v_bs,
        .tau = p->tau + k0, .tau_bs = kmin,
        .t = t, .t_bs = s->t_bs,
        .c = p->h + (int64_t)(k0 + w + off) * p->m + k0, .ldc = p->m, .c_bs = (int64_t)p->m * p->n,
        .work = s->wy, .work_bs = s->wy_bs,
        .c_from = from_a ? p->a + k0 + w + off : 0, .from_rs = p->a_rs, .from_bs = p->a_bs,
        .zero_from = s->zero_from, .col0 = k0 + w + off,
    };
    return qr2_update_run(&a, s->blas, p->dev, p->stream);
}

static int split_width(int w) {
    int half = w / 2;
    if (w > 16) half = (half + 7) / 8 * 8; /* keep GEMM operands 32-byte aligned in width */
    return half < w ? half : w - 1;
}

/* Whether the CholeskyQR panel is the first to factor columns [k0, k0 + w): a single panel of cholqr configurations,
 * taller than the register panel holds and held by a cluster. */
static int cholqr_panel(const schedule* s, int k0, int w) {
    const int mr = s->p->m - k0;
    return s->done && w <= s->config->leaf_nb && !qr2_panel_registers_holds(mr, w, s->p->dev) &&
           qr2_panel_cholqr_holds(mr, w, s->p->dev);
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
        if (cholqr_panel(s, k0, w)) {
            /* the matrices it leaves (done[b] == 0) take the Householder kind below, on the columns as it left them
             * (the previous panel's reflectors applied where s->prev_v) */
            qr2_panel_job first = job;
            first.prev_v = s->prev_v, first.prev_ldv = s->prev_ldv, first.prev_v_bs = s->v_bs;
            first.prev_t = s->prev_t, first.prev_t_bs = s->t_bs;
            if (qr2_panel_cholqr_run(&first, s->done, p->dev, p->stream)) return 1;
            job.done = s->done;
        } else if (s->done && qr2_panel_cholqr_grid_holds(mr, w, p->dev) && !qr2_panel_cluster_holds(mr, w, p->dev)) {
            /* taller than a cluster holds: the grid form, else the tall kind's launch a reflector */
            if (qr2_panel_cholqr_grid_run(&job, s->done, s->tall, p->dev, p->stream)) return 1;
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
    if (apply_reflectors(s, k0, jo, w1, 0, w2, left, 0)) return 1;
    if (factor_panel(s, k0 + w1, jo + w1, w2, 1, want_t, &right)) return 1;
    /* Both halves single panel kernels that built their T (so the right one left the left one's slot alone): T from
     * theirs, T12 = -T1 V1^T V2 T2, instead of from V's Gram matrix in the update. Fewer matrices than SMs split the
     * rows of V1^T V2 over blocks (partials in the update's split region, unused until the update). Before that split,
     * tall matrices at such batches built T from V's Gram matrix in the update (larft: one block a matrix, ~24 us a
     * launch at 4096 rows); which of the two is faster there is not yet measured. */
    if (!want_t || !left || !right || w1 > s->config->leaf_nb || w2 > s->config->leaf_nb) return 0;
    const int ldv = ldv_of(s);
    float* merged = s->t + 2 * T_HALF_FLOATS;
    if (qr2_update_merge_t(p->batch, mr, w1, w2, s->v + (int64_t)jo * ldv + jo, ldv, s->v_bs, left, right, s->t_bs,
                           merged, s->t_bs, s->wy + p->batch * s->wy_bs, p->dev, p->stream))
        return 1;
    *t = merged;
    return 0;
}

static int run_schedule(const qr2_config* c, const qr2_problem* p, float* work, behind_half* behind, int ahead);

/* Queues the whole schedule of s->behind, once, on the calling thread's side stream after what s's stream holds so
 * far (on s's stream itself while the side stream belongs to another graph capture). */
static int start_behind(const schedule* s) {
    behind_half* b = s->behind;
    qr2_problem rest = *b->p;
    void* side = 0;
    b->started = 1;
    if (qr2_side_fork(s->p->stream, s->p->dev->index, QR2_SIDE_PLAIN, &side)) return 1;
    if (side) rest.stream = side, b->on_side = 1;
    return run_schedule(s->config, &rest, b->work, 0, 0);
}

static int run_schedule(const qr2_config* c, const qr2_problem* p, float* work, behind_half* behind, int ahead) {
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
    const int64_t tall = tall_panel_floats(c, p);
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
    /* With lookahead, steps alternate between two V and T slots: the next panel writes one while the update of the
     * rest still reads the other. */
    qr2_problem on_side = *p;
    schedule ahead_s = s;
    ahead_s.p = &on_side;
    ahead_s.blas = 0; /* bound to the caller's stream; no update here calls cuBLAS (use_lookahead) */
    float* v_slot[2] = {s.v, s.v}; /* one slot without lookahead */
    float* t_slot[2] = {s.t, s.t};
    if (ahead) {
        v_slot[1] = work + aligned_schedule_floats(c, p);
        t_slot[1] = v_slot[1] + p->batch * s.v_bs;
        ahead_s.wy = t_slot[1] + p->batch * s.t_bs;
    }
    const float* t_ahead = 0;
    int factored = 0; /* the lookahead has factored this step's panel */
    for (int k = 0, step = 0; k < kmin; k += c->nb, ++step) {
        const int w = (int)min64(c->nb, kmin - k);
        const float* t = t_ahead;
        s.k_outer = k;
        s.v = v_slot[step & 1], s.t = t_slot[step & 1];
        if (!factored && factor_panel(&s, k, 0, w, 0, k + w < p->n, &t)) return 1;
        factored = 0;
        if (k == 0 && behind && start_behind(&s)) return 1;
        if (k + w >= p->n) continue;
        const int from_a = k == 0 && first_from_a;
        const int next_w = k + w < kmin ? (int)min64(c->nb, kmin - k - w) : 0;
        const int rest = p->n - k - w - next_w; /* columns right of the next panel */
        void* side = 0;
        if (ahead && next_w > 0 && rest > 0 && qr2_side_fork(p->stream, p->dev->index, QR2_SIDE_URGENT, &side))
            return 1;
        if (!side) {
            if (apply_reflectors(&s, k, 0, w, 0, p->n - k - w, t, from_a)) return 1;
            continue;
        }
        /* the next panel's columns, then that panel, on the side stream; the rest here. A CholeskyQR panel applies
         * this step's reflectors to its columns itself (2 x 4096: an update of them took three launches, ~30 us, on
         * the side stream's critical path); not the first update, which reads A. */
        on_side.stream = side;
        ahead_s.k_outer = k, ahead_s.v = s.v, ahead_s.t = s.t;
        const int fuse = !from_a && t && w == QR2_PANEL_MAX_W && cholqr_panel(&ahead_s, k + w, next_w) &&
                         qr2_panel_cholqr_applies_previous(p->m - k - w, next_w, p->dev);
        int failed = !fuse && apply_reflectors(&ahead_s, k, 0, w, 0, next_w, t, from_a);
        if (fuse) ahead_s.prev_v = s.v, ahead_s.prev_ldv = ldv_of(&s), ahead_s.prev_t = t;
        ahead_s.k_outer = k + w, ahead_s.v = v_slot[(step + 1) & 1], ahead_s.t = t_slot[(step + 1) & 1];
        failed = failed || factor_panel(&ahead_s, k + w, 0, next_w, 0, k + w + next_w < p->n, &t_ahead);
        ahead_s.prev_v = 0, ahead_s.prev_t = 0;
        failed = failed || apply_reflectors(&s, k, 0, w, next_w, rest, t, from_a);
        if (qr2_side_join(p->stream, p->dev->index, QR2_SIDE_URGENT) || failed) return 1;
        factored = 1;
    }
    return behind && !behind->started ? start_behind(&s) : 0; /* no panel at all */
}

int qr2_blocked_run(const qr2_config* c, const qr2_problem* p, float* work) {
    qr2_problem half[2];
    if (!split_in_halves(p, half)) return run_schedule(c, p, work, 0, use_lookahead(c, p));
    /* the second half starts on the side stream once the first half's first panel is queued; the caller's stream
     * then waits for it, also after a failure (a capture must not end with the side stream still forked) */
    behind_half second = {.p = &half[1], .work = work + aligned_schedule_floats(c, &half[0])};
    const int failed = run_schedule(c, &half[0], work, &second, 0);
    return (second.on_side && qr2_side_join(p->stream, p->dev->index, QR2_SIDE_PLAIN)) || failed;
}
