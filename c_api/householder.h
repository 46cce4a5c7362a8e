/*
 * householder.h - applying stored Householder reflectors: Q (orgqr) and Q C, Q^T C (ormqr), on the blocked route's
 * compact-WY update.
 */
#ifndef QR2_HOUSEHOLDER_H
#define QR2_HOUSEHOLDER_H

#include <stdint.h>

#include "qr2_cuda.h"

/* k reflectors of m rows stored as geqrf leaves them: v_j below the diagonal of column j of h (element (i, j) at
 * h[i rs + j cs], h_bs apart), the unit on the diagonal implied, tau k per matrix (tau_bs apart):
 * Q = H_0 H_1 ... H_{k-1}, H_j = I - tau_j v_j v_j^T. */
typedef struct qr2_reflectors {
    int64_t batch;
    int m, k;
    const float* h;
    int64_t rs, cs, h_bs;
    const float* tau;
    int64_t tau_bs;
} qr2_reflectors;

/* C (m x nc per matrix, column-major, ld ldc, c_bs apart) = Q C (apply_q) or Q^T C, in place. from_identity (with
 * apply_q): C holds the first nc columns of the identity, so each block of reflectors touches only the columns from
 * its own first on (LAPACK sorgqr's saving). work: qr2_householder_work_floats floats, 16-byte aligned. */
typedef struct qr2_apply {
    const qr2_reflectors* r;
    int apply_q, from_identity;
    float* c;
    int nc;
    int64_t ldc, c_bs;
} qr2_apply;

int64_t qr2_householder_work_floats(const qr2_reflectors* r, int nc, const qr2_device* dev);
int qr2_householder_apply(const qr2_apply* a, float* work, void* blas, const qr2_device* dev, void* stream);

#endif /* QR2_HOUSEHOLDER_H */
