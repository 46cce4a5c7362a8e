/*
 * op_shim.h - what every qr2 operator's boxed kernels share on torch's stable C ABI: the call record that owns the
 * kernel's handles and collects its failure, tensor inspection, output allocation, redispatch, the autograd probe.
 *
 * Every boxed kernel owns its tensor arguments and must either fill its return slots with new owning handles or
 * raise. Failures are collected in the call record, every owned handle is released, and only then is the message
 * raised through aoti_torch_check (which does not return).
 */
#ifndef QR2_OP_SHIM_H
#define QR2_OP_SHIM_H

#include <stdint.h>

#include "configs.h"
#include "torch_abi.h"

#define QR2_MAX_DIM 64 /* dimensions whose output strides live on the stack; more go to the heap */

typedef struct qr2_call {
    const char* op;            /* "qr2.geqrf": every message begins with it */
    AtenTensorHandle in[3];    /* the tensor arguments, owned until handed on */
    AtenTensorHandle out[2];   /* the returns, once made */
    AtenTensorHandle temp[5];  /* workspaces and copies, released by qr2_finish */
    int n_out;
    CUDAGuardHandle guard;
    int64_t* heap; /* output strides of inputs with more than QR2_MAX_DIM dimensions (freed by qr2_finish) */
    char msg[640];
    int failed;
} qr2_call;

/* Records the call's first failure: "<op>: <message>". */
void qr2_fail(qr2_call* c, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

#define QR2_TRY(c, expr, what)                                           \
    do {                                                                 \
        if (!(c)->failed && (expr) != 0) qr2_fail((c), "%s failed", what); \
    } while (0)

void qr2_release(AtenTensorHandle* t);
/* Releases everything the call still owns and returns its outputs on the stack; raises if it failed. */
void qr2_finish(qr2_call* c, StableIValue* stack);

/* A tensor argument's layout, dimensions, sizes, strides and dtype. */
typedef struct qr2_shape {
    int64_t dim;
    int64_t* sizes;
    int64_t* strides;
    int32_t dtype;
} qr2_shape;

/* Checks that t is a defined strided tensor of at least min_dim dimensions and a LAPACK dtype; messages name the
 * argument (NULL: an operator of one argument). Reads dim and dtype only (reading sizes would make torch.compile
 * specialise on them). */
void qr2_check_kind(qr2_call* c, AtenTensorHandle t, const char* name, int64_t min_dim, qr2_shape* s);
/* qr2_check_kind, then sizes and strides. */
void qr2_inspect(qr2_call* c, AtenTensorHandle t, const char* name, int64_t min_dim, qr2_shape* s);
const char* qr2_dtype_name(int32_t dtype);

int64_t qr2_mul_sat(int64_t a, int64_t b); /* a * b for a, b >= 0, saturating at INT64_MAX */
/* The number of matrices: the product of all but the last `inner` sizes (saturating). */
int64_t qr2_batch_of(const qr2_shape* s, int inner);
/* The single stride that walks the batch dimensions (all but the last `inner`) in order, if one exists. */
int qr2_batch_stride(const qr2_shape* s, int inner, int64_t* bs);
/* A contiguous tensor's strides. */
void qr2_contiguous_strides(int64_t dim, const int64_t* sizes, int64_t* strides);
/* torch's layout of LAPACK outputs: each (m, n) matrix column-major, batch-major outside. */
void qr2_column_major_strides(int64_t dim, const int64_t* sizes, int64_t* strides);

/* A new tensor through torch's allocator. Its exception does not cross the stable ABI (torch logs it), so the message
 * says what was asked for and the likely reason. */
void qr2_allocate(qr2_call* c, AtenTensorHandle* t, int64_t dim, const int64_t* sizes, const int64_t* strides,
                  int32_t dtype, int32_t device_type, int32_t device, const char* what);
/* A 1-D float32 CUDA workspace of `floats` (none when 0). */
float* qr2_workspace(qr2_call* c, AtenTensorHandle* t, int32_t device, int64_t floats);
/* A float32 copy of t, for arguments whose batch no single stride walks: matrices (inner 2) column-major, vectors
 * (inner 1) contiguous; *bs: the copy's batch stride. */
void qr2_packed_copy(qr2_call* c, AtenTensorHandle t, const qr2_shape* s, int inner, int32_t device,
                     AtenTensorHandle* copy, const float** data, int64_t* bs);

/* Enters t's CUDA device (a guard only when it is not the current one) and fetches its current stream. */
void qr2_enter_cuda(qr2_call* c, AtenTensorHandle t, int32_t* device, void** stream);
/* torch's cuBLAS handle for the current stream. */
int qr2_blas_handle(void** handle);

/* Calls `op` through the dispatcher on the stack st (owning tensor handles, which it takes, and scalars); on success
 * the first c->n_out values of st become the call's outputs. Returns non-zero on failure. */
int qr2_redispatch(qr2_call* c, const char* op, StableIValue* st);
/* Records the failure of a qr2_redispatch of `op`: the message a qr2 kernel nested inside raised, if one did. */
void qr2_fail_nested(qr2_call* c, const char* op);

/* What autograd must do with a tensor argument: RAISE if it carries a forward-AD tangent, TRACK if grad mode is on and
 * it requires grad, else PLAIN. */
enum { QR2_PLAIN, QR2_TRACK, QR2_RAISE };
int qr2_autograd_need(qr2_call* c, AtenTensorHandle t);

#endif /* QR2_OP_SHIM_H */
