/*
 * geqrf_op.c - the qr2::geqrf operator: registration through torch's stable C ABI and the boxed
 * kernels for the CPU, CUDA and Autograd dispatch keys.
 *
 * Three schemas: qr2::geqrf (public), qr2::_geqrf_impl (the same CPU and CUDA kernels with no Autograd
 * kernel, so torch's autograd fallback passes it through) and qr2::_geqrf_tracked (implemented in
 * Python: outputs whose backward raises, as torch.geqrf's). The Autograd kernel here runs _geqrf_impl,
 * or _geqrf_tracked when A requires grad under grad mode: a Python Autograd kernel cost 4-7 us per call on
 * the H200's host, more than the kernel of a small matrix.
 *
 * Every boxed kernel owns its input handle and must either fill both return slots with new
 * owning handles or raise. Failures are collected in a `call` record, every owned handle is
 * released, and only then is the message raised through aoti_torch_check (which does not return).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qr2_cuda.h"
#include "configs.h"
#include "torch_abi.h"

#define SCHEMA "geqrf(Tensor A) -> (Tensor, Tensor)"
#define SCHEMA_IMPL "_geqrf_impl(Tensor A) -> (Tensor, Tensor)"
#define SCHEMA_TRACKED "_geqrf_tracked(Tensor A) -> (Tensor, Tensor)"
#define MAX_DIM 64 /* dimensions whose output strides live on the stack; more go to the heap */

typedef struct call {
    AtenTensorHandle input, h, tau, work;
    CUDAGuardHandle guard;
    int64_t* heap; /* output strides of inputs with more than MAX_DIM dimensions (freed by finish) */
    char msg[640];
    int failed;
} call;

static void fail(call* c, const char* fmt, ...) {
    if (c->failed) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->msg, sizeof c->msg, fmt, ap);
    va_end(ap);
    c->failed = 1;
}

/* The message this thread's kernels last raised: torch_call_dispatcher turns a nested kernel's exception
 * into an error code (the text goes only to torch's log), so the Autograd kernel raises it again from here. */
static _Thread_local char raised[640];

/* Python's _geqrf_tracked notes its message here before it raises, for the Autograd kernel that called it. */
QR2_EXPORT void qr2_note_error(const char* msg) { snprintf(raised, sizeof raised, "%s", msg ? msg : ""); }

static void release(AtenTensorHandle* t) {
    if (*t) aoti_torch_delete_tensor_object(*t);
    *t = 0;
}

/* Releases everything the call still owns; raises if it failed. */
static void finish(call* c, StableIValue* stack) {
    free(c->heap);
    c->heap = 0;
    if (c->guard) aoti_torch_delete_cuda_guard(c->guard);
    c->guard = 0;
    release(&c->work);
    release(&c->input);
    if (!c->failed) {
        stack[0] = (StableIValue)(uintptr_t)c->h;
        stack[1] = (StableIValue)(uintptr_t)c->tau;
        return;
    }
    release(&c->h);
    release(&c->tau);
    snprintf(raised, sizeof raised, "%s", c->msg);
    aoti_torch_check(false, "qr2.geqrf", __FILE__, __LINE__, c->msg);
}

#define TRY(c, expr, what)                                                      \
    do {                                                                        \
        if (!(c)->failed && (expr) != 0) fail((c), "qr2.geqrf: %s failed", what); \
    } while (0)

/* An output or workspace allocation through torch's allocator. Its exception does not cross the stable ABI (torch
 * logs it), so the message says what was asked for and the likely reason. */
static void allocate_as(call* c, AtenTensorHandle* t, int64_t dim, const int64_t* sizes, const int64_t* strides,
                        int32_t dtype, int32_t device_type, int32_t device, int64_t bytes, const char* what) {
    if (c->failed) return;
    if (aoti_torch_empty_strided(dim, sizes, strides, dtype, device_type, device, t) != 0) {
        if (device_type == aoti_torch_device_type_cuda())
            fail(c, "qr2.geqrf: allocating %s (%" PRId64 " bytes on cuda:%d) failed: out of memory, or a CUDA error "
                    "(torch logged the reason)", what, bytes, (int)device);
        else
            fail(c, "qr2.geqrf: allocating %s (%" PRId64 " bytes on the CPU) failed: out of memory", what, bytes);
    }
}

static void allocate(call* c, AtenTensorHandle* t, int64_t dim, const int64_t* sizes, const int64_t* strides,
                     int32_t device, int64_t floats, const char* what) {
    allocate_as(c, t, dim, sizes, strides, aoti_torch_dtype_float32(), aoti_torch_device_type_cuda(), device,
                4 * floats, what);
}

static const char* dtype_name(int32_t d) {
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

/* The shape checks torch.geqrf makes, with our wording. Reads dim, sizes and dtype. */
typedef struct shape {
    int64_t dim;
    int64_t* sizes;
    int64_t* strides;
    int32_t dtype;
} shape;

/* Layout, dimensions and dtype only: reading sizes would make torch.compile specialise on them. */
static void check_kind(call* c, shape* s) {
    bool defined = true;
    TRY(c, aoti_torch_is_defined(c->input, &defined), "aoti_torch_is_defined");
    if (!c->failed && !defined) fail(c, "qr2.geqrf: expected a Tensor, got None");
    int32_t layout = 0;
    TRY(c, aoti_torch_get_layout(c->input, &layout), "aoti_torch_get_layout");
    TRY(c, aoti_torch_get_dim(c->input, &s->dim), "aoti_torch_get_dim");
    TRY(c, aoti_torch_get_dtype(c->input, &s->dtype), "aoti_torch_get_dtype");
    if (c->failed) return;
    if (layout != aoti_torch_layout_strided())
        fail(c, "qr2.geqrf: expected a dense (strided) tensor, got a sparse or other non-strided layout");
    else if (s->dim < 2)
        fail(c, "qr2.geqrf: expected a tensor of shape (*, m, n) with at least 2 dimensions, got %" PRId64
                " dimension(s)", s->dim);
    else if (!is_lapack_dtype(s->dtype))
        fail(c, "qr2.geqrf: expected a float32, float64, complex64 or complex128 tensor, got %s",
             dtype_name(s->dtype));
}

static void inspect(call* c, shape* s) {
    check_kind(c, s);
    TRY(c, aoti_torch_get_sizes(c->input, &s->sizes), "aoti_torch_get_sizes");
    TRY(c, aoti_torch_get_strides(c->input, &s->strides), "aoti_torch_get_strides");
}

/* ---- outputs ---- */
static int64_t max1(int64_t x) { return x > 1 ? x : 1; }

/* a * b for a, b >= 0, saturating at INT64_MAX. */
static int64_t mul_sat(int64_t a, int64_t b) { return a == 0 || b == 0 ? 0 : a > INT64_MAX / b ? INT64_MAX : a * b; }

/* torch.geqrf's layout: H column-major per matrix, batch-major outside (the strides of a
 * contiguous (*, n, m) tensor with its last two dimensions swapped); tau contiguous. */
static void output_strides(const shape* s, int64_t kmin, int64_t* h_strides, int64_t* tau_strides) {
    const int64_t d = s->dim, m = s->sizes[d - 2], n = s->sizes[d - 1];
    int64_t acc = 1;
    h_strides[d - 2] = 1;
    acc = mul_sat(acc, max1(m));
    h_strides[d - 1] = acc;
    acc = mul_sat(acc, max1(n));
    for (int64_t i = d - 3; i >= 0; --i) {
        h_strides[i] = acc;
        acc = mul_sat(acc, max1(s->sizes[i]));
    }
    acc = 1;
    tau_strides[d - 2] = 1;
    acc = mul_sat(acc, max1(kmin));
    for (int64_t i = d - 3; i >= 0; --i) {
        tau_strides[i] = acc;
        acc = mul_sat(acc, max1(s->sizes[i]));
    }
}

/* The number of matrices (saturating at INT64_MAX: a zero dimension elsewhere may leave the others huge). */
static int64_t batch_of(const shape* s) {
    int64_t batch = 1;
    for (int64_t i = 0; i < s->dim - 2 && batch != 0; ++i) batch = mul_sat(batch, s->sizes[i]);
    return batch;
}

/* H and tau with torch.geqrf's sizes and strides, in `dtype` on the given device. on_stack: 3 * MAX_DIM values. */
static void allocate_outputs(call* c, const shape* s, int32_t dtype, int32_t device_type, int32_t device,
                             int64_t* on_stack) {
    if (c->failed) return;
    const int64_t d = s->dim, m = s->sizes[d - 2], n = s->sizes[d - 1], kmin = m < n ? m : n, batch = batch_of(s);
    int64_t* dims = on_stack;
    if (d > MAX_DIM && !(dims = c->heap = malloc(3 * (size_t)d * sizeof(int64_t)))) {
        fail(c, "qr2.geqrf: out of host memory for %" PRId64 " dimensions", d);
        return;
    }
    int64_t *h_strides = dims, *tau_sizes = dims + d, *tau_strides = dims + 2 * d;
    output_strides(s, kmin, h_strides, tau_strides);
    memcpy(tau_sizes, s->sizes, (size_t)(d - 2) * sizeof(int64_t));
    tau_sizes[d - 2] = kmin;
    const int64_t esize = (int64_t)aoti_torch_dtype_element_size(dtype);
    allocate_as(c, &c->h, d, s->sizes, h_strides, dtype, device_type, device,
                mul_sat(esize, mul_sat(batch, mul_sat(m, n))), "H");
    allocate_as(c, &c->tau, d - 1, tau_sizes, tau_strides, dtype, device_type, device,
                mul_sat(esize, mul_sat(batch, kmin)), "tau");
}

/* An empty batch or min(m, n) = 0: torch.geqrf's empty outputs, whatever the other sizes, made at once on every device
 * and for every dtype without a LAPACK call (aten's took over ten minutes for 2^40 x 0 x 0). Returns 1 if handled. */
static int empty_problem(call* c, const shape* s, int64_t* on_stack) {
    if (c->failed || (batch_of(s) != 0 && s->sizes[s->dim - 2] != 0 && s->sizes[s->dim - 1] != 0)) return 0;
    int32_t device_type = 0, device = 0;
    TRY(c, aoti_torch_get_device_type(c->input, &device_type), "aoti_torch_get_device_type");
    TRY(c, aoti_torch_get_device_index(c->input, &device), "aoti_torch_get_device_index");
    allocate_outputs(c, s, s->dtype, device_type, device, on_stack);
    return 1;
}

/* Hands the call to aten::geqrf (LAPACK on CPU, cuSOLVER on CUDA); it takes the input handle. Its exception text
 * goes only to torch's log, so a failure is diagnosed here: the likeliest reason, memory for the outputs, is tried. */
static void delegate_to_aten(call* c, const shape* s) {
    int32_t device_type = 0, device = 0;
    TRY(c, aoti_torch_get_device_type(c->input, &device_type), "aoti_torch_get_device_type");
    TRY(c, aoti_torch_get_device_index(c->input, &device), "aoti_torch_get_device_index");
    AtenTensorHandle keep = 0; /* keeps s's sizes alive for the diagnosis: the dispatcher may drop the last reference */
    TRY(c, aoti_torch_new_tensor_handle(c->input, &keep), "aoti_torch_new_tensor_handle");
    if (c->failed) return;
    StableIValue st[2] = {(StableIValue)(uintptr_t)c->input, 0};
    c->input = 0; /* the dispatcher steals it, even when it fails */
    if (torch_call_dispatcher("aten::geqrf", "", st, QR2_TORCH_ABI_2_11) == 0) {
        c->h = (AtenTensorHandle)(uintptr_t)st[0];
        c->tau = (AtenTensorHandle)(uintptr_t)st[1];
        release(&keep);
        return;
    }
    call probe = {0};
    int64_t on_stack[3 * MAX_DIM];
    allocate_outputs(&probe, s, s->dtype, device_type, device, on_stack);
    if (probe.failed)
        fail(c, "qr2.geqrf: aten::geqrf failed: %s", probe.msg + strlen("qr2.geqrf: "));
    else
        fail(c, "qr2.geqrf: aten::geqrf failed (torch logged the reason)");
    release(&probe.h);
    release(&probe.tau);
    free(probe.heap);
    release(&keep);
}

static void geqrf_cpu(StableIValue* stack, uint64_t num_args, uint64_t num_outputs) {
    call c = {.input = (AtenTensorHandle)(uintptr_t)stack[0]};
    shape s = {0};
    int64_t on_stack[3 * MAX_DIM];
    if (num_args != 1 || num_outputs != 2) fail(&c, "qr2.geqrf: expected 1 argument and 2 returns");
    inspect(&c, &s);
    if (!empty_problem(&c, &s, on_stack)) delegate_to_aten(&c, &s);
    finish(&c, stack);
}

/* ---- CUDA ---- */

/* The single stride that walks the batch dimensions in order, if one exists. */
static int batch_stride(const shape* s, int64_t* bs) {
    int64_t expect = -1;
    *bs = 0;
    for (int64_t i = s->dim - 3; i >= 0; --i) {
        if (s->sizes[i] == 1) continue;
        if (expect >= 0 && s->strides[i] != expect) return 0;
        if (expect < 0) *bs = s->strides[i];
        expect = s->strides[i] * s->sizes[i];
    }
    return 1;
}

/* torch's cuBLAS handle for the current stream, for the families that call cuBLAS (qr2_problem.blas_handle). */
static int blas_handle(void** handle) { return torch_get_current_cuda_blas_handle(handle) != 0; }

static void geqrf_cuda(StableIValue* stack, uint64_t num_args, uint64_t num_outputs) {
    call c = {.input = (AtenTensorHandle)(uintptr_t)stack[0]};
    shape s = {0};
    int64_t on_stack[3 * MAX_DIM];
    if (num_args != 1 || num_outputs != 2) fail(&c, "qr2.geqrf: expected 1 argument and 2 returns");
    inspect(&c, &s);
    if (c.failed || empty_problem(&c, &s, on_stack) || s.dtype != aoti_torch_dtype_float32()) {
        if (!c.failed && !c.h) delegate_to_aten(&c, &s); /* float64 and complex: documented delegation */
        finish(&c, stack);
        return;
    }

    const int64_t d = s.dim, m = s.sizes[d - 2], n = s.sizes[d - 1], batch = batch_of(&s);
    if (m > INT32_MAX || n > INT32_MAX || batch > INT32_MAX)
        fail(&c, "qr2.geqrf: expected m, n and the batch size each below 2^31, got m=%" PRId64 ", n=%" PRId64
                 ", batch=%" PRId64, m, n, batch);

    int32_t device = 0;
    void* stream = 0;
    TRY(&c, aoti_torch_get_device_index(c.input, &device), "aoti_torch_get_device_index");
    int current = -1;
    if (!c.failed && qr2_cuda_current_device(&current)) fail(&c, "%s", qr2_cuda_last_error());
    if (!c.failed && current != device) /* a guard costs a C++ object and two device switches per call */
        TRY(&c, aoti_torch_create_cuda_guard(device, &c.guard), "aoti_torch_create_cuda_guard");
    TRY(&c, aoti_torch_get_current_cuda_stream(device, &stream), "aoti_torch_get_current_cuda_stream");
    allocate_outputs(&c, &s, aoti_torch_dtype_float32(), aoti_torch_device_type_cuda(), device, on_stack);
    if (c.failed) {
        finish(&c, stack);
        return;
    }

    qr2_device dev;
    if (qr2_cuda_device(device, &dev)) fail(&c, "%s", qr2_cuda_last_error());
    qr2_problem p = {.batch = batch, .m = (int)m, .n = (int)n, .dev = &dev, .stream = stream, .blas_handle = blas_handle};
    const qr2_config* config = c.failed ? 0 : qr2_policy_pick(m, n, batch, &dev);
    if (!c.failed && !config) fail(&c, "qr2.geqrf: no configuration runs m=%" PRId64 ", n=%" PRId64, m, n);
    TRY(&c, aoti_torch_get_data_ptr(c.h, (void**)&p.h), "aoti_torch_get_data_ptr(H)");
    TRY(&c, aoti_torch_get_data_ptr(c.tau, (void**)&p.tau), "aoti_torch_get_data_ptr(tau)");

    int64_t a_bs = 0;
    if (!c.failed && batch_stride(&s, &a_bs)) { /* the kernels read A through its strides */
        TRY(&c, aoti_torch_get_data_ptr(c.input, (void**)&p.a), "aoti_torch_get_data_ptr(A)");
        p.a_rs = s.strides[d - 2];
        p.a_cs = s.strides[d - 1];
        p.a_bs = a_bs;
    } else if (!c.failed) { /* batch dimensions that no single stride walks: torch lays A out in H first */
        TRY(&c, aoti_torch_copy_(c.h, c.input, 0), "copying A into H");
        p.a = p.h;
        p.a_rs = 1;
        p.a_cs = m;
        p.a_bs = m * n;
    }

    float* work = 0;
    const int64_t work_floats = c.failed ? 0 : config->family->workspace_floats(config, &p);
    if (work_floats > 0) {
        int64_t size = work_floats, stride = 1;
        allocate(&c, &c.work, 1, &size, &stride, device, size, "the workspace");
        TRY(&c, aoti_torch_get_data_ptr(c.work, (void**)&work), "aoti_torch_get_data_ptr(workspace)");
    }
    if (!c.failed && config->family->run(config, &p, work) != 0) fail(&c, "%s", qr2_cuda_last_error());
    /* The workspace handle is dropped now: the caching allocator reuses the block only for work
     * queued later on the same stream, after ours. */
    finish(&c, stack);
}

/* ---- Autograd ---- */

/* Runs operator `op` on the input through the dispatcher (which takes the input handle). */
static void nested(call* c, const char* op) {
    StableIValue st[2] = {(StableIValue)(uintptr_t)c->input, 0};
    c->input = 0;
    raised[0] = 0;
    if (torch_call_dispatcher(op, "", st, QR2_TORCH_ABI_2_11) != 0) {
        if (raised[0]) fail(c, "%s", raised);
        else fail(c, "qr2.geqrf: %s failed (torch logged the reason)", op);
        return;
    }
    c->h = (AtenTensorHandle)(uintptr_t)st[0];
    c->tau = (AtenTensorHandle)(uintptr_t)st[1];
}

/* What autograd must do with A, probed by one aten::_unpack_dual(A, 0) (torch allows one forward-AD level, 0):
 * RAISE if A carries a forward-AD tangent (torch.geqrf has no forward derivative and raises; the autograd fallback
 * under _geqrf_impl would drop the tangent, a zero derivative), TRACK if grad mode is on and A requires grad (the
 * primal, an autograd view of A, then has history: aten::is_leaf is false), else PLAIN. The stable ABI has no
 * requires_grad or tangent getter. */
enum { PLAIN, TRACK, RAISE };

static int autograd_need(call* c) {
    AtenTensorHandle probe = 0;
    TRY(c, aoti_torch_new_tensor_handle(c->input, &probe), "aoti_torch_new_tensor_handle");
    if (c->failed) return PLAIN;
    StableIValue st[2] = {(StableIValue)(uintptr_t)probe, 0 /* level */};
    TRY(c, torch_call_dispatcher("aten::_unpack_dual", "", st, QR2_TORCH_ABI_2_11), "aten::_unpack_dual");
    if (c->failed) return PLAIN;
    AtenTensorHandle primal = (AtenTensorHandle)(uintptr_t)st[0], tangent = (AtenTensorHandle)(uintptr_t)st[1];
    bool has_tangent = false;
    TRY(c, aoti_torch_is_defined(tangent, &has_tangent), "aoti_torch_is_defined");
    release(&tangent);
    int need = has_tangent ? RAISE : PLAIN;
    if (!c->failed && need == PLAIN && aoti_torch_grad_mode_is_enabled()) {
        StableIValue leaf[1] = {(StableIValue)(uintptr_t)primal};
        primal = 0; /* the dispatcher takes it */
        TRY(c, torch_call_dispatcher("aten::is_leaf", "", leaf, QR2_TORCH_ABI_2_11), "aten::is_leaf");
        if (!c->failed && (leaf[0] & 0xff) == 0) need = TRACK;
    }
    release(&primal);
    return c->failed ? PLAIN : need;
}

/* Inputs that require grad under grad mode go to _geqrf_tracked, whose outputs' backward raises; every other
 * call runs _geqrf_impl, below autograd. Shape and dtype errors are raised here first, so they keep their
 * text under fake tensors too. */
static void geqrf_autograd(StableIValue* stack, uint64_t num_args, uint64_t num_outputs) {
    call c = {.input = (AtenTensorHandle)(uintptr_t)stack[0]};
    shape s = {0};
    if (num_args != 1 || num_outputs != 2) fail(&c, "qr2.geqrf: expected 1 argument and 2 returns");
    check_kind(&c, &s);
    const int need = c.failed ? PLAIN : autograd_need(&c);
    if (need == RAISE)
        fail(&c, "qr2.geqrf: forward-mode AD is not supported: the operator has no forward derivative (torch.geqrf "
                 "has none either)");
    if (!c.failed) nested(&c, need == TRACK ? "qr2::_geqrf_tracked" : "qr2::_geqrf_impl");
    finish(&c, stack);
}

/* ---- registration ---- */

static TorchLibraryHandle lib_def, lib_cpu, lib_cuda, lib_autograd; /* kept for the life of the process */
static int registered;

QR2_EXPORT int qr2_register(char* err, size_t err_len) {
    if (registered) return 0;
    const uint64_t abi = aoti_torch_abi_version();
    if ((abi >> 48) < (QR2_TORCH_ABI_2_11 >> 48)) {
        snprintf(err, err_len, "qr2 needs torch >= 2.11 (stable ABI 0x%016" PRIx64 "), found 0x%016" PRIx64,
                 (uint64_t)QR2_TORCH_ABI_2_11, abi);
        return 1;
    }
    const char* step = 0;
    if (aoti_torch_library_init_def("qr2", __FILE__, __LINE__, &lib_def)) step = "aoti_torch_library_init_def(qr2)";
    else if (aoti_torch_library_def(lib_def, SCHEMA)) step = "aoti_torch_library_def(" SCHEMA ")";
    else if (aoti_torch_library_def(lib_def, SCHEMA_IMPL)) step = "aoti_torch_library_def(" SCHEMA_IMPL ")";
    else if (aoti_torch_library_def(lib_def, SCHEMA_TRACKED)) step = "aoti_torch_library_def(" SCHEMA_TRACKED ")";
    else if (aoti_torch_library_init_impl("qr2", "CPU", __FILE__, __LINE__, &lib_cpu)) step = "init_impl(CPU)";
    else if (torch_library_impl(lib_cpu, "geqrf", geqrf_cpu, QR2_TORCH_ABI_2_11)) step = "torch_library_impl(CPU)";
    else if (torch_library_impl(lib_cpu, "_geqrf_impl", geqrf_cpu, QR2_TORCH_ABI_2_11)) step = "_geqrf_impl(CPU)";
    else if (aoti_torch_library_init_impl("qr2", "CUDA", __FILE__, __LINE__, &lib_cuda)) step = "init_impl(CUDA)";
    else if (torch_library_impl(lib_cuda, "geqrf", geqrf_cuda, QR2_TORCH_ABI_2_11)) step = "torch_library_impl(CUDA)";
    else if (torch_library_impl(lib_cuda, "_geqrf_impl", geqrf_cuda, QR2_TORCH_ABI_2_11)) step = "_geqrf_impl(CUDA)";
    else if (aoti_torch_library_init_impl("qr2", "Autograd", __FILE__, __LINE__, &lib_autograd))
        step = "init_impl(Autograd)";
    else if (torch_library_impl(lib_autograd, "geqrf", geqrf_autograd, QR2_TORCH_ABI_2_11))
        step = "torch_library_impl(Autograd)";
    if (step) {
        snprintf(err, err_len, "qr2: registering qr2::geqrf failed at %s (torch logged the reason)", step);
        return 1;
    }
    registered = 1;
    return 0;
}
