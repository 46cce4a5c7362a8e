/*
 * testing.c - the blocked family's kernels called one at a time, for tests only (tests/test_blocked_kernels.py):
 * a panel kind (`tall_launches`: the tall panel's per-reflector form), the compact-WY update, the merge of two T
 * factors, the zero-tail search and the input transpose on tensors the test allocates, on the current device and the
 * given stream. Each returns 0, or non-zero with
 * qr2_cuda_last_error() saying why.
 */
#include <string.h>

#include "configs.h"

static int device_of(int index, qr2_device* dev) { return qr2_cuda_device(index, dev); }

QR2_EXPORT int qr2_test_panel_holds(const char* kind, int64_t m, int64_t w, int device) {
    qr2_device dev;
    if (device_of(device, &dev)) return -1;
    if (strcmp(kind, "registers") == 0) return qr2_panel_registers_holds(m, w, &dev);
    if (strcmp(kind, "cluster") == 0) return qr2_panel_cluster_holds(m, w, &dev);
    if (strcmp(kind, "tall") == 0 || strcmp(kind, "tall_launches") == 0) return qr2_panel_tall_holds(m, w, &dev);
    if (strcmp(kind, "cholqr") == 0) return qr2_panel_cholqr_holds(m, w, &dev);
    if (strcmp(kind, "cholqr_grid") == 0) return qr2_panel_cholqr_grid_holds(m, w, &dev);
    return -1;
}

/* The CholeskyQR panel's guard flags: one word a matrix at the start of the work buffer, rounded to 16 bytes. */
static int64_t done_floats(int64_t batch) { return (batch + 3) / 4 * 4; }

/* Work for any panel kind: the tall panel's partial sums, or the CholeskyQR panel's flags (then the grid form's
 * partials). */
QR2_EXPORT int64_t qr2_test_panel_work_floats(int64_t m, int64_t batch, int device) {
    qr2_device dev;
    if (device_of(device, &dev)) return -1;
    const int64_t tall = qr2_panel_tall_work_floats(m, batch, &dev);
    const int64_t cholqr = done_floats(batch) + qr2_panel_cholqr_grid_work_floats(m, batch, &dev);
    return tall > cholqr ? tall : cholqr;
}

/* Factors batch panels of m x w held column-major in h (ld m, m*w apart): tau (w apart), V (ld m, m*w apart,
 * v_row0 0) and T (w x w, w*w apart) where the kind builds it. "cholqr" and "cholqr_grid" run a CholeskyQR panel
 * alone: the matrices its guard leaves stay as they were, with 0 in their word of the flags at the start of work. */
QR2_EXPORT int qr2_test_panel(const char* kind, int64_t batch, int m, int w, float* h, float* tau, float* v, float* t,
                              void* work, int device, void* stream) {
    qr2_device dev;
    if (device_of(device, &dev)) return 1;
    const qr2_panel_job job = {
        .batch = batch, .m = m, .w = w,
        .h = h, .ldh = m, .h_bs = (int64_t)m * w,
        .tau = tau, .tau_bs = w,
        .v = v, .ldv = m, .v_bs = (int64_t)m * w, .v_row0 = 0,
        .t = t, .t_bs = (int64_t)w * w,
    };
    if (strcmp(kind, "registers") == 0) return qr2_panel_registers_run(&job, work, &dev, stream);
    if (strcmp(kind, "cluster") == 0) return qr2_panel_cluster_run(&job, work, &dev, stream);
    if (strcmp(kind, "tall") == 0) return qr2_panel_tall_run(&job, work, &dev, stream);
    if (strcmp(kind, "tall_launches") == 0) return qr2_panel_tall_run_launches(&job, work, &dev, stream);
    if (strcmp(kind, "cholqr") == 0) return qr2_panel_cholqr_run(&job, (int*)work, &dev, stream);
    if (strcmp(kind, "cholqr_grid") == 0)
        return qr2_panel_cholqr_grid_run(&job, (int*)work, (float*)work + done_floats(batch), &dev, stream);
    return qr2_cuda_fail("qr2_test_panel", "no such panel kind");
}

/* The CholeskyQR panel applying the previous panel's reflectors first: h holds batch column blocks of (m + 32) x 32
 * (ld m + 32, (m + 32) * 32 apart), the panel its rows from 32 on; prev_v: the previous panel's V over the same rows
 * (the same layout); prev_t: its T (column-major, 32 * 32 apart). tau, V (m x 32, ld m) and T as qr2_test_panel;
 * the flags at the start of work. */
QR2_EXPORT int qr2_test_panel_cholqr_after(int64_t batch, int m, float* h, float* tau, float* v, float* t,
                                           const float* prev_v, const float* prev_t, void* work, int device,
                                           void* stream) {
    qr2_device dev;
    if (device_of(device, &dev)) return 1;
    const int w = QR2_PANEL_MAX_W;
    const int64_t ld = (int64_t)m + w;
    const qr2_panel_job job = {
        .batch = batch, .m = m, .w = w,
        .h = h + w, .ldh = ld, .h_bs = ld * w,
        .tau = tau, .tau_bs = w,
        .v = v, .ldv = m, .v_bs = (int64_t)m * w, .v_row0 = 0,
        .t = t, .t_bs = (int64_t)w * w,
        .prev_v = prev_v, .prev_ldv = ld, .prev_v_bs = ld * w,
        .prev_t = prev_t, .prev_t_bs = (int64_t)w * w,
    };
    return qr2_panel_cholqr_run(&job, (int*)work, &dev, stream);
}

/* The tall panel's resident form's blocks a matrix for batch panels of m x w (0: one launch per reflector). */
QR2_EXPORT int qr2_test_panel_tall_resident_blocks(int64_t batch, int m, int w, int device) {
    qr2_device dev;
    if (device_of(device, &dev)) return -1;
    const qr2_panel_job job = {.batch = batch, .m = m, .w = w};
    return qr2_panel_tall_resident_blocks(&job, &dev);
}

/* The update's whole workspace for a batch, in floats. */
QR2_EXPORT int64_t qr2_test_update_work_floats(int64_t batch, int mr, int w, int nc, int device) {
    qr2_device dev;
    if (device_of(device, &dev)) return -1;
    return batch * qr2_update_work_floats(w, nc) + qr2_update_split_floats(mr, nc, w, batch, &dev);
}

/* C (mr x nc, ld mr, mr*nc apart) -= V (T^T (V^T C)) for V (mr x w, ld mr, mr*w apart), with T (w x w, w*w apart)
 * when t is not NULL, else T built from V and tau (w apart). */
QR2_EXPORT int qr2_test_update(int64_t batch, int mr, int w, int nc, const float* v, const float* tau, const float* t,
                               float* c, float* work, void* blas, int device, void* stream) {
    qr2_device dev;
    if (device_of(device, &dev)) return 1;
    const qr2_update_args a = {
        .batch = batch, .mr = mr, .w = w, .nc = nc,
        .v = v, .ldv = mr, .v_bs = (int64_t)mr * w,
        .tau = tau, .tau_bs = w,
        .t = t, .t_bs = (int64_t)w * w,
        .c = c, .ldc = mr, .c_bs = (int64_t)mr * nc,
        .work = work, .work_bs = qr2_update_work_floats(w, nc),
    };
    return qr2_update_run(&a, blas, &dev, stream);
}

/* T of V = [V1 V2] (mr x (w1 + w2), ld mr, mr (w1 + w2) apart) from its halves' T factors t1 (w1 x w1, ld w1) and
 * t2 (w2 x w2, ld w2), t_bs apart, into t ((w1 + w2) square, ld w1 + w2, out_bs apart); work: 1024 floats a part
 * and matrix (qr2_test_merge_t_parts). */
QR2_EXPORT int qr2_test_merge_t(int64_t batch, int mr, int w1, int w2, const float* v, const float* t1, const float* t2,
                                int64_t t_bs, float* t, int64_t out_bs, float* work, int device, void* stream) {
    qr2_device dev;
    if (device_of(device, &dev)) return 1;
    return qr2_update_merge_t(batch, mr, w1, w2, v, mr, (int64_t)mr * (w1 + w2), t1, t2, t_bs, t, out_bs, work, &dev,
                              stream);
}

QR2_EXPORT int qr2_test_merge_t_parts(int64_t batch, int mr, int w1, int device) {
    qr2_device dev;
    if (device_of(device, &dev)) return -1;
    return qr2_update_merge_t_parts(batch, mr, w1, &dev);
}

/* zero_from[b] for a batch of m x n matrices, element (i, j) of matrix b at a[b bs + i rs + j cs]. */
QR2_EXPORT int qr2_test_zero_tail(const float* a, int64_t rs, int64_t cs, int64_t bs, int m, int n, int64_t batch,
                                  int* zero_from, void* stream) {
    return qr2_zero_tail_run(a, rs, cs, bs, m, n, batch, zero_from, stream);
}

QR2_EXPORT int qr2_test_transpose(const float* src, int64_t rs, int64_t cs, int64_t bs, float* dst, int m, int n,
                                  int64_t batch, void* stream) {
    return qr2_transpose_run(src, rs, cs, bs, dst, m, (int64_t)m * n, m, n, batch, stream);
}

/* The message of this thread's last failing test entry point. */
QR2_EXPORT const char* qr2_test_last_error(void) { return qr2_cuda_last_error(); }
