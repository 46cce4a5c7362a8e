/*
 * op_shim.c - the boxed kernels' shared machinery (op_shim.h).
 */
#include "op_shim.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void qr2_fail(qr2_call* c, const char* fmt, ...) {
    if (c->failed) return;
    const int head = snprintf(c->msg, sizeof c->msg, "%s: ", c->op);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->msg + head, sizeof c->msg - (size_t)head, fmt, ap);
    va_end(ap);
    c->failed = 1;
}

/* The message this thread's kernels last raised: torch_call_dispatcher turns a nested kernel's exception into an
 * error code (the text goes only to torch's log), so an Autograd kernel raises it again from there. */
static _Thread_local char raised[640];

static void qr2_set_raised(const char* msg) { snprintf(raised, sizeof raised, "%s", msg ? msg : ""); }

void qr2_fail_nested(qr2_call* c, const char* op) {
    if (c->failed) return;
    if (!raised[0]) {
        qr2_fail(c, "%s failed (torch logged the reason)", op);
        return;
    }
    snprintf(c->msg, sizeof c->msg, "%s", raised); /* it names its operator already */
    c->failed = 1;
}

/* Python's _geqrf_tracked notes its message here before it raises, for the Autograd kernel that called it. */
QR2_EXPORT void qr2_note_error(const char* msg) { qr2_set_raised(msg); }

void qr2_release(AtenTensorHandle* t) {
    if (*t) aoti_torch_delete_tensor_object(*t);
    *t = 0;
}

void qr2_finish(qr2_call* c, StableIValue* stack) {
    free(c->heap);
    c->heap = 0;
    if (c->guard) aoti_torch_delete_cuda_guard(c->guard);
    c->guard = 0;
    for (int i = 0; i < 5; ++i) qr2_release(&c->temp[i]);
    for (int i = 0; i < 3; ++i) qr2_release(&c->in[i]);
    if (!c->failed) {
        for (int i = 0; i < c->n_out; ++i) stack[i] = (StableIValue)(uintptr_t)c->out[i];
        return;
    }
    for (int i = 0; i < 2; ++i) qr2_release(&c->out[i]);
    qr2_set_raised(c->msg);
    aoti_torch_check(false, c->op, __FILE__, __LINE__, c->msg);
}

const char* qr2_dtype_name(int32_t d) {
    static const struct {
        int32_t (*code)(void);
        const char* name;
    } known[] = {
        {aoti_torch_dtype_float32, "float32"},   {aoti_torch_dtype_float64, "float64"},
        {aoti_torch_dtype_complex64, "complex64"}, {aoti_torch_dtype_complex128, "complex128"},
        {aoti_torch_dtype_float16, "float16"},   {aoti_torch_dtype_bfloat16, "bfloat16"},
        {aoti_torch_dtype_complex32, "complex32"}, {aoti_torch_dtype_int64, "int64"},
        {aoti_torch_dtype_int32, "int32"},       {aoti_torch_dtype_int16, "int16"},
        {aoti_torch_dtype_int8, "int8"},         {aoti_torch_dtype_uint8, "uint8"},
        {aoti_torch_dtype_uint16, "uint16"},     {aoti_torch_dtype_uint32, "uint32"},
        {aoti_torch_dtype_uint64, "uint64"},     {aoti_torch_dtype_bool, "bool"},
        {aoti_torch_dtype_float8_e4m3fn, "float8_e4m3fn"}, {aoti_torch_dtype_float8_e5m2, "float8_e5m2"},
        {aoti_torch_dtype_float8_e4m3fnuz, "float8_e4m3fnuz"}, {aoti_torch_dtype_float8_e5m2fnuz, "float8_e5m2fnuz"},
        {torch_dtype_float8_e8m0fnu, "float8_e8m0fnu"}, {torch_dtype_float4_e2m1fn_x2, "float4_e2m1fn_x2"},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; ++i)
        if (d == known[i].code()) return known[i].name;
    /* The shim names no quantized dtype: these are c10::ScalarType's codes, fixed by torch's serialisation format. */
    static const struct {
        int32_t code;
        const char* name;
    } quantized[] = {{12, "qint8"}, {13, "quint8"}, {14, "qint32"}, {16, "quint4x2"}, {17, "quint2x4"}};
    for (size_t i = 0; i < sizeof quantized / sizeof quantized[0]; ++i)
        if (d == quantized[i].code) return quantized[i].name;
    return "an unsupported dtype";
}

static int is_lapack_dtype(int32_t d) {
    return d == aoti_torch_dtype_float32() || d == aoti_torch_dtype_float64() ||
           d == aoti_torch_dtype_complex64() || d == aoti_torch_dtype_complex128();
}

void qr2_check_kind(qr2_call* c, AtenTensorHandle t, const char* name, int64_t min_dim, qr2_shape* s) {
    char of[64] = ""; /* " for tau": the argument named where the operator has several */
    if (name) snprintf(of, sizeof of, " for %s", name);
    bool defined = true;
    QR2_TRY(c, aoti_torch_is_defined(t, &defined), "aoti_torch_is_defined");
    if (!c->failed && !defined) qr2_fail(c, "expected a Tensor%s, got None", of);
    int32_t layout = 0;
    QR2_TRY(c, aoti_torch_get_layout(t, &layout), "aoti_torch_get_layout");
    QR2_TRY(c, aoti_torch_get_dim(t, &s->dim), "aoti_torch_get_dim");
    QR2_TRY(c, aoti_torch_get_dtype(t, &s->dtype), "aoti_torch_get_dtype");
    if (c->failed) return;
    if (layout != aoti_torch_layout_strided())
        qr2_fail(c, "expected a dense (strided) tensor%s, got a sparse or other non-strided layout", of);
    else if (s->dim < min_dim)
        qr2_fail(c, "expected %s of shape %s with at least %" PRId64 " dimension%s, got %" PRId64 " dimension(s)",
                 name ? name : "a tensor", min_dim >= 2 ? "(*, m, n)" : "(*, k)", min_dim, min_dim > 1 ? "s" : "",
                 s->dim);
    else if (!is_lapack_dtype(s->dtype))
        qr2_fail(c, "expected a float32, float64, complex64 or complex128 tensor%s, got %s", of,
                 qr2_dtype_name(s->dtype));
}

void qr2_inspect(qr2_call* c, AtenTensorHandle t, const char* name, int64_t min_dim, qr2_shape* s) {
    qr2_check_kind(c, t, name, min_dim, s);
    QR2_TRY(c, aoti_torch_get_sizes(t, &s->sizes), "aoti_torch_get_sizes");
    QR2_TRY(c, aoti_torch_get_strides(t, &s->strides), "aoti_torch_get_strides");
}

int64_t qr2_mul_sat(int64_t a, int64_t b) { return a == 0 || b == 0 ? 0 : a > INT64_MAX / b ? INT64_MAX : a * b; }

static int64_t max1(int64_t x) { return x > 1 ? x : 1; }

int64_t qr2_batch_of(const qr2_shape* s, int inner) {
    int64_t batch = 1;
    for (int64_t i = 0; i < s->dim - inner && batch != 0; ++i) batch = qr2_mul_sat(batch, s->sizes[i]);
    return batch;
}

int qr2_batch_stride(const qr2_shape* s, int inner, int64_t* bs) {
    int64_t expect = -1;
    *bs = 0;
    for (int64_t i = s->dim - inner - 1; i >= 0; --i) {
        if (s->sizes[i] == 1) continue;
        if (expect >= 0 && s->strides[i] != expect) return 0;
        if (expect < 0) *bs = s->strides[i];
        expect = s->strides[i] * s->sizes[i];
    }
    return 1;
}

void qr2_contiguous_strides(int64_t d, const int64_t* sizes, int64_t* strides) {
    int64_t acc = 1;
    for (int64_t i = d - 1; i >= 0; --i) {
        strides[i] = acc;
        acc = qr2_mul_sat(acc, max1(sizes[i]));
    }
}

void qr2_column_major_strides(int64_t d, const int64_t* sizes, int64_t* strides) {
    int64_t acc = 1;
    if (d >= 2) {
        strides[d - 2] = 1;
        acc = qr2_mul_sat(acc, max1(sizes[d - 2]));
        strides[d - 1] = acc;
        acc = qr2_mul_sat(acc, max1(sizes[d - 1]));
    } else if (d == 1) {
        strides[0] = 1;
        return;
    }
    for (int64_t i = d - 3; i >= 0; --i) {
        strides[i] = acc;
        acc = qr2_mul_sat(acc, max1(sizes[i]));
    }
}

void qr2_allocate(qr2_call* c, AtenTensorHandle* t, int64_t dim, const int64_t* sizes, const int64_t* strides,
                  int32_t dtype, int32_t device_type, int32_t device, const char* what) {
    if (c->failed) return;
    if (aoti_torch_empty_strided(dim, sizes, strides, dtype, device_type, device, t) == 0) return;
    int64_t bytes = (int64_t)aoti_torch_dtype_element_size(dtype);
    for (int64_t i = 0; i < dim; ++i) bytes = qr2_mul_sat(bytes, sizes[i]);
    if (device_type == aoti_torch_device_type_cuda())
        qr2_fail(c, "allocating %s (%" PRId64 " bytes on cuda:%d) failed: out of memory, or a CUDA error "
                    "(torch logged the reason)", what, bytes, (int)device);
    else
        qr2_fail(c, "allocating %s (%" PRId64 " bytes on the CPU) failed: out of memory", what, bytes);
}

float* qr2_workspace(qr2_call* c, AtenTensorHandle* t, int32_t device, int64_t floats) {
    float* data = 0;
    if (floats < 0 || floats == INT64_MAX) qr2_fail(c, "the workspace's size overflows");
    if (floats <= 0 || c->failed) return 0;
    int64_t stride = 1;
    qr2_allocate(c, t, 1, &floats, &stride, aoti_torch_dtype_float32(), aoti_torch_device_type_cuda(), device,
                 "the workspace");
    QR2_TRY(c, aoti_torch_get_data_ptr(*t, (void**)&data), "aoti_torch_get_data_ptr(workspace)");
    return data;
}

void qr2_packed_copy(qr2_call* c, AtenTensorHandle t, const qr2_shape* s, int inner, int32_t device,
                     AtenTensorHandle* copy, const float** data, int64_t* bs) {
    if (c->failed) return;
    int64_t on_stack[QR2_MAX_DIM];
    int64_t* strides = on_stack;
    if (s->dim > QR2_MAX_DIM && !(strides = malloc((size_t)s->dim * sizeof(int64_t)))) {
        qr2_fail(c, "out of host memory for %" PRId64 " dimensions", s->dim);
        return;
    }
    if (inner == 2) qr2_column_major_strides(s->dim, s->sizes, strides);
    else qr2_contiguous_strides(s->dim, s->sizes, strides);
    qr2_allocate(c, copy, s->dim, s->sizes, strides, aoti_torch_dtype_float32(), aoti_torch_device_type_cuda(), device,
                 "a copy of an argument");
    QR2_TRY(c, aoti_torch_copy_(*copy, t, 0), "copying an argument");
    QR2_TRY(c, aoti_torch_get_data_ptr(*copy, (void**)data), "aoti_torch_get_data_ptr(copy)");
    *bs = 1;
    for (int64_t i = s->dim - inner; i < s->dim; ++i) *bs = qr2_mul_sat(*bs, max1(s->sizes[i]));
    if (strides != on_stack) free(strides);
}

void qr2_enter_cuda(qr2_call* c, AtenTensorHandle t, int32_t* device, void** stream) {
    QR2_TRY(c, aoti_torch_get_device_index(t, device), "aoti_torch_get_device_index");
    int current = -1;
    if (!c->failed && qr2_cuda_current_device(&current)) qr2_fail(c, "%s", qr2_cuda_last_error());
    if (!c->failed && current != *device) /* a guard costs a C++ object and two device switches per call */
        QR2_TRY(c, aoti_torch_create_cuda_guard(*device, &c->guard), "aoti_torch_create_cuda_guard");
    QR2_TRY(c, aoti_torch_get_current_cuda_stream(*device, stream), "aoti_torch_get_current_cuda_stream");
}

int qr2_blas_handle(void** handle) { return torch_get_current_cuda_blas_handle(handle) != 0; }

int qr2_redispatch(qr2_call* c, const char* op, StableIValue* st) {
    raised[0] = 0;
    if (torch_call_dispatcher(op, "", st, QR2_TORCH_ABI_2_11) != 0) return 1;
    for (int i = 0; i < c->n_out; ++i) c->out[i] = (AtenTensorHandle)(uintptr_t)st[i];
    return 0;
}

/* Probed by one aten::_unpack_dual(t, 0) (torch allows one forward-AD level, 0): the primal, an autograd view of t,
 * has history (aten::is_leaf is false) when t requires grad. The stable ABI has no requires_grad or tangent getter. */
int qr2_autograd_need(qr2_call* c, AtenTensorHandle t) {
    AtenTensorHandle probe = 0;
    QR2_TRY(c, aoti_torch_new_tensor_handle(t, &probe), "aoti_torch_new_tensor_handle");
    if (c->failed) return QR2_PLAIN;
    StableIValue st[2] = {(StableIValue)(uintptr_t)probe, 0 /* level */};
    QR2_TRY(c, torch_call_dispatcher("aten::_unpack_dual", "", st, QR2_TORCH_ABI_2_11), "aten::_unpack_dual");
    if (c->failed) return QR2_PLAIN;
    AtenTensorHandle primal = (AtenTensorHandle)(uintptr_t)st[0], tangent = (AtenTensorHandle)(uintptr_t)st[1];
    bool has_tangent = false;
    QR2_TRY(c, aoti_torch_is_defined(tangent, &has_tangent), "aoti_torch_is_defined");
    qr2_release(&tangent);
    int need = has_tangent ? QR2_RAISE : QR2_PLAIN;
    if (!c->failed && need == QR2_PLAIN && aoti_torch_grad_mode_is_enabled()) {
        StableIValue leaf[1] = {(StableIValue)(uintptr_t)primal};
        primal = 0; /* the dispatcher takes it */
        QR2_TRY(c, torch_call_dispatcher("aten::is_leaf", "", leaf, QR2_TORCH_ABI_2_11), "aten::is_leaf");
        if (!c->failed && (leaf[0] & 0xff) == 0) need = QR2_TRACK;
    }
    qr2_release(&primal);
    return c->failed ? QR2_PLAIN : need;
}
