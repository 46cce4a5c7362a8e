/*
 * geqrf_op.c - the qr2::geqrf operator: its boxed kernels for the CPU, CUDA and Autograd dispatch keys, and the
 * registration of every qr2 operator through torch's stable C ABI.
 *
 * Three schemas: qr2::geqrf (public), qr2::_geqrf_impl (the same CPU and CUDA kernels with no Autograd
 * kernel, so torch's autograd fallback passes it through) and qr2::_geqrf_tracked (implemented in
 * Python: outputs whose backward raises, as torch.geqrf's). The Autograd kernel here runs _geqrf_impl,
 * or _geqrf_tracked when A requires grad under grad mode: a Python Autograd kernel cost 4-7 us per call on
 * the H200's host, more than the kernel of a small matrix.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "householder_op.h"
#include "op_shim.h"

#define SCHEMA "geqrf(Tensor A) -> (Tensor, Tensor)"
#define SCHEMA_IMPL "_geqrf_impl(Tensor A) -> (Tensor, Tensor)"
#define SCHEMA_TRACKED "_geqrf_tracked(Tensor A) -> (Tensor, Tensor)"
#define MAX_DIM QR2_MAX_DIM
#define OP "qr2.geqrf"

typedef qr2_shape shape;
/* ---- outputs ---- */

/* H and tau with torch.geqrf's sizes and strides (H column-major per matrix, batch-major outside; tau contiguous), in
 * `dtype` on the given device. on_stack: 3 * MAX_DIM values. */
static void allocate_outputs(qr2_call* c, const shape* s, int32_t dtype, int32_t device_type, int32_t device,
                             int64_t* on_stack) {
    if (c->failed) return;
    const int64_t d = s->dim, m = s->sizes[d - 2], n = s->sizes[d - 1], kmin = m < n ? m : n;
    int64_t* dims = on_stack;
    if (d > MAX_DIM && !(dims = c->heap = malloc(3 * (size_t)d * sizeof(int64_t)))) {
        qr2_fail(c, "out of host memory for %" PRId64 " dimensions", d);
        return;
    }
    int64_t *h_strides = dims, *tau_sizes = dims + d, *tau_strides = dims + 2 * d;
    qr2_column_major_strides(d, s->sizes, h_strides);
    memcpy(tau_sizes, s->sizes, (size_t)(d - 2) * sizeof(int64_t));
    tau_sizes[d - 2] = kmin;
    qr2_contiguous_strides(d - 1, tau_sizes, tau_strides);
    qr2_allocate(c, &c->out[0], d, s->sizes, h_strides, dtype, device_type, device, "H");
    qr2_allocate(c, &c->out[1], d - 1, tau_sizes, tau_strides, dtype, device_type, device, "tau");
}

/* An empty batch or min(m, n) = 0: torch.geqrf's empty outputs, whatever the other sizes, made at once on every device
 * and for every dtype without a LAPACK call (aten's took over ten minutes for 2^40 x 0 x 0). Returns 1 if handled. */
static int empty_problem(qr2_call* c, const shape* s, int64_t* on_stack) {
    if (c->failed || (qr2_batch_of(s, 2) != 0 && s->sizes[s->dim - 2] != 0 && s->sizes[s->dim - 1] != 0)) return 0;
    int32_t device_type = 0, device = 0;
    QR2_TRY(c, aoti_torch_get_device_type(c->in[0], &device_type), "aoti_torch_get_device_type");
    QR2_TRY(c, aoti_torch_get_device_index(c->in[0], &device), "aoti_torch_get_device_index");
    allocate_outputs(c, s, s->dtype, device_type, device, on_stack);
    return 1;
}

/* Hands the call to aten::geqrf (LAPACK on CPU, cuSOLVER on CUDA); it takes the input handle. Its exception text
 * goes only to torch's log, so a failure is diagnosed here: the likeliest reason, memory for the outputs, is tried. */
static void delegate_to_aten(qr2_call* c, const shape* s) {
    int32_t device_type = 0, device = 0;
    QR2_TRY(c, aoti_torch_get_device_type(c->in[0], &device_type), "aoti_torch_get_device_type");
    QR2_TRY(c, aoti_torch_get_device_index(c->in[0], &device), "aoti_torch_get_device_index");
    AtenTensorHandle keep = 0; /* keeps s's sizes alive for the diagnosis: the dispatcher may drop the last reference */
    QR2_TRY(c, aoti_torch_new_tensor_handle(c->in[0], &keep), "aoti_torch_new_tensor_handle");
    if (c->failed) return;
    StableIValue st[2] = {(StableIValue)(uintptr_t)c->in[0], 0};
    c->in[0] = 0; /* the dispatcher steals it, even when it fails */
    if (qr2_redispatch(c, "aten::geqrf", st) == 0) {
        qr2_release(&keep);
        return;
    }
    qr2_call probe = {.op = OP};
    int64_t on_stack[3 * MAX_DIM];
    allocate_outputs(&probe, s, s->dtype, device_type, device, on_stack);
    if (probe.failed)
        qr2_fail(c, "aten::geqrf failed: %s", probe.msg + strlen(OP ": "));
    else
        qr2_fail(c, "aten::geqrf failed (torch logged the reason)");
    qr2_release(&probe.out[0]);
    qr2_release(&probe.out[1]);
    free(probe.heap);
    qr2_release(&keep);
}

static qr2_call start(StableIValue* stack, uint64_t num_args, uint64_t num_outputs) {
    qr2_call c = {.op = OP, .n_out = 2};
    if (num_args >= 1) c.in[0] = (AtenTensorHandle)(uintptr_t)stack[0];
    if (num_args != 1 || num_outputs != 2) qr2_fail(&c, "expected 1 argument and 2 returns");
    return c;
}

static void geqrf_cpu(StableIValue* stack, uint64_t num_args, uint64_t num_outputs) {
    qr2_call c = start(stack, num_args, num_outputs);
    shape s = {0};
    int64_t on_stack[3 * MAX_DIM];
    qr2_inspect(&c, c.in[0], 0, 2, &s);
    if (!empty_problem(&c, &s, on_stack)) delegate_to_aten(&c, &s);
    qr2_finish(&c, stack);
}

/* ---- CUDA ---- */

static void geqrf_cuda(StableIValue* stack, uint64_t num_args, uint64_t num_outputs) {
    qr2_call c = start(stack, num_args, num_outputs);
    shape s = {0};
    int64_t on_stack[3 * MAX_DIM];
    qr2_inspect(&c, c.in[0], 0, 2, &s);
    if (c.failed || empty_problem(&c, &s, on_stack) || s.dtype != aoti_torch_dtype_float32()) {
        if (!c.failed && !c.out[0]) delegate_to_aten(&c, &s); /* float64 and complex: documented delegation */
        qr2_finish(&c, stack);
        return;
    }

    const int64_t d = s.dim, m = s.sizes[d - 2], n = s.sizes[d - 1], batch = qr2_batch_of(&s, 2);
    if (m > INT32_MAX || n > INT32_MAX || batch > INT32_MAX)
        qr2_fail(&c, "expected m, n and the batch size each below 2^31, got m=%" PRId64 ", n=%" PRId64
                     ", batch=%" PRId64, m, n, batch);

    int32_t device = 0;
    void* stream = 0;
    qr2_enter_cuda(&c, c.in[0], &device, &stream);
    allocate_outputs(&c, &s, aoti_torch_dtype_float32(), aoti_torch_device_type_cuda(), device, on_stack);
    if (c.failed) {
        qr2_finish(&c, stack);
        return;
    }

    qr2_device dev;
    if (qr2_cuda_device(device, &dev)) qr2_fail(&c, "%s", qr2_cuda_last_error());
    qr2_problem p = {.batch = batch, .m = (int)m, .n = (int)n, .dev = &dev, .stream = stream,
                     .blas_handle = qr2_blas_handle};
    const qr2_config* config = c.failed ? 0 : qr2_policy_pick(m, n, batch, &dev);
    if (!c.failed && !config) qr2_fail(&c, "no configuration runs m=%" PRId64 ", n=%" PRId64, m, n);
    QR2_TRY(&c, aoti_torch_get_data_ptr(c.out[0], (void**)&p.h), "aoti_torch_get_data_ptr(H)");
    QR2_TRY(&c, aoti_torch_get_data_ptr(c.out[1], (void**)&p.tau), "aoti_torch_get_data_ptr(tau)");

    int64_t a_bs = 0;
    if (!c.failed && qr2_batch_stride(&s, 2, &a_bs)) { /* the kernels read A through its strides */
        QR2_TRY(&c, aoti_torch_get_data_ptr(c.in[0], (void**)&p.a), "aoti_torch_get_data_ptr(A)");
        p.a_rs = s.strides[d - 2];
        p.a_cs = s.strides[d - 1];
        p.a_bs = a_bs;
    } else if (!c.failed) { /* batch dimensions that no single stride walks: torch lays A out in H first */
        QR2_TRY(&c, aoti_torch_copy_(c.out[0], c.in[0], 0), "copying A into H");
        p.a = p.h;
        p.a_rs = 1;
        p.a_cs = m;
        p.a_bs = m * n;
    }

    const int64_t work_floats = c.failed ? 0 : config->family->workspace_floats(config, &p);
    float* work = qr2_workspace(&c, &c.temp[0], device, work_floats);
    if (!c.failed && config->family->run(config, &p, work) != 0) qr2_fail(&c, "%s", qr2_cuda_last_error());
    /* The workspace handle is dropped now: the caching allocator reuses the block only for work
     * queued later on the same stream, after ours. */
    qr2_finish(&c, stack);
}

/* ---- Autograd ---- */

/* Inputs that require grad under grad mode go to _geqrf_tracked, whose outputs' backward raises; every other
 * call runs _geqrf_impl, below autograd. Shape and dtype errors are raised here first, so they keep their
 * text under fake tensors too. A forward-AD tangent raises: torch.geqrf has no forward derivative, and the autograd
 * fallback under _geqrf_impl would drop it (a zero derivative). */
static void geqrf_autograd(StableIValue* stack, uint64_t num_args, uint64_t num_outputs) {
    qr2_call c = start(stack, num_args, num_outputs);
    shape s = {0};
    qr2_check_kind(&c, c.in[0], 0, 2, &s);
    const int need = c.failed ? QR2_PLAIN : qr2_autograd_need(&c, c.in[0]);
    if (need == QR2_RAISE)
        qr2_fail(&c, "forward-mode AD is not supported: the operator has no forward derivative (torch.geqrf has "
                     "none either)");
    if (!c.failed) {
        const char* op = need == QR2_TRACK ? "qr2::_geqrf_tracked" : "qr2::_geqrf_impl";
        StableIValue st[2] = {(StableIValue)(uintptr_t)c.in[0], 0};
        c.in[0] = 0;
        if (qr2_redispatch(&c, op, st)) qr2_fail_nested(&c, op);
    }
    qr2_finish(&c, stack);
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
    else step = qr2_householder_register(lib_def, lib_cpu, lib_cuda, lib_autograd);
    if (step) {
        snprintf(err, err_len, "qr2: registering qr2's operators failed at %s (torch logged the reason)", step);
        return 1;
    }
    registered = 1;
    return 0;
}
