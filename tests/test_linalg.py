"""qr2_op.qr is a drop-in for torch.linalg.qr: shapes, strides, signs and values (bit for bit on the CPU, where both
run LAPACK), every mode, torch.compile, derivatives (qr2's own; torch.linalg.qr's where it has none to offer),
errors; on CUDA, QR2's gates in FP64 against the original input, R equal to qr2.geqrf's upper triangle and
gradients against torch.linalg.qr's in FP64."""
import pytest
import torch

import qr2_op
from conftest import requires_cuda
from reference import EPS32, FACTOR_TOL_MULTIPLIER, ORTH_TOL_MULTIPLIER, generate_input

MODES = ["reduced", "complete", "r"]
# past LAPACK's block size (32) too, where orgqr's blocking decides the bits
SHAPES = [(6, 4), (4, 6), (5, 5), (3, 7, 3), (2, 3, 4, 6), (1, 1), (3, 0, 4), (2, 4, 0), (0, 3, 3), (2, 1, 5), (2, 70, 40),
          (2, 40, 70), (65, 65)]


def _same_layout(x, y):
    return x.shape == y.shape and x.stride() == y.stride() and x.dtype == y.dtype and x.device == y.device


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.complex64], ids=str)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_cpu_matches_torch_linalg_qr_bit_for_bit(shape, mode, dtype):
    A = torch.randn(shape, dtype=dtype)
    Q, R = qr2_op.qr(A, mode)
    Qr, Rr = torch.linalg.qr(A, mode=mode)
    assert _same_layout(Q, Qr) and _same_layout(R, Rr)
    assert torch.equal(Q, Qr) and torch.equal(R, Rr)


def test_default_mode_is_reduced_and_input_is_untouched():
    A = torch.randn(3, 9, 5)
    before = A.clone()
    Q, R = qr2_op.qr(A)
    assert Q.shape == (3, 9, 5) and R.shape == (3, 5, 5)
    assert torch.equal(A, before)


@pytest.mark.parametrize("mode", MODES)
def test_compiles_to_one_graph(mode):
    f = torch.compile(lambda a: qr2_op.qr(a, mode), fullgraph=True, dynamic=True)
    for shape in [(3, 6, 4), (2, 4, 7)]:
        A = torch.randn(shape)
        Q, R = f(A)
        Qr, Rr = torch.linalg.qr(A, mode=mode)
        assert _same_layout(Q, Qr) and _same_layout(R, Rr)
        torch.testing.assert_close(Q, Qr)
        torch.testing.assert_close(R, Rr)


@pytest.fixture
def no_torch_qr(monkeypatch):
    """torch.linalg.qr refuses to run: qr2's decomposition and derivatives must serve the call."""
    torch_qr = torch.linalg.qr

    def refuse(*args, **kwargs):
        raise AssertionError("torch.linalg.qr was called")

    monkeypatch.setattr(torch.linalg, "qr", refuse)
    return torch_qr


# (shape, mode): every mode torch.linalg.qr differentiates (Q with min(m, n) columns), tall, square and wide
DIFFERENTIABLE = [((6, 4), "reduced"), ((5, 5), "complete"), ((4, 6), "reduced"), ((4, 6), "complete"),
                  ((2, 3, 7, 3), "reduced"), ((2, 1, 3), "reduced"), ((3, 1), "reduced"), ((2, 3, 5), "complete")]


@pytest.mark.parametrize("shape,mode", DIFFERENTIABLE, ids=str)
def test_derivatives_pass_gradcheck(shape, mode, no_torch_qr):
    """Reverse and forward mode, batched (vmap) and second derivatives against finite differences in FP64."""
    A = torch.randn(shape, dtype=torch.float64, requires_grad=True)
    f = lambda a: qr2_op.qr(a, mode)  # noqa: E731
    assert torch.autograd.gradcheck(f, (A,), check_forward_ad=True, check_batched_grad=True,
                                    check_batched_forward_grad=True)
    assert torch.autograd.gradgradcheck(f, (A,))


@pytest.mark.parametrize("shape", [(6, 4), (4, 6), (2, 5, 5)], ids=str)
def test_derivatives_match_torch_linalg_qr(shape, no_torch_qr):
    """Gradients of losses that use Q only, R only or both, forward-mode tangents and torch.func's transforms agree
    with torch.linalg.qr's to FP64 rounding."""
    import torch.autograd.forward_ad as fwAD

    torch_qr = no_torch_qr
    A = torch.randn(shape, dtype=torch.float64)
    close = lambda x, y: torch.testing.assert_close(x, y, rtol=1e-10, atol=1e-12)  # noqa: E731
    losses = [lambda q, r: q.sin().sum(), lambda q, r: r.cos().sum(), lambda q, r: (q[..., :1] * r[..., :1, :]).sum()]
    for loss in losses:
        a = A.clone().requires_grad_()
        loss(*qr2_op.qr(a)).backward()
        close(a.grad, torch.func.grad(lambda x: loss(*torch_qr(x)))(A))
    for transform in (torch.func.jacfwd, torch.func.jacrev):
        for out in (0, 1):
            close(transform(lambda a: qr2_op.qr(a)[out])(A), transform(lambda a: torch_qr(a)[out])(A))
    close(torch.func.hessian(lambda a: qr2_op.qr(a)[1].sin().sum())(A),
          torch.func.hessian(lambda a: torch_qr(a)[1].sin().sum())(A))
    tangent = torch.randn_like(A)
    with fwAD.dual_level():
        got = qr2_op.qr(fwAD.make_dual(A, tangent))
        expected = torch_qr(fwAD.make_dual(A, tangent))
        for x, y in zip(got, expected):
            assert _same_layout(fwAD.unpack_dual(x).tangent, x)
            close(fwAD.unpack_dual(x).tangent, fwAD.unpack_dual(y).tangent)
    with torch.no_grad():
        Q, R = qr2_op.qr(A.clone().requires_grad_())
    assert Q.grad_fn is None and R.grad_fn is None


def test_compiled_backward_is_one_graph(no_torch_qr):
    def loss(a):
        Q, R = qr2_op.qr(a)
        return Q.sin().sum() + R.cos().sum()

    f = torch.compile(loss, fullgraph=True, dynamic=True)
    for shape in [(3, 6, 4), (2, 4, 7)]:
        A = torch.randn(shape, requires_grad=True)
        f(A).backward()
        B = A.detach().clone().requires_grad_()
        loss(B).backward()
        torch.testing.assert_close(A.grad, B.grad)


def test_modes_without_derivatives_are_torch_linalg_qr_s():
    """Mode "r", "complete" with m > n and complex input: torch.linalg.qr takes calls that may need a derivative
    and raises (or derives) as it does."""
    for shape, mode in (((5, 3), "r"), ((5, 3), "complete")):
        A = torch.randn(shape, dtype=torch.float64, requires_grad=True)
        with pytest.raises(RuntimeError) as ours:
            sum(x.sum() for x in qr2_op.qr(A, mode) if x.numel()).backward()
        with pytest.raises(RuntimeError) as torchs:
            sum(x.sum() for x in torch.linalg.qr(A, mode=mode) if x.numel()).backward()
        assert str(ours.value) == str(torchs.value)
    A = torch.randn(5, 3, dtype=torch.complex128, requires_grad=True)
    grad = torch.autograd.grad(qr2_op.qr(A)[0].abs().sum(), A)[0]
    assert torch.equal(grad, torch.autograd.grad(torch.linalg.qr(A)[0].abs().sum(), A)[0])


def test_vmap_runs_qr2(monkeypatch):
    """torch.vmap alone needs no derivative: qr2.geqrf batches the samples and torch.linalg.qr is not called."""
    A = torch.randn(3, 2, 7, 5)
    expected = torch.linalg.qr(A)

    def refuse(*args, **kwargs):
        raise AssertionError("torch.linalg.qr was called")

    monkeypatch.setattr(torch.linalg, "qr", refuse)
    Q, R = torch.vmap(qr2_op.qr, in_dims=1)(A.transpose(0, 1))
    assert torch.equal(Q, expected[0]) and torch.equal(R, expected[1])


def test_bad_input_raises_clearly():
    with pytest.raises(TypeError, match="qr2.qr: expected a Tensor, got list"):
        qr2_op.qr([[1.0]])
    with pytest.raises(RuntimeError, match="qr2.qr: expected mode 'reduced', 'complete' or 'r', got 'full'"):
        qr2_op.qr(torch.randn(3, 3), "full")
    with pytest.raises(RuntimeError, match=r"qr2.qr: expected a tensor of shape \(\*, m, n\).* got 1 dimension"):
        qr2_op.qr(torch.randn(3))
    with pytest.raises(RuntimeError, match="qr2.geqrf: expected a float32, float64, complex64 or complex128 tensor"):
        qr2_op.qr(torch.ones(3, 3, dtype=torch.int32))


def _gates(A, Q, R):
    """QR2's gates in FP64 against the original input, per matrix: ||A - Q R||_1 <= 20 n eps32 ||A||_1 and
    ||Q^T Q - I||_1 <= 100 n eps32 (n = max(m, n)); returns the scaled residuals."""
    A64, Q64, R64 = A.double(), Q.double(), R.double()
    n_eff = max(A.shape[-2:])
    norm = torch.linalg.matrix_norm(A64, ord=1)
    factor = torch.linalg.matrix_norm(A64 - Q64 @ R64, ord=1) / (EPS32 * n_eff * norm)
    k = Q.shape[-1]
    eye = torch.eye(k, dtype=torch.float64, device=A.device)
    orth = torch.linalg.matrix_norm(Q64.mT @ Q64 - eye, ord=1) / (EPS32 * n_eff)
    assert torch.isfinite(factor).all() and torch.isfinite(orth).all()
    assert factor.max() <= FACTOR_TOL_MULTIPLIER, factor.max()
    assert orth.max() <= ORTH_TOL_MULTIPLIER, orth.max()


@requires_cuda
@pytest.mark.parametrize("mode", ["reduced", "complete"])
@pytest.mark.parametrize("profile", ["dense", "rankdef", "clustered", "nearcollinear", "mixed"])
@pytest.mark.parametrize("batch,n", [(20, 32), (40, 176), (8, 352), (4, 1024)], ids=str)
def test_cuda_within_qr2_gates(batch, n, profile, mode):
    A = generate_input(batch, n, 1000, 1234, profile)
    before = A.clone()
    Q, R = qr2_op.qr(A, mode)
    Qr, Rr = torch.linalg.qr(A[:1], mode=mode)
    assert Q.stride()[1:] == Qr.stride()[1:] and R.stride()[1:] == Rr.stride()[1:]
    H, _ = torch.ops.qr2.geqrf(A)
    assert torch.equal(R, torch.triu(H))
    assert torch.equal(A, before)
    _gates(A, Q, R)


@requires_cuda
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", [(30, 500, 200), (30, 200, 500), (2, 3000, 64)], ids=str)
def test_cuda_rectangular(shape, mode):
    A = torch.randn(shape, device="cuda")
    Q, R = qr2_op.qr(A, mode)
    Qr, Rr = torch.linalg.qr(A, mode=mode)
    assert _same_layout(Q, Qr) and _same_layout(R, Rr)
    H, _ = torch.ops.qr2.geqrf(A)
    rows = shape[-2] if mode == "complete" else min(shape[-2:])
    assert torch.equal(R, torch.triu(H[..., :rows, :]))
    if mode != "r":
        _gates(A, Q, R)


@requires_cuda
@pytest.mark.parametrize("shape", [(8, 64, 48), (4, 300, 200), (2, 100, 150), (2, 128, 128)], ids=str)
def test_cuda_gradients_match_torch_in_fp64(shape, no_torch_qr):
    """Backward of an FP32 CUDA batch (qr2's kernels forward) against torch.linalg.qr's in FP64 on the same input:
    a wrong term of the derivative is an O(1) error; FP32 rounding amplified by R's condition stays far below."""
    torch_qr = no_torch_qr
    A = torch.randn(shape, device="cuda")
    gQ = torch.randn(*shape[:-1], min(shape[-2:]), device="cuda")
    gR = torch.randn(*shape[:-2], min(shape[-2:]), shape[-1], device="cuda")
    a = A.clone().requires_grad_()
    Q, R = qr2_op.qr(a)
    torch.autograd.backward((Q, R), (gQ, gR))
    a64 = A.double().requires_grad_()
    Q64, R64 = torch_qr(a64)
    # LAPACK's signs agree between FP32 and FP64 here (|R's diagonal| is far from zero), so the cotangents carry over
    assert torch.equal(torch.sign(R.diagonal(dim1=-2, dim2=-1)), torch.sign(R64.diagonal(dim1=-2, dim2=-1)).float())
    torch.autograd.backward((Q64, R64), (gQ.double(), gR.double()))
    err = torch.linalg.matrix_norm(a.grad.double() - a64.grad) / torch.linalg.matrix_norm(a64.grad)
    assert err.max() <= 1e-3, err.max()
