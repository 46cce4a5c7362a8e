/*
 * householder.c - applying stored reflectors in blocks of HOUSEHOLDER_NB: each block's V is unpacked from the
 * compact form and applied by the blocked route's update (T built there from V's Gram matrix and tau). Q C takes the
 * blocks last to first, Q^T C first to last. With fp16 the updates take C's column scales, a bound from each column's
 * norm before the first block: Q and its blocks keep that norm, as geqrf's updates keep the input's.
 */
#include "householder.h"

#include <stdatomic.h>

/* Reflectors per block: the update's widest single kernel (64 columns of V per pass over C, half the passes of 32). */
#define HOUSEHOLDER_NB 64

static int block_width(const qr2_reflectors* r) { return r->k < HOUSEHOLDER_NB ? r->k : HOUSEHOLDER_NB; }

/* Per matrix: V (m x nb), then the update's scratch; then the split update's workspace for the whole call. */
static int64_t v_floats(const qr2_reflectors* r) { return ((int64_t)r->m * block_width(r) + 3) / 4 * 4; }
static int64_t scratch_floats(const qr2_reflectors* r, int nc) {
    return (qr2_update_work_floats(block_width(r), nc) + 3) / 4 * 4;
}

/* The FP16 updates' column scales, after the split region: one int a column of C, rounded up to 16 bytes. */
static int64_t scale_floats(const qr2_reflectors* r, int nc, int fp16) {
    return fp16 ? (r->batch * nc + 3) / 4 * 4 : 0;
}

static _Atomic int fp16_forced;
int qr2_householder_fp16(void) { return atomic_load_explicit(&fp16_forced, memory_order_relaxed); }
void qr2_householder_force_fp16(int on) { atomic_store_explicit(&fp16_forced, on != 0, memory_order_relaxed); }

int64_t qr2_householder_work_floats(const qr2_reflectors* r, int nc, int fp16, const qr2_device* dev) {
    if (r->k <= 0 || nc <= 0) return 0;
    return r->batch * (v_floats(r) + scratch_floats(r, nc)) +
           qr2_update_split_floats(r->m, nc, block_width(r), r->batch, dev) + scale_floats(r, nc, fp16);
}

int qr2_householder_apply(const qr2_apply* a, float* work, void* blas, const qr2_device* dev, void* stream) {
    const qr2_reflectors* r = a->r;
    if (r->k <= 0 || a->nc <= 0 || r->batch <= 0) return 0;
    const int nb = block_width(r), blocks = (r->k + nb - 1) / nb;
    float* v = work;
    float* scratch = v + r->batch * v_floats(r);
    int* scales = 0; /* FP16: C's column scales, from its norms before the first block (Q keeps them) */
    if (a->fp16 && r->m % 4 == 0) { /* rows not in fours leave every piece to 3xTF32 (qr2_update_fp16_holds) */
        scales = (int*)(scratch + r->batch * scratch_floats(r, a->nc) +
                        qr2_update_split_floats(r->m, a->nc, nb, r->batch, dev));
        if (qr2_column_scales_run(a->c, 1, a->ldc, a->c_bs, r->m, a->nc, r->batch, scales, stream)) return 1;
    }
    for (int i = 0; i < blocks; ++i) {
        const int j = a->apply_q ? blocks - 1 - i : i; /* Q = Q_0 Q_1 ...: Q C applies the last block first */
        const int k0 = j * nb, w = r->k - k0 < nb ? r->k - k0 : nb, mr = r->m - k0;
        /* first column the block changes: from the identity, later blocks (applied first) left the earlier columns alone */
        const int c0 = a->from_identity && a->apply_q ? k0 : 0;
        if (qr2_reflectors_unpack(r->batch, mr, w, r->h + k0 * (r->rs + r->cs), r->rs, r->cs, r->h_bs, v, mr,
                                  v_floats(r), stream))
            return 1;
        const qr2_update_args u = {
            .batch = r->batch, .mr = mr, .w = w, .nc = a->nc - c0,
            .v = v, .ldv = mr, .v_bs = v_floats(r),
            .tau = r->tau + k0, .tau_bs = r->tau_bs,
            .t = 0, .t_bs = 0,
            .c = a->c + (int64_t)c0 * a->ldc + k0, .ldc = a->ldc, .c_bs = a->c_bs,
            .work = scratch, .work_bs = scratch_floats(r, a->nc),
            .apply_q = a->apply_q,
            .scale_exp = scales ? scales + c0 : 0, .scale_bs = a->nc,
        };
        if (qr2_update_run(&u, blas, dev, stream)) return 1;
    }
    return 0;
}
