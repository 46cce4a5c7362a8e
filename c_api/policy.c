/*
 * policy.c - the one place that decides which configuration factors a problem: a pure function of the shape, the
 * batch and the device (its SMs, opt-in shared memory per block, cluster support).
 *
 * The rules are tried in order; the first whose condition holds and whose configuration can run the shape on the
 * device wins. Batch thresholds are in waves of the device's SMs (one block, or one cluster, per SM). Where a
 * crossover was measured at a batch that is no whole number of waves, it is written as that batch on the 132-SM
 * H200 it was measured on, scaled by the device's SM count (`measured`). Each rule names the results file that
 * shows it; docs/tuning.md has the numbers under the configuration's name.
 */
#include "configs.h"

/* A batch measured on a 132-SM H200, scaled to this device's SMs (the same batch on an H200). */
static int64_t measured(const qr2_device* d, int64_t batch_on_h200) { return batch_on_h200 * d->sms / 132; }

static int fits(const qr2_config* c, int64_t m, int64_t n, const qr2_device* d) { return qr2_config_holds(c, m, n, d); }

/* Whether some 32-column panel of an m x n problem is one the CholeskyQR panel holds on d: its shortest full panel
 * has m - 32 (ceil(min(m, n) / 32) - 1) rows, the tallest min(m, 4096) (a device without clusters holds none past 256
 * rows, one with too little shared memory none). */
static int cholqr_panels(int64_t m, int64_t n, const qr2_device* d) {
    const int64_t k = m < n ? m : n;
    const int64_t shortest = m - QR2_PANEL_MAX_W * ((k + QR2_PANEL_MAX_W - 1) / QR2_PANEL_MAX_W - 1);
    const int64_t tallest = m < 4096 ? m : 4096;
    return shortest <= 4096 && qr2_panel_cholqr_holds(tallest, QR2_PANEL_MAX_W, d);
}

#define RULE(config, condition)                                    \
    do {                                                           \
        if ((condition) && fits(&(config), m, n, d)) return &(config); \
    } while (0)

static const qr2_config* pick(int64_t m, int64_t n, int64_t batch, const qr2_device* d) {
    const int64_t wave = d->sms;

    /* m, n <= 32: a block per matrix while its four warps a matrix pay (to 640 on an H200: 1000 x 32 x 32 costs
     * 18.0 us against 14.4 for a warp per matrix); past that a warp per matrix, several a block.
     * docs/results/2026-11-30-h200-quad-qr-experiments.txt */
    RULE(qr2_quad, m <= 32 && n <= 32 && batch <= measured(d, 640));
    RULE(qr2_warp, m <= 32 && n <= 32);
    /* Past one wave of blocks, a warp per matrix for what it holds: n <= 32 (m <= 96) from one wave, 33 <= n <= 48
     * from six waves (six blocks per SM), 49 <= n <= 64 from four (four blocks per SM).
     * docs/results/2026-11-29-h200-small-sweep-warp.*, 2026-11-30-h200-route-pick-n33-64.txt */
    RULE(qr2_warp, n <= 32 && batch > wave);
    RULE(qr2_warp, n >= 33 && n <= 48 && batch > 6 * wave);
    RULE(qr2_warp, n >= 49 && n <= QR2_WARP_MAX_N && batch > 4 * wave);
    /* 33 <= n <= 64, m <= 64, up to one wave: a block per matrix, a quad of lanes per column.
     * docs/results/2026-11-30-h200-quad-n64.txt */
    RULE(qr2_quad, m <= QR2_QUAD_MAX && n >= 33 && n <= QR2_QUAD_MAX && batch <= wave);
    /* n 72-176, one wave of 2-block clusters: the second block takes half the reflector chain.
     * docs/results/2026-11-30-h200-block-cluster-sweep.* */
    RULE(qr2_builder_cluster2, n >= 72 && n <= QR2_BUILDER_MAX && batch <= wave / 2);
    /* n 17-176 (m <= 176) at any batch: a block per matrix. docs/results/2026-11-29-h200-block-columns-placement.* */
    RULE(qr2_builder, n >= 17 && n <= QR2_BUILDER_MAX);
    /* 3-block clusters past one block's registers: n 177-256 (m >= 65) up to one wave of blocks, tall m 177-256
     * with n 48-176 up to half a wave, and n 193-256 (m >= 177) past one wave.
     * docs/results/2026-11-30-h200-cluster3.txt, 2026-11-30-h200-small-sweep-cluster3.json */
    RULE(qr2_builder_cluster3, m >= 65 && n >= 177 && n <= QR2_BUILDER_CLUSTER3_MAX && batch <= wave);
    RULE(qr2_builder_cluster3, m >= 177 && n >= 48 && n <= QR2_BUILDER_MAX && batch <= wave / 2);
    RULE(qr2_builder_cluster3, m >= 177 && n >= 193 && n <= QR2_BUILDER_CLUSTER3_MAX && batch > wave);
    /* What the builder kernel does not hold (m <= 64 with n 177-256, m 177-256 with n < 48): registers, on a 2-block
     * cluster up to half a wave, one block up to one wave, and for n <= 96 at any batch.
     * docs/results/2026-11-29-h200-cluster-vs-block.txt, 2026-11-29-h200-small-sweep-many-small.* */
    RULE(qr2_registers_cluster2, n >= 48 && n <= QR2_REGISTERS_MAX && batch <= wave / 2);
    RULE(qr2_registers, n <= QR2_REGISTERS_MAX && batch <= wave);
    RULE(qr2_registers, n <= 96);
    /* Tall matrices of n <= 8: one block's shared memory (held since the first kernels; no placement measurement). */
    RULE(qr2_shared_memory, n <= 8);
    /* Inside the CholeskyQR rule's region below, one or two matrices of 2048 to 4096 rows and columns, whose panels
     * no other matrix's update hides: each next panel on a side stream beside the update of the rest, the CholeskyQR
     * panel applying the previous panel's reflectors itself (1 x 4096^2 8.78 against 10.35 ms, 2 x 4096 11.0 against
     * 13.1, 1 x 3000^2 5.70 against 6.50, 2 x 2049^2 3.97 against 4.91; 8 x 2048 lost, 6.34 against 6.08, and
     * 16 x 2048 tied; measured on square shapes). Over 4096 rows an update may call cuBLAS, which lookahead never runs
     * beside. docs/results/2026-12-05-h200-lookahead-fused-panel.txt */
    RULE(qr2_blocked_cholqr_nb32_lookahead, batch <= 2 && m >= 2048 && m <= 4096 && n >= 2048 && n <= 4096 &&
                                                cholqr_panels(m, n, d));
    /* Panels taller than the register panel holds, below 1.5 million matrix entries per SM (198 million on an
     * H200): CholeskyQR panels over clusters of up to 16 blocks, whose critical path does not grow with the reflector
     * count (60 x 1024 5.29 against 5.70 ms for blocked_nb32, 100 x 1024 8.42 against 9.37, 64 x 1536 16.0 against
     * 17.9 for blocked_nb64, 8 x 2048 7.16 against 9.65; 200 x 768 8.00 against 7.80 and 300 x 640 6.60 against 6.52,
     * the two nearest the threshold, cost a few per cent). docs/results/2026-12-02-h200-panel-occupancy-sweep.txt */
    RULE(qr2_blocked_cholqr_nb32, m > QR2_PANEL_REGISTERS_MAX_M && batch * m * n < 1500000 * wave &&
                                      cholqr_panels(m, n, d));
    /* Below that, panels taller than a cluster holds (over 8192 rows): the grid form of the CholeskyQR panel (five
     * launches a panel over 256-row blocks) instead of the tall Householder panel's launches: 1 x 100000 x 256 2.13
     * against 6.15 ms, 1 x 20000 x 256 0.91 against 4.06, 4 x 50000 x 64 0.52 against 1.92, 2 x 9000 x 2000 24.6
     * against 34.4 (its panels under 8192 rows take the cluster panels as before); batches of 1 to 4 measured, so
     * larger ones keep the tall panel. It factors whole 32-column panels only: n < 32 stays on the tall panel.
     * docs/results/2026-12-05-h200-grid-cholqr-panel.txt */
    RULE(qr2_blocked_cholqr_nb32, n >= QR2_PANEL_MAX_W && batch <= 4 && batch * m * n < 1500000 * wave &&
                                      qr2_panel_cholqr_grid_holds(m, QR2_PANEL_MAX_W, d));
    /* n >= 768 from 1.5 million entries per SM: 64-column outer panels halve the passes of the trailing update where
     * there is enough of it to fill the SMs many times (400 x 768 12.8 against 13.2 ms, 200 x 1024 14.0 against 14.8;
     * n = 512 slower at every batch: 640 x 512 6.38 against 6.11, 1000 x 512 9.29 against 8.90; a tie at 640 x 512
     * since, 2026-12-03-h200-update-experiments.txt). docs/results/2026-12-02-h200-panel-occupancy-sweep.txt */
    RULE(qr2_blocked_nb64, n >= 768 && batch * m * n >= 1500000 * wave);
    return &qr2_blocked_nb32; /* any shape */
}

#undef RULE

const qr2_config* qr2_policy_pick(int64_t m, int64_t n, int64_t batch, const qr2_device* d) {
    const qr2_config* forced = qr2_config_forced();
    if (forced && qr2_config_holds(forced, m, n, d)) return forced;
    return pick(m, n, batch, d);
}
