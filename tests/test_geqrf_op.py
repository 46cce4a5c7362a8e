"""qr2.geqrf is a drop-in for torch.geqrf: sizes, strides, dtypes, errors, input safety, autograd."""
import contextlib
import subprocess
import sys
import warnings

import pytest
import torch

import qr2_op
from conftest import HAS_CUDA, ROOT, requires_cuda
from reference import check_implementation

# (shape) -> torch.geqrf's layout is the contract, including degenerate sizes
SHAPES = [(8, 8), (5, 4), (4, 5), (3, 8, 8), (2, 3, 5, 4), (1, 1), (3, 1, 7), (2, 7, 1), (2, 1, 1, 6, 6),
          (0, 3, 4), (2, 0, 4), (2, 4, 0), (0, 0), (3, 0, 0), (1, 2, 3, 4, 5)]


def torch_reference(A):
    return torch.geqrf(A.cpu())


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_sizes_and_strides_match_torch(device, shape):
    A = torch.randn(shape, device=device)
    H, tau = torch.ops.qr2.geqrf(A)
    Hr, taur = torch_reference(A)
    assert H.shape == Hr.shape and H.stride() == Hr.stride()
    assert tau.shape == taur.shape and tau.stride() == taur.stride()
    assert H.dtype == tau.dtype == A.dtype
    assert H.device == tau.device == A.device


def test_cpu_results_equal_torch():
    A = torch.randn(4, 9, 6, dtype=torch.float32)
    H, tau = torch.ops.qr2.geqrf(A)
    Hr, taur = torch.geqrf(A)
    assert torch.equal(H, Hr) and torch.equal(tau, taur)


@pytest.mark.parametrize("shape", [(6, 6), (3, 9, 5), (2, 2, 4, 7)], ids=str)
def test_results_pass_the_checker(device, shape):
    A = torch.randn(shape, device=device)
    ok, msg = check_implementation(A, qr2_op.geqrf(A))
    assert ok, msg


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex64, torch.complex128], ids=str)
def test_other_lapack_dtypes_are_delegated_to_aten(device, dtype):
    A = torch.randn(3, 6, 5, dtype=dtype, device=device)
    H, tau = torch.ops.qr2.geqrf(A)
    Hr, taur = torch.geqrf(A)
    assert H.dtype == dtype and H.stride() == Hr.stride()
    torch.testing.assert_close(H, Hr)
    torch.testing.assert_close(tau, taur)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16, torch.int8,
                                   torch.uint8, torch.bool, torch.complex32, torch.float8_e4m3fn], ids=str)
def test_unsupported_dtype_raises(device, dtype):
    A = torch.ones(4, 4, device=device).to(dtype)
    with pytest.raises(RuntimeError, match=r"qr2\.geqrf: expected a float32, float64, complex64 or complex128 "
                                           rf"tensor, got {str(dtype).split('.')[-1]}"):
        torch.ops.qr2.geqrf(A)


@pytest.mark.parametrize("shape", [(), (5,)], ids=str)
def test_too_few_dimensions_raise(device, shape):
    with pytest.raises(RuntimeError, match=r"qr2\.geqrf: expected a tensor of shape \(\*, m, n\).*got "
                                           rf"{len(shape)} dimension"):
        torch.ops.qr2.geqrf(torch.ones(shape, device=device))


@pytest.mark.parametrize("layout", ["sparse_coo", "sparse_csr"])
def test_sparse_input_raises(device, layout):
    A = torch.randn(4, 4, device=device)
    A = A.to_sparse() if layout == "sparse_coo" else A.to_sparse_csr()
    with pytest.raises(RuntimeError, match=r"qr2\.geqrf: expected a dense \(strided\) tensor"):
        torch.ops.qr2.geqrf(A)


def test_errors_leave_the_operator_usable(device):
    for _ in range(50):
        with pytest.raises(RuntimeError):
            torch.ops.qr2.geqrf(torch.ones(3, 3, dtype=torch.int32, device=device))
    A = torch.randn(5, 5, device=device)
    assert check_implementation(A, torch.ops.qr2.geqrf(A))[0]


def noncontiguous_inputs(device):
    base = torch.randn(4, 12, 10, device=device)
    yield "transposed", base.transpose(-1, -2)
    yield "sliced", base[:, 1:9:2, ::3]
    yield "batch_strided", base[::2]
    yield "expanded_batch", torch.randn(1, 7, 7, device=device).expand(5, 7, 7)
    yield "permuted_batch", torch.randn(3, 4, 6, 6, device=device).permute(1, 0, 2, 3)
    yield "row_major_view", torch.randn(6, 8, device=device).t()


def test_noncontiguous_inputs(device):
    for name, A in noncontiguous_inputs(device):
        assert not A.is_contiguous() or name == "expanded_batch"
        H, tau = torch.ops.qr2.geqrf(A)
        Hr, taur = torch.geqrf(A.cpu())
        assert H.stride() == Hr.stride(), name
        ok, msg = check_implementation(A, (H, tau))
        assert ok, f"{name}: {msg}"


def test_input_is_never_modified(device):
    for name, A in noncontiguous_inputs(device):
        before = A.clone()
        torch.ops.qr2.geqrf(A)
        assert torch.equal(A, before), name


def test_outputs_do_not_alias_the_input(device):
    A = torch.randn(3, 5, 5, device=device).transpose(-1, -2).contiguous().transpose(-1, -2)  # already column-major
    H, tau = torch.ops.qr2.geqrf(A)
    assert H.data_ptr() != A.data_ptr()


def test_requires_grad_forward_works_backward_raises(device):
    A = torch.randn(2, 5, 5, device=device, requires_grad=True)
    H, tau = qr2_op.geqrf(A)
    assert check_implementation(A.detach(), (H.detach(), tau.detach()))[0]
    with pytest.raises(RuntimeError, match=r"qr2\.geqrf: the operator is not differentiable"):
        (H.sum() + tau.sum()).backward()


def test_plain_inputs_get_plain_outputs_without_warnings(device):
    """The C Autograd kernel (c_api/geqrf_op.c) runs the op below autograd: no graph, and torch's autograd
    fallback (which would warn on backward) leaves nothing behind."""
    A = torch.randn(2, 6, 4, device=device)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        H, tau = torch.ops.qr2.geqrf(A)
    assert H.grad_fn is None and tau.grad_fn is None and not H.requires_grad
    assert check_implementation(A, (H, tau))[0]


def test_requires_grad_under_no_grad_gives_plain_outputs(device):
    A = torch.randn(2, 5, 5, device=device, requires_grad=True)
    with torch.no_grad():
        H, tau = torch.ops.qr2.geqrf(A)
    assert H.grad_fn is None and not H.requires_grad and not tau.requires_grad
    assert check_implementation(A.detach(), (H, tau))[0]


def test_requires_grad_on_a_non_leaf_input(device):
    A = torch.randn(2, 5, 5, device=device, requires_grad=True) * 2.0  # has a grad_fn
    H, tau = torch.ops.qr2.geqrf(A)
    assert H.requires_grad and H.grad_fn is not None
    assert check_implementation(A.detach(), (H.detach(), tau.detach()))[0]
    with pytest.raises(RuntimeError, match=r"qr2\.geqrf: the operator is not differentiable"):
        H.sum().backward()


@pytest.mark.parametrize("kind", ["plain", "leaf requiring grad", "non-leaf"])
def test_one_factorisation_per_call(device, kind):
    """The Autograd kernel picks the tracked or the plain path before it factors: never both."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        calls = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func in (torch.ops.qr2._geqrf_impl.default, torch.ops.aten.geqrf.default):
                Count.calls += 1
            return func(*args, **(kwargs or {}))

    A = torch.randn(2, 5, 4, device=device, requires_grad=kind != "plain")
    if kind == "non-leaf":
        A = A * 1.0
    with Count():
        H, tau = torch.ops.qr2.geqrf(A)
    assert Count.calls == 1
    assert H.requires_grad == (kind != "plain")


def test_autograd_kernel_is_the_c_one():
    """A Python Autograd kernel cost 4-7 us per call on the H200's host: the op's must stay in C."""
    dump = torch._C._dispatch_dump("qr2::geqrf")
    # (nested tensors have an Autograd key of their own, whose kernel only raises: see qr2_op._reject_nested)
    autograd = [line for line in dump.splitlines() if line.startswith("Autograd") and "NestedTensor" not in line]
    assert len(autograd) == 1 and "geqrf_op.c" in autograd[0], dump


def test_public_wrapper_is_the_op():
    assert "compact Householder" in qr2_op.geqrf.__doc__
    A = torch.randn(4, 4)
    assert all(torch.equal(x, y) for x, y in zip(qr2_op.geqrf(A), torch.ops.qr2.geqrf(A)))
    assert "geqrf(Tensor A) -> (Tensor, Tensor)" in str(torch.ops.qr2.geqrf.default._schema)


@requires_cuda
def test_cuda_calls_do_not_leak_device_memory():
    A = torch.randn(8, 64, 64, device="cuda")
    torch.ops.qr2.geqrf(A)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    for _ in range(20):
        out = torch.ops.qr2.geqrf(A)
        del out
    with pytest.raises(RuntimeError):
        torch.ops.qr2.geqrf(A.to(torch.float16))
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() == before


@pytest.mark.parametrize("entry", ["qr2_op.geqrf", "torch.ops.qr2.geqrf"])
@pytest.mark.parametrize("kind", ["plain", "requires grad", "requires grad, no_grad", "non-leaf", "sparse"])
def test_python_api_and_operator_agree(device, entry, kind):
    """qr2_op.geqrf calls the below-autograd twin itself when nothing needs a graph; the operator's C
    Autograd kernel makes the same choice. Both must give the same outputs, autograd state and errors."""
    fn = qr2_op.geqrf if entry == "qr2_op.geqrf" else torch.ops.qr2.geqrf
    A = torch.randn(3, 6, 5, device=device, requires_grad=kind != "plain" and kind != "sparse")
    if kind == "non-leaf":
        A = A * 1.0
    if kind == "sparse":
        with pytest.raises(RuntimeError, match=r"qr2\.geqrf: expected a dense \(strided\) tensor"):
            fn(A.to_sparse())
        return
    with torch.no_grad() if kind.endswith("no_grad") else contextlib.nullcontext():
        H, tau = fn(A)
    graph = kind in ("requires grad", "non-leaf")
    assert H.requires_grad == graph and tau.requires_grad == graph
    Hr, taur = torch.ops.qr2._geqrf_impl(A.detach())
    assert torch.equal(H.detach(), Hr) and torch.equal(tau.detach(), taur)
    if graph:
        with pytest.raises(RuntimeError, match=r"qr2\.geqrf: the operator is not differentiable"):
            H.sum().backward()


ENTRIES = {"qr2_op.geqrf": qr2_op.geqrf, "torch.ops.qr2.geqrf": torch.ops.qr2.geqrf}


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("transform", ["forward_ad", "jvp", "jacfwd"])
def test_forward_mode_ad_raises(device, entry, transform):
    """torch.geqrf has no forward derivative and raises. Unchecked, torch's autograd fallback would drop A's tangent
    and return outputs without one: a zero derivative."""
    import torch.autograd.forward_ad as fwAD

    fn = ENTRIES[entry]
    A = torch.randn(2, 5, 4, device=device)
    with pytest.raises(RuntimeError, match=r"qr2\.geqrf: forward-mode AD is not supported"):
        if transform == "forward_ad":
            with fwAD.dual_level():
                fn(fwAD.make_dual(A, torch.ones_like(A)))
        elif transform == "jvp":
            torch.func.jvp(lambda a: fn(a)[0], (A,), (torch.ones_like(A),))
        else:
            torch.func.jacfwd(lambda a: fn(a)[0])(A)
    with fwAD.dual_level():  # a forward-AD level, but no tangent on A: an ordinary call
        H, tau = fn(A)
    assert H.grad_fn is None and check_implementation(A, (H, tau))[0]


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("transform", ["vjp", "grad", "vjp, outer level requiring grad", "grad of vmap"])
def test_torch_func_gradient_transforms_raise(device, entry, transform):
    """Inside torch.func's gradient transforms a raising node would be recorded at the innermost level only, and
    gradients at the outer levels would silently skip qr2; so these transforms raise, with qr2's message (torch's
    own custom ops refuse them too)."""
    fn = ENTRIES[entry]
    A = torch.randn(2, 5, 4, device=device)
    with pytest.raises(RuntimeError, match=r"qr2\.geqrf: torch\.func transforms that track gradients"):
        if transform == "vjp":
            torch.func.vjp(fn, A)
        elif transform == "grad":
            torch.func.grad(lambda a: fn(a)[0].sum())(A)
        elif transform == "grad of vmap":
            torch.func.grad(lambda a: torch.vmap(fn)(a)[0].sum() + a.sum())(A)
        else:
            Ar = A.clone().requires_grad_()
            out, _ = torch.func.vjp(fn, Ar)
            (out[0].sum() + Ar.sum()).backward()


@pytest.mark.parametrize("entry", ENTRIES)
def test_vmap_of_an_input_requiring_grad_tracks_it_and_backward_raises(device, entry):
    """A BatchedTensor does not report requires_grad, so the fast path reaches the twin; its vmap rule calls the public
    op, whose Autograd kernel sees the unwrapped input and tracks it."""
    fn = ENTRIES[entry]
    A = torch.randn(3, 5, 4, device=device, requires_grad=True)
    H, tau = torch.vmap(fn)(A)
    assert H.requires_grad and tau.requires_grad
    assert check_implementation(A.detach(), (H.detach(), tau.detach()))[0]
    with pytest.raises(RuntimeError, match=r"qr2\.geqrf: the operator is not differentiable"):
        (H.sum() + A.sum()).backward()


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("in_dim", [0, 1, 2])
def test_vmap_factors_all_samples_in_one_call_with_torch_geqrf_layout(device, entry, in_dim):
    """The vmap rule folds the mapped dimension into the batch: no per-sample fallback (one call per sample, whose
    outputs torch would stack row-major), the same results as one batched call, each sample in torch.geqrf's layout."""
    fn = ENTRIES[entry]
    for op in ("qr2::geqrf", "qr2::_geqrf_impl"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(op, "FuncTorchBatched"), op
    A = torch.randn(4, 6, 5, device=device)
    H, tau = torch.vmap(fn, in_dims=in_dim)(A.movedim(0, in_dim).contiguous())
    Hr, taur = fn(A)
    assert torch.equal(H, Hr) and torch.equal(tau, taur)
    assert H.stride() == torch.geqrf(A.cpu())[0].stride() and H[1].stride() == torch.geqrf(A[1].cpu())[0].stride()
    assert check_implementation(A, (H, tau))[0]


@pytest.mark.parametrize("entry", ENTRIES)
def test_vmap_of_an_unmapped_input(device, entry):
    fn = ENTRIES[entry]
    A, B = torch.randn(3, 5, device=device), torch.randn(2, 3, 5, device=device)
    H, tau = torch.vmap(lambda b: fn(A), randomness="same")(B)  # A is captured, not mapped: every sample is A's QR
    assert H.shape == (2, 3, 5) and torch.equal(H[0], fn(A)[0]) and torch.equal(H[1], H[0])


@pytest.mark.parametrize("value", [None, 3.0, [[1.0, 2.0], [3.0, 4.0]]])
def test_a_non_tensor_raises_type_error(value):
    with pytest.raises(TypeError, match=r"qr2\.geqrf: expected a Tensor"):
        qr2_op.geqrf(value)


@requires_cuda
@pytest.mark.parametrize("shape", [(0, 2**31, 1), (1, 2**31, 0), (2**31, 0, 3), (3, 2**31 + 5, 0)], ids=str)
def test_empty_inputs_with_sizes_past_2_31_give_empty_outputs(shape):
    """torch.geqrf returns empty outputs for these; the kernels' 2^31 limits apply only to matrices that exist."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    H, tau = torch.ops.qr2.geqrf(torch.empty(shape, device="cuda"))
    with FakeTensorMode():
        Hf, tauf = torch.ops.qr2.geqrf(torch.empty(shape, device="cuda"))
    assert H.shape == Hf.shape == shape and H.stride() == Hf.stride()
    assert tau.shape == tauf.shape and tau.stride() == tauf.stride() and tau.numel() == 0


@requires_cuda
def test_an_output_too_large_for_the_gpu_raises_and_leaves_the_operator_usable():
    """H of 8 TB: the caching allocator's exception does not cross the stable ABI, so qr2's message names what it
    asked for; nothing leaks, and the next call works."""
    A = torch.zeros(1, 1, 1, device="cuda").expand(2**17, 2**12, 2**12)  # no memory behind it
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    with pytest.raises(RuntimeError, match=r"qr2\.geqrf: allocating H \(8796093022208 bytes on cuda:0\) failed"):
        torch.ops.qr2.geqrf(A)
    assert torch.cuda.memory_allocated() == before
    B = torch.randn(3, 8, 8, device="cuda")
    assert check_implementation(B, torch.ops.qr2.geqrf(B))[0]


@pytest.mark.parametrize("ndim", [64, 65, 70])
def test_any_number_of_batch_dimensions(device, ndim):
    """torch.geqrf takes any number of dimensions; past 64, qr2 keeps the output strides on the heap."""
    A = torch.randn([1] * (ndim - 3) + [2, 5, 4], device=device)
    H, tau = qr2_op.geqrf(A)
    Hr, taur = torch_reference(A)
    assert H.shape == Hr.shape and H.stride() == Hr.stride() and tau.shape == taur.shape
    assert tau.stride() == taur.stride()
    assert check_implementation(A.reshape(2, 5, 4), (H.reshape(2, 5, 4), tau.reshape(2, 4)))[0]


def test_none_is_named():
    """An absent tensor reaches the operator as an undefined tensor: say so, not "got 1 dimension(s)"."""
    with pytest.raises(RuntimeError, match=r"qr2\.geqrf: expected a Tensor, got None"):
        torch.ops.qr2.geqrf(None)
    with pytest.raises(TypeError, match=r"qr2\.geqrf: expected a Tensor, got NoneType"):
        qr2_op.geqrf(None)


@pytest.mark.parametrize("entry", ["op", "package"])
@pytest.mark.parametrize("dtype", [torch.qint8, torch.quint8, torch.qint32], ids=str)
def test_quantized_input_names_its_dtype(entry, dtype):
    A = torch.quantize_per_tensor(torch.randn(4, 4), 0.1, 0, dtype)
    f = torch.ops.qr2.geqrf if entry == "op" else qr2_op.geqrf
    with pytest.raises(RuntimeError, match=r"qr2\.geqrf: expected a float32, float64, complex64 or complex128 "
                                           rf"tensor, got {str(dtype).split('.')[-1]}$"):
        f(A)


@pytest.mark.parametrize("entry", ["op", "package"])
@pytest.mark.parametrize("layout", [torch.strided, torch.jagged], ids=str)
@pytest.mark.parametrize("requires_grad", [False, True])
def test_nested_tensor_gets_one_clear_error_and_no_trace(device, entry, layout, requires_grad, capfd):
    A = torch.nested.nested_tensor([torch.randn(3, 3), torch.randn(4, 3)], layout=layout, device=device,
                                   requires_grad=requires_grad)
    capfd.readouterr()
    f = torch.ops.qr2.geqrf if entry == "op" else qr2_op.geqrf
    with pytest.raises(RuntimeError, match=r"qr2\.geqrf: expected a dense \(strided\) tensor .*got a nested tensor"):
        f(A)
    err = capfd.readouterr().err
    assert "frame #" not in err and "Exception in aoti_torch" not in err, err[:2000]


@pytest.mark.parametrize("shape", [(0, 2**31, 1), (2**31, 0, 3), (3, 2**31 + 5, 0), (7, 0, 0), (0, 3, 3), (2, 4, 0),
                                   (5, 0)], ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.complex64], ids=str)
def test_empty_problems_return_empty_outputs_without_lapack(device, shape, dtype, capfd):
    """An empty batch or min(m, n) = 0 gives torch.geqrf's empty outputs on every device and dtype, at once: aten's
    own call printed a oneMKL parameter error for 0 x 2^31 x 1."""
    H, tau = torch.ops.qr2.geqrf(torch.empty(shape, device=device, dtype=dtype))
    *batch, m, n = shape
    assert H.shape == shape and H.dtype == dtype and H.device.type == device
    assert tau.shape == (*batch, min(m, n)) and tau.dtype == dtype and tau.numel() == 0
    col_major = torch.empty((*batch, n, m)).transpose(-1, -2)  # torch.geqrf's layout, without the storage
    assert H.stride() == col_major.stride()
    if max(shape) < 100:
        Hr, taur = torch.geqrf(torch.empty(shape, device=device, dtype=dtype))
        assert H.stride() == Hr.stride() and tau.stride() == taur.stride()
    assert "MKL" not in capfd.readouterr().err


def test_empty_batch_of_2_40_matrices_returns_at_once():
    """torch.geqrf on torch.empty(2**40, 0, 0) ran for over ten minutes; qr2 makes the empty outputs itself."""
    code = ("import torch, qr2_op\n"
            "H, tau = torch.ops.qr2.geqrf(torch.empty(2**40, 0, 0))\n"
            "assert H.shape == (2**40, 0, 0) and tau.shape == (2**40, 0)\n")
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]


def test_a_cpu_output_too_large_to_allocate_says_how_much():
    """aten's exception text does not cross the stable ABI; qr2 finds the reason and puts it in its own message."""
    A = torch.zeros(1, 1, 1).expand(2**22, 2**12, 2**12)  # 2^46 floats, no memory behind it
    with pytest.raises(RuntimeError, match=r"qr2\.geqrf: aten::geqrf failed: allocating H \(281474976710656 bytes "
                                           r"on the CPU\) failed: out of memory"):
        torch.ops.qr2.geqrf(A)
    H, tau = torch.ops.qr2.geqrf(torch.eye(3))  # still usable
    assert torch.allclose(torch.triu(H).abs(), torch.eye(3))
