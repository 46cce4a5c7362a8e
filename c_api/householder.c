/*
 * householder.c - applying stored reflectors in blocks of HOUSEHOLDER_NB: each block's V is unpacked from the
 * compact form and applied by the blocked route's update (T built there from V's Gram matrix and tau). Q C takes the
 * blocks last to first, Q^T C first to last.
 */
#include "householder.h"

/* Reflectors per block: the update's widest single kernel (64 columns of V per pass over C, half the passes of 32). */
#define HOUSEHOLDER_NB 64

static int block_width(const qr2_reflectors* r) { return r->k < HOUSEHOLDER_NB ? r->k : HOUSEHOLDER_NB; }

/* Per matrix: V (m x nb), then the update's scratch; then the split update's workspace for the whole call. */
static int64_t v_floats(const qr2_reflectors* r) { return ((int64_t)r->m * block_width(r) + 3) / 4 * 4; }
static int64_t scratch_floats(const qr2_reflectors* r, int nc) {
    return (qr2_update_work_floats(block_width(r), nc) + 3) / 4 * 4;
}

int64_t qr2_householder_work_floats(const qr2_reflectors* r, int nc, const qr2_device* dev) {
    if (r->k <= 0 || nc <= 0) return 0;
    return r->batch * (v_floats(r) + scratch_floats(r, nc)) + qr2_update_split_floats(r->m, nc, block_width(r),
                                                                                      r->batch, dev);
}

int qr2_householder_apply(const qr2_apply* a, float* work, void* blas, const qr2_device* dev, void* stream) {
    const qr2_reflectors* r = a->r;
    if (r->k <= 0 || a->nc <= 0 || r->batch <= 0) return 0;
    const int nb = block_width(r), blocks = (r->k + nb - 1) / nb;
    float* v = work;
    float* scratch = v + r->batch * v_floats(r);
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
        };
        if (qr2_update_run(&u, blas, dev, stream)) return 1;
    }
    return 0;
}
