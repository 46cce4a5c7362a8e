/*
 * householder_op.c - qr2::orgqr (Q from geqrf's reflectors, as torch.linalg.householder_product) and qr2::ormqr
 * (Q or Q^T applied to C from either side, as torch.ormqr).
 *
 * As with geqrf, each has a public schema and an `_impl` twin without an Autograd kernel. float32 CUDA runs qr2's
 * blocked update (householder.c); other dtypes, the CPU, and every call whose arguments need derivatives (grad mode
 * with an argument that requires grad, or a forward-AD tangent) go to aten's operator, which has the derivatives.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "householder.h"
#include "householder_op.h"
#include "op_shim.h"

#define ORGQR "orgqr(Tensor A, Tensor tau) -> Tensor"
#define ORGQR_IMPL "_orgqr_impl(Tensor A, Tensor tau) -> Tensor"
#define ORMQR "ormqr(Tensor A, Tensor tau, Tensor C, bool left=True, bool transpose=False) -> Tensor"
#define ORMQR_IMPL "_ormqr_impl(Tensor A, Tensor tau, Tensor C, bool left=True, bool transpose=False) -> Tensor"

/* One call of either operator: its arguments as read off the stack. */
typedef struct householder_call {
    qr2_call c;
    int ormqr;
    int n_args; /* tensors: 2 (orgqr) or 3 (ormqr) */
    bool left, transpose;
    qr2_shape a, tau, other;
    int32_t device_type, device;
} householder_call;

static householder_call start(StableIValue* stack, uint64_t num_args, uint64_t num_outputs, int ormqr) {
    householder_call h = {.c = {.op = ormqr ? "qr2.ormqr" : "qr2.orgqr", .n_out = 1}, .ormqr = ormqr};
    h.n_args = ormqr ? 3 : 2;
    for (int i = 0; i < h.n_args && i < (int)num_args; ++i) h.c.in[i] = (AtenTensorHandle)(uintptr_t)stack[i];
    if (num_args != (uint64_t)(ormqr ? 5 : 2) || num_outputs != 1)
        qr2_fail(&h.c, "expected %d arguments and 1 return", ormqr ? 5 : 2);
    if (ormqr && !h.c.failed) {
        h.left = (stack[3] & 0xff) != 0;
        h.transpose = (stack[4] & 0xff) != 0;
    }
    return h;
}

static const char* const ARG_NAMES[3] = {"A", "tau", "C"};

static void check_kinds(householder_call* h) {
    qr2_shape* s[3] = {&h->a, &h->tau, &h->other};
    for (int i = 0; i < h->n_args; ++i) qr2_check_kind(&h->c, h->c.in[i], ARG_NAMES[i], i == 1 ? 1 : 2, s[i]);
}

/* The checks torch's operators make, with our wording. */
static void validate(householder_call* h) {
    qr2_call* c = &h->c;
    qr2_shape* s[3] = {&h->a, &h->tau, &h->other};
    for (int i = 0; i < h->n_args; ++i) qr2_inspect(c, c->in[i], ARG_NAMES[i], i == 1 ? 1 : 2, s[i]);
    int32_t type[3] = {0}, index[3] = {0};
    for (int i = 0; i < h->n_args; ++i) {
        QR2_TRY(c, aoti_torch_get_device_type(c->in[i], &type[i]), "aoti_torch_get_device_type");
        QR2_TRY(c, aoti_torch_get_device_index(c->in[i], &index[i]), "aoti_torch_get_device_index");
    }
    if (c->failed) return;
    h->device_type = type[0], h->device = index[0];
    const int64_t d = h->a.dim, mn = h->a.sizes[d - 2], ka = h->a.sizes[d - 1], k = h->tau.sizes[h->tau.dim - 1];
    for (int i = 1; i < h->n_args; ++i) {
        if (s[i]->dtype != h->a.dtype)
            qr2_fail(c, "expected %s to have A's dtype (%s), got %s", ARG_NAMES[i], qr2_dtype_name(h->a.dtype),
                     qr2_dtype_name(s[i]->dtype));
        else if (type[i] != type[0] || index[i] != index[0])
            qr2_fail(c, "expected %s on A's device, got another device", ARG_NAMES[i]);
    }
    if (c->failed) return;
    if (h->tau.dim != d - 1)
        qr2_fail(c, "expected tau to have one dimension less than A, got tau.ndim=%" PRId64 " and A.ndim=%" PRId64,
                 h->tau.dim, d);
    else if (h->ormqr && h->other.dim != d)
        qr2_fail(c, "expected C to have A's number of dimensions, got C.ndim=%" PRId64 " and A.ndim=%" PRId64,
                 h->other.dim, d);
    for (int64_t i = 0; i < d - 2 && !c->failed; ++i)
        if (h->tau.sizes[i] != h->a.sizes[i] || (h->ormqr && h->other.sizes[i] != h->a.sizes[i]))
            qr2_fail(c, "expected the batch dimensions of tau%s to equal A.shape[:-2], dimension %" PRId64
                        " differs", h->ormqr ? " and C" : "", i);
    if (c->failed) return;
    if (!h->ormqr) {
        if (mn < ka)
            qr2_fail(c, "expected A of shape (*, m, n) with m >= n, got m=%" PRId64 ", n=%" PRId64, mn, ka);
        else if (k > ka)
            qr2_fail(c, "expected tau.shape[-1] <= A.shape[-1], got %" PRId64 " > %" PRId64, k, ka);
        return;
    }
    const int64_t m = h->other.sizes[d - 2], n = h->other.sizes[d - 1], q_order = h->left ? m : n;
    if (q_order != mn)
        qr2_fail(c, "expected C.shape[%d] == A.shape[-2] (left=%s), got %" PRId64 " and %" PRId64, h->left ? -2 : -1,
                 h->left ? "True" : "False", q_order, mn);
    else if (k != (mn < ka ? mn : ka))
        qr2_fail(c, "expected tau.shape[-1] == min(A.shape[-2], A.shape[-1]) = %" PRId64 ", got %" PRId64,
                 mn < ka ? mn : ka, k);
}

/* `op` (aten's or the _impl twin) on the call's arguments, which it takes. */
static void redispatch(householder_call* h, const char* op) {
    qr2_call* c = &h->c;
    if (c->failed) return;
    StableIValue st[5] = {0};
    for (int i = 0; i < h->n_args; ++i) st[i] = (StableIValue)(uintptr_t)c->in[i], c->in[i] = 0;
    st[3] = h->left, st[4] = h->transpose;
    if (qr2_redispatch(c, op, st)) qr2_fail_nested(c, op);
}

/* aten's operator, which has the derivatives and every dtype and device. */
static void delegate(householder_call* h) {
    redispatch(h, h->ormqr ? "aten::ormqr" : "aten::linalg_householder_product");
}

static void householder_cpu(StableIValue* stack, uint64_t num_args, uint64_t num_outputs, int ormqr) {
    householder_call h = start(stack, num_args, num_outputs, ormqr);
    validate(&h);
    delegate(&h);
    qr2_finish(&h.c, stack);
}
static void orgqr_cpu(StableIValue* stack, uint64_t na, uint64_t no) { householder_cpu(stack, na, no, 0); }
static void ormqr_cpu(StableIValue* stack, uint64_t na, uint64_t no) { householder_cpu(stack, na, no, 1); }

/* ---- CUDA ---- */

/* A float32 matrix argument as the kernels read it: through its strides, or a column-major copy where no single
 * stride walks its batch. */
static void matrices_of(householder_call* h, int i, const qr2_shape* s, const float** data, int64_t* rs, int64_t* cs,
                        int64_t* bs) {
    qr2_call* c = &h->c;
    if (c->failed) return;
    if (qr2_batch_stride(s, 2, bs)) {
        QR2_TRY(c, aoti_torch_get_data_ptr(c->in[i], (void**)data), "aoti_torch_get_data_ptr");
        *rs = s->strides[s->dim - 2], *cs = s->strides[s->dim - 1];
        return;
    }
    qr2_packed_copy(c, c->in[i], s, 2, h->device, &c->temp[i], data, bs);
    *rs = 1, *cs = s->sizes[s->dim - 2];
}

static void householder_cuda(StableIValue* stack, uint64_t num_args, uint64_t num_outputs, int ormqr) {
    householder_call h = start(stack, num_args, num_outputs, ormqr);
    qr2_call* c = &h.c;
    validate(&h);
    if (c->failed || h.a.dtype != aoti_torch_dtype_float32()) { /* float64 and complex: documented delegation */
        delegate(&h);
        qr2_finish(c, stack);
        return;
    }
    const qr2_shape* out_shape = ormqr ? &h.other : &h.a;
    const int64_t d = h.a.dim, rows = h.a.sizes[d - 2], k = h.tau.sizes[d - 2], batch = qr2_batch_of(&h.a, 2);
    const int64_t m = out_shape->sizes[d - 2], n = out_shape->sizes[d - 1];
    if (m > INT32_MAX || n > INT32_MAX || batch > INT32_MAX || rows > INT32_MAX)
        qr2_fail(c, "expected every matrix dimension and the batch size below 2^31");
    void* stream = 0;
    qr2_enter_cuda(c, c->in[0], &h.device, &stream);
    int64_t on_stack[QR2_MAX_DIM];
    int64_t* strides = on_stack;
    if (d > QR2_MAX_DIM && !c->failed && !(strides = c->heap = malloc((size_t)d * sizeof(int64_t))))
        qr2_fail(c, "out of host memory for %" PRId64 " dimensions", d);
    if (!c->failed) qr2_column_major_strides(d, out_shape->sizes, strides);
    qr2_allocate(c, &c->out[0], d, out_shape->sizes, strides, aoti_torch_dtype_float32(), aoti_torch_device_type_cuda(),
                 h.device, ormqr ? "the product" : "Q");
    float* out = 0;
    QR2_TRY(c, aoti_torch_get_data_ptr(c->out[0], (void**)&out), "aoti_torch_get_data_ptr(output)");
    if (c->failed || batch == 0 || m == 0 || n == 0) {
        qr2_finish(c, stack);
        return;
    }

    qr2_reflectors r = {.batch = batch, .m = (int)rows, .k = (int)k};
    matrices_of(&h, 0, &h.a, &r.h, &r.rs, &r.cs, &r.h_bs);
    /* tau: k contiguous values per matrix */
    const int64_t tau_last = h.tau.strides[d - 2];
    if (!c->failed && (k <= 1 || tau_last == 1) && qr2_batch_stride(&h.tau, 1, &r.tau_bs))
        QR2_TRY(c, aoti_torch_get_data_ptr(c->in[1], (void**)&r.tau), "aoti_torch_get_data_ptr(tau)");
    else if (!c->failed)
        qr2_packed_copy(c, c->in[1], &h.tau, 1, h.device, &c->temp[1], &r.tau, &r.tau_bs);

    qr2_device dev;
    if (!c->failed && qr2_cuda_device(h.device, &dev)) qr2_fail(c, "%s", qr2_cuda_last_error());
    void* blas = 0;
    if (!c->failed && qr2_blas_handle(&blas)) qr2_fail(c, "torch_get_current_cuda_blas_handle failed");
    if (c->failed) {
        qr2_finish(c, stack);
        return;
    }

    /* Q C and Q^T C act on C's columns; C Q = (Q^T C^T)^T and C Q^T = (Q C^T)^T on its rows, through C^T. */
    qr2_apply a = {.r = &r, .apply_q = ormqr ? (h.left ? !h.transpose : h.transpose) : 1, .from_identity = !ormqr};
    float* ct = 0;
    if (!ormqr) {
        a.c = out, a.nc = (int)n, a.ldc = m, a.c_bs = m * n;
        if (qr2_identity_run(batch, (int)m, (int)n, out, stream)) qr2_fail(c, "%s", qr2_cuda_last_error());
    } else {
        const float* src = 0;
        int64_t rs = 0, cs = 0, bs = 0;
        matrices_of(&h, 2, &h.other, &src, &rs, &cs, &bs);
        if (h.left) {
            a.c = out, a.nc = (int)n, a.ldc = m, a.c_bs = m * n;
            if (!c->failed && qr2_transpose_run(src, rs, cs, bs, out, m, m * n, (int)m, (int)n, batch, stream))
                qr2_fail(c, "%s", qr2_cuda_last_error());
        } else {
            ct = qr2_workspace(c, &c->temp[3], h.device, qr2_mul_sat(batch, qr2_mul_sat(m, n)));
            a.c = ct, a.nc = (int)m, a.ldc = n, a.c_bs = m * n;
            if (!c->failed && qr2_transpose_run(src, cs, rs, bs, ct, n, m * n, (int)n, (int)m, batch, stream))
                qr2_fail(c, "%s", qr2_cuda_last_error());
        }
    }
    float* work = qr2_workspace(c, &c->temp[4], h.device, qr2_householder_work_floats(&r, a.nc, &dev));
    if (!c->failed && qr2_householder_apply(&a, work, blas, &dev, stream)) qr2_fail(c, "%s", qr2_cuda_last_error());
    if (!c->failed && ct && qr2_transpose_run(ct, n, 1, m * n, out, m, m * n, (int)m, (int)n, batch, stream))
        qr2_fail(c, "%s", qr2_cuda_last_error());
    /* the workspace is released now: the caching allocator reuses it only for work queued after ours on the stream */
    qr2_finish(c, stack);
}
static void orgqr_cuda(StableIValue* stack, uint64_t na, uint64_t no) { householder_cuda(stack, na, no, 0); }
static void ormqr_cuda(StableIValue* stack, uint64_t na, uint64_t no) { householder_cuda(stack, na, no, 1); }

/* ---- Autograd ---- */

/* Arguments that need derivatives go to aten's operator, which has them; every other call runs the _impl twin, below
 * autograd. */
static void householder_autograd(StableIValue* stack, uint64_t num_args, uint64_t num_outputs, int ormqr) {
    householder_call h = start(stack, num_args, num_outputs, ormqr);
    qr2_call* c = &h.c;
    check_kinds(&h);
    int need = QR2_PLAIN;
    for (int i = 0; i < h.n_args && !c->failed; ++i) {
        const int n = qr2_autograd_need(c, c->in[i]);
        if (n > need) need = n;
    }
    if (need != QR2_PLAIN) delegate(&h);
    else redispatch(&h, ormqr ? "qr2::_ormqr_impl" : "qr2::_orgqr_impl");
    qr2_finish(c, stack);
}
static void orgqr_autograd(StableIValue* stack, uint64_t na, uint64_t no) { householder_autograd(stack, na, no, 0); }
static void ormqr_autograd(StableIValue* stack, uint64_t na, uint64_t no) { householder_autograd(stack, na, no, 1); }

/* ---- registration ---- */

const char* qr2_householder_register(TorchLibraryHandle lib_def, TorchLibraryHandle lib_cpu, TorchLibraryHandle lib_cuda,
                                     TorchLibraryHandle lib_autograd) {
    static const char* const schemas[] = {ORGQR, ORGQR_IMPL, ORMQR, ORMQR_IMPL};
    for (size_t i = 0; i < sizeof schemas / sizeof schemas[0]; ++i)
        if (aoti_torch_library_def(lib_def, schemas[i])) return schemas[i];
    static const struct {
        const char* name;
        void (*cpu)(StableIValue*, uint64_t, uint64_t);
        void (*cuda)(StableIValue*, uint64_t, uint64_t);
        void (*autograd)(StableIValue*, uint64_t, uint64_t);
    } ops[] = {
        {"orgqr", orgqr_cpu, orgqr_cuda, orgqr_autograd},
        {"_orgqr_impl", orgqr_cpu, orgqr_cuda, 0},
        {"ormqr", ormqr_cpu, ormqr_cuda, ormqr_autograd},
        {"_ormqr_impl", ormqr_cpu, ormqr_cuda, 0},
    };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; ++i) {
        if (torch_library_impl(lib_cpu, ops[i].name, ops[i].cpu, QR2_TORCH_ABI_2_11)) return ops[i].name;
        if (torch_library_impl(lib_cuda, ops[i].name, ops[i].cuda, QR2_TORCH_ABI_2_11)) return ops[i].name;
        if (ops[i].autograd && torch_library_impl(lib_autograd, ops[i].name, ops[i].autograd, QR2_TORCH_ABI_2_11))
            return ops[i].name;
    }
    return 0;
}
