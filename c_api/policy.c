/*
 * policy.c - the one place that decides which configuration factors a problem: a pure function of the shape, the
 * batch and the device (its SMs, opt-in shared memory per block, cluster support).
 *
 * The rules are tried in order; the first whose condition holds and whose configuration can run the shape on the
 * device wins. Batch thresholds are in waves of the device's SMs (one block, or one cluster, per SM). Where a
 * crossover was measured at a batch that is no whole number of waves, it is written as that batch on the 132-SM
 * H200 it was measured on, scaled by the device's SM count (`measured`). Every threshold's evidence is in
 * docs/tuning.md under the configuration's name.
 */
#include "configs.h"

/* A batch measured on a 132-SM H200, scaled to this device's SMs (the same batch on an H200). */
static int64_t measured(const qr2_device* d, int64_t batch_on_h200) { return batch_on_h200 * d->sms / 132; }

static int fits(const qr2_config* c, int64_t m, int64_t n, const qr2_device* d) { return qr2_config_holds(c, m, n, d); }

/* Whether some 32-column panel of an m x n problem is one the CholeskyQR panel holds on d: its shortest full panel
 * has m - 32 (ceil(min(m, n) / 32) - 1) rows, the tallest min(m, 4096) (a device without clusters, or with too little
 * shared memory, holds none past 128 rows). */
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
     * 18.0 us against 14.4 for a warp per matrix); past that a warp per matrix, several a block. */
    RULE(qr2_quad, m <= 32 && n <= 32 && batch <= measured(d, 640));
    RULE(qr2_warp, m <= 32 && n <= 32);
    /* Past one wave of blocks, a warp per matrix for what it holds: n <= 32 (m <= 96) from one wave, 33 <= n <= 48
     * from six waves (six blocks per SM), 49 <= n <= 64 from four (four blocks per SM). */
    RULE(qr2_warp, n <= 32 && batch > wave);
    RULE(qr2_warp, n >= 33 && n <= 48 && batch > 6 * wave);
    RULE(qr2_warp, n >= 49 && n <= QR2_WARP_MAX_N && batch > 4 * wave);
    /* 33 <= n <= 64, m <= 64, up to one wave: a block per matrix, a quad of lanes per column. */
    RULE(qr2_quad, m <= QR2_QUAD_MAX && n >= 33 && n <= QR2_QUAD_MAX && batch <= wave);
    /* n 72-176, one wave of 2-block clusters: the second block takes half the reflector chain. */
    RULE(qr2_builder_cluster2, n >= 72 && n <= QR2_BUILDER_MAX && batch <= wave / 2);
    /* n 17-176 (m <= 176) at any batch: a block per matrix. */
    RULE(qr2_builder, n >= 17 && n <= QR2_BUILDER_MAX);
    /* 3-block clusters past one block's registers: n 177-256 (m >= 65) up to one wave of blocks, tall m 177-256
     * with n 48-176 up to half a wave, and n 193-256 (m >= 177) past one wave. */
    RULE(qr2_builder_cluster3, m >= 65 && n >= 177 && n <= QR2_BUILDER_CLUSTER3_MAX && batch <= wave);
    RULE(qr2_builder_cluster3, m >= 177 && n >= 48 && n <= QR2_BUILDER_MAX && batch <= wave / 2);
    RULE(qr2_builder_cluster3, m >= 177 && n >= 193 && n <= QR2_BUILDER_CLUSTER3_MAX && batch > wave);
    /* What the builder kernel does not hold (m <= 64 with n 177-256, m 177-256 with n < 48): registers, on a 2-block
     * cluster up to half a wave, one block up to one wave, and for n <= 96 at any batch. */
    RULE(qr2_registers_cluster2, n >= 48 && n <= QR2_REGISTERS_MAX && batch <= wave / 2);
    RULE(qr2_registers, n <= QR2_REGISTERS_MAX && batch <= wave);
    RULE(qr2_registers, n <= 96);
    /* Tall matrices of n <= 8: one block's shared memory. */
    RULE(qr2_shared_memory, n <= 8);
    /* Panels taller than the register panel holds and at most a quarter wave of matrices: CholeskyQR panels over
     * clusters of up to 16 blocks, whose critical path does not grow with the reflector count (n 640-2048 at batch
     * 2-32: 0.69-0.97x the time of the better Householder configuration; from 48 matrices a wave of register or
     * cluster panels is as fast or faster). */
    RULE(qr2_blocked_cholqr_nb32, m > QR2_PANEL_REGISTERS_MAX_M && batch <= wave / 4 && cholqr_panels(m, n, d));
    /* n >= 512 with at least 400 000 matrix entries per SM (52 million on an H200): 64-column outer panels halve the
     * passes of the trailing update where there is enough of it to fill the SMs (60 x 1024 5.85 against 6.02 ms,
     * 40 x 1536 1.07x, 100 x 768 1.01x; 100 x 512, 60 x 768, 40 x 1024 and every batch <= 20 slower). */
    RULE(qr2_blocked_nb64, n >= 512 && batch * m * n >= 400000 * wave);
    return &qr2_blocked_nb32; /* any shape */
}

#undef RULE

const qr2_config* qr2_policy_pick(int64_t m, int64_t n, int64_t batch, const qr2_device* d) {
    const qr2_config* forced = qr2_config_forced();
    if (forced && qr2_config_holds(forced, m, n, d)) return forced;
    return pick(m, n, batch, d);
}
