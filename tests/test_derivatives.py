"""Derivatives of qr2_op.qr, qr2_op.orgqr and qr2_op.ormqr (qr2_op/derivatives.py): reverse, forward, batched and
second derivatives against finite differences in FP64 (gradcheck), against torch's own derivatives, through
torch.func's transforms and torch.compile; on CUDA, gradients of FP32 calls on qr2's kernels against torch's in FP64."""
import pytest
import torch

import qr2_op
from conftest import requires_cuda

SIDES = [(True, False), (True, True), (False, False), (False, True)]  # ormqr's (left, transpose)
CHECKS = dict(check_forward_ad=True, check_batched_grad=True, check_batched_forward_grad=True)


@pytest.fixture(autouse=True)
def _seed():
    """The same inputs every run: comparisons with torch's formulas, which differ from qr2's in rounding, hold to
    tolerances that a random input's conditioning could exceed."""
    torch.manual_seed(0)


def _same_layout(x, y):
    return x.shape == y.shape and x.stride() == y.stride() and x.dtype == y.dtype and x.device == y.device


# ---- qr ----

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
                  ((2, 3, 7, 3), "reduced"), ((2, 1, 3), "reduced"), ((3, 1), "reduced"), ((2, 3, 5), "complete"),
                  ((0, 3), "reduced"), ((3, 0), "reduced"), ((0, 4, 4), "reduced")]


@pytest.mark.parametrize("shape,mode", DIFFERENTIABLE, ids=str)
def test_qr_passes_gradcheck(shape, mode, no_torch_qr):
    """Reverse and forward mode, batched (vmap) and second derivatives against finite differences in FP64."""
    A = torch.randn(shape, dtype=torch.float64, requires_grad=True)
    f = lambda a: qr2_op.qr(a, mode)  # noqa: E731
    assert torch.autograd.gradcheck(f, (A,), **CHECKS)
    assert torch.autograd.gradgradcheck(f, (A,))
    assert type(f(A)[0].grad_fn).__name__ == "_QRBackward"


@pytest.mark.parametrize("shape", [(6, 4), (4, 6), (2, 5, 5)], ids=str)
def test_qr_derivatives_match_torch_linalg_qr(shape, no_torch_qr):
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


def test_qr_nested_forward_mode_is_torch_linalg_qr_s():
    """jacfwd of jacfwd: torch does not differentiate a Function's jvp at the outer level, so those calls go to
    torch.linalg.qr (whose second derivatives are right) instead of returning zero second-order terms."""
    A = torch.randn(5, 3, dtype=torch.float64)
    for out in (0, 1):
        got = torch.func.jacfwd(torch.func.jacfwd(lambda a: qr2_op.qr(a)[out].sin().sum()))(A)
        want = torch.func.jacrev(torch.func.jacrev(lambda a: torch.linalg.qr(a)[out].sin().sum()))(A)
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def test_qr_under_vmap_of_an_input_that_requires_grad(no_torch_qr):
    A = torch.randn(3, 6, 4, requires_grad=True)
    Q, R = torch.vmap(qr2_op.qr)(A)
    (Q.sin().sum() + R.cos().sum()).backward()
    B = A.detach().clone().requires_grad_()
    Q, R = qr2_op.qr(B)
    (Q.sin().sum() + R.cos().sum()).backward()
    torch.testing.assert_close(A.grad, B.grad)


def test_qr_compiled_backward_is_one_graph(no_torch_qr):
    def loss(a):
        Q, R = qr2_op.qr(a)
        return Q.sin().sum() + R.cos().sum()

    f = torch.compile(loss, fullgraph=True, dynamic=True)
    for shape in [(3, 6, 4), (2, 4, 7)]:  # FP64: compiled and eager products may round apart, by conditioning
        A = torch.randn(shape, dtype=torch.float64, requires_grad=True)
        f(A).backward()
        B = A.detach().clone().requires_grad_()
        loss(B).backward()
        torch.testing.assert_close(A.grad, B.grad)


def test_qr_modes_without_derivatives_are_torch_linalg_qr_s():
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


@requires_cuda
@pytest.mark.parametrize("shape", [(8, 64, 48), (4, 300, 200), (2, 100, 150), (2, 128, 128)], ids=str)
def test_qr_cuda_gradients_match_torch_in_fp64(shape, no_torch_qr):
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


# ---- orgqr and ormqr ----

def _reflectors(shape, k=None, zero_tau=None, dtype=torch.float64, device="cpu"):
    """geqrf's (H, tau) of a normal batch; k: the first k of tau; zero_tau: that tau set to zero (H_j = I)."""
    H, tau = torch.geqrf(torch.randn(shape, dtype=dtype, device=device))
    tau = tau if k is None else tau[..., :k].contiguous()
    if zero_tau is not None:
        tau[..., zero_tau] = 0
    return H, tau


def _other(shape_h, left, cols, dtype=torch.float64, device="cpu"):
    *batch, mn, _ = shape_h
    return torch.randn((*batch, mn, cols) if left else (*batch, cols, mn), dtype=dtype, device=device)


@pytest.mark.parametrize("shape,k,zero_tau", [((6, 4), None, None), ((3, 7, 5), 3, None), ((5, 5), None, None),
                                              ((2, 6, 3), 0, None), ((7, 1), None, None), ((2, 7, 4), None, 1)],
                         ids=str)
def test_orgqr_passes_gradcheck(shape, k, zero_tau):
    """Both arguments (A below its diagonal; the rest is not read and gets zero), a tau of zero included."""
    H, tau = _reflectors(shape, k, zero_tau)
    args = (H.requires_grad_(), tau.requires_grad_())
    assert torch.autograd.gradcheck(qr2_op.orgqr, args, **CHECKS)
    assert torch.autograd.gradgradcheck(qr2_op.orgqr, args)
    assert type(qr2_op.orgqr(*args).grad_fn).__name__ == "_OrgqrBackward"


@pytest.mark.parametrize("left,transpose", SIDES)
@pytest.mark.parametrize("shape", [(6, 4), (2, 5, 5), (4, 6), (2, 7, 3)], ids=str)
def test_ormqr_passes_gradcheck(shape, left, transpose):
    H, tau = _reflectors(shape)
    args = (H.requires_grad_(), tau.requires_grad_(), _other(shape, left, 3).requires_grad_())
    f = lambda h, t, c: qr2_op.ormqr(h, t, c, left, transpose)  # noqa: E731
    assert torch.autograd.gradcheck(f, args, **CHECKS)
    assert torch.autograd.gradgradcheck(f, args)
    assert type(f(*args).grad_fn).__name__ == "_OrmqrBackward"


def test_reflector_derivatives_match_torch_s():
    """jacrev and jacfwd of every argument agree with torch's reverse-mode derivatives (torch.ormqr has no forward
    mode; qr2's has) to FP64 rounding."""
    H, tau = _reflectors((2, 7, 4), zero_tau=2)
    close = lambda x, y: torch.testing.assert_close(x, y, rtol=1e-10, atol=1e-12)  # noqa: E731
    for transform in (torch.func.jacrev, torch.func.jacfwd):
        close(transform(qr2_op.orgqr, argnums=(0, 1))(H, tau),
              torch.func.jacrev(torch.linalg.householder_product, argnums=(0, 1))(H, tau))
        for left, transpose in SIDES:
            C = _other(H.shape, left, 3)
            ours = transform(lambda h, t, c: qr2_op.ormqr(h, t, c, left, transpose), argnums=(0, 1, 2))
            torchs = torch.func.jacrev(lambda h, t, c: torch.ormqr(h, t, c, left, transpose), argnums=(0, 1, 2))
            close(ours(H, tau, C), torchs(H, tau, C))


def test_reflector_hessians_match_torch_s():
    """Second derivatives (torch.func.hessian: forward over reverse) of every argument pair, against torch's reverse
    over reverse; ormqr's backward applies Q through qr2_op.ormqr, which is differentiable in turn."""
    H, tau = _reflectors((6, 4), zero_tau=1)
    close = lambda x, y: torch.testing.assert_close(x, y, rtol=1e-9, atol=1e-11)  # noqa: E731
    twice = lambda f: torch.func.jacrev(torch.func.jacrev(f, argnums=(0, 1)), argnums=(0, 1))  # noqa: E731
    close(torch.func.hessian(lambda h, t: qr2_op.orgqr(h, t).sin().sum(), argnums=(0, 1))(H, tau),
          twice(lambda h, t: torch.linalg.householder_product(h, t).sin().sum())(H, tau))
    for left, transpose in SIDES:
        C = _other(H.shape, left, 2)
        ours = torch.func.hessian(lambda h, c: qr2_op.ormqr(h, tau, c, left, transpose).sin().sum(), argnums=(0, 1))
        close(ours(H, C), twice(lambda h, c: torch.ormqr(h, tau, c, left, transpose).sin().sum())(H, C))


def test_reflector_higher_derivatives_stay_on_qr2s_operators():
    """Every qr2::ormqr call of a double backward runs qr2's own kernel (its twin _ormqr_impl), none the raw operator's
    hand-over to aten::ormqr that a call needing derivatives takes."""
    from torch.profiler import profile

    H, tau = _reflectors((2, 6, 4))
    args = [x.requires_grad_() for x in (H, tau, _other(H.shape, True, 3))]
    with profile() as prof:
        grads = torch.autograd.grad(qr2_op.ormqr(*args, True, True).sin().sum(), args, create_graph=True)
        torch.autograd.grad(sum(g.sum() for g in grads), args)
    names = [e.name for e in prof.events()]
    assert names.count("qr2::ormqr") >= 3 and names.count("qr2::ormqr") == names.count("qr2::_ormqr_impl")


def test_reflector_nested_forward_mode_raises():
    H, tau = _reflectors((5, 3))
    C = _other(H.shape, True, 2)
    for name, f in (("orgqr", lambda h: qr2_op.orgqr(h, tau).sum()),
                    ("ormqr", lambda h: qr2_op.ormqr(h, tau, C).sum())):
        with pytest.raises(RuntimeError, match=f"qr2.{name}: forward-mode AD nested in forward-mode AD"):
            torch.func.jacfwd(torch.func.jacfwd(f))(H)


def test_ormqr_gradient_of_c_alone():
    H, tau = _reflectors((2, 6, 4))
    for left, transpose in SIDES:
        C = _other(H.shape, left, 3).requires_grad_()
        grad = torch.autograd.grad(qr2_op.ormqr(H, tau, C, left, transpose).sin().sum(), C)[0]
        want = torch.autograd.grad(torch.ormqr(H, tau, C, left, transpose).sin().sum(), C)[0]
        torch.testing.assert_close(grad, want, rtol=1e-12, atol=1e-12)


def test_ormqr_tangent_of_c_alone_skips_the_reflectors(monkeypatch):
    """Where only C has a tangent the tangent is qr2's ormqr of it: no compact WY form is built."""
    from qr2_op import derivatives

    H, tau = _reflectors((2, 6, 4))
    C = _other(H.shape, True, 3)
    expected = torch.func.jacrev(lambda c: qr2_op.ormqr(H, tau, c))(C)

    def refuse(*args):
        raise AssertionError("the compact WY form was built")

    monkeypatch.setattr(derivatives, "CompactWY", refuse)
    torch.testing.assert_close(torch.func.jacfwd(lambda c: qr2_op.ormqr(H, tau, c))(C), expected)


def test_derivatives_under_autocast_keep_the_arguments_precision():
    """Inside torch.autocast the derivatives' products stay in float32 (the arguments' precision after qr2's cast),
    not in autocast's bfloat16."""
    A = torch.randn(6, 4)
    H, tau = torch.geqrf(A)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for f, args in ((lambda a: qr2_op.qr(a)[1], (A,)), (qr2_op.orgqr, (H, tau)),
                        (lambda h, t: qr2_op.ormqr(h, t, A), (H, tau))):
            jac_fwd = torch.func.jacfwd(f)(*args)
            jac_rev = torch.func.jacrev(f)(*args)
            assert jac_fwd.dtype == jac_rev.dtype == torch.float32
            torch.testing.assert_close(jac_fwd, jac_rev, rtol=1e-4, atol=1e-5)


def test_compiled_func_transforms_with_views():
    """torch.compile(torch.func.grad(...), fullgraph=True), arguments passed as views included: traced inside a
    transform, qr2's Functions gave wrong gradients for views, so there the calls take torch's derivatives. Compiled,
    eager and torch's own gradients agree."""
    H, tau = _reflectors((2, 6, 4))
    C = _other(H.shape, True, 3)
    A = torch.randn(6, 4, dtype=torch.float64)
    cases = [
        (lambda h, t: qr2_op.orgqr(h, t).sin().sum(), lambda h, t: torch.linalg.householder_product(h, t).sin().sum(),
         (H, tau)),
        (lambda h, t, c: qr2_op.ormqr(h, t, c.mT, False, False).sum(),
         lambda h, t, c: torch.ormqr(h, t, c.mT, False, False).sum(), (H, tau, C)),
        (lambda h, t, c: qr2_op.ormqr(h.mT.contiguous().mT, t, c, True, False).cos().sum(),
         lambda h, t, c: torch.ormqr(h.mT.contiguous().mT, t, c, True, False).cos().sum(), (H, tau, C)),
        (lambda a: qr2_op.qr(a[:, :3])[0].sin().sum() + qr2_op.qr(a)[1].sum(),
         lambda a: torch.linalg.qr(a[:, :3])[0].sin().sum() + torch.linalg.qr(a)[1].sum(), (A,)),
    ]
    for ours, torchs, args in cases:
        argnums = tuple(range(len(args)))
        want = torch.func.grad(torchs, argnums=argnums)(*args)
        eager = torch.func.grad(ours, argnums=argnums)(*args)
        compiled = torch.compile(torch.func.grad(ours, argnums=argnums), fullgraph=True)(*args)
        for e, c, w in zip(eager, compiled, want):
            torch.testing.assert_close(e, w, rtol=1e-10, atol=1e-12)
            torch.testing.assert_close(c, w, rtol=1e-10, atol=1e-12)


def test_reflector_derivatives_compile_to_one_graph():
    def loss(h, t, c):
        return qr2_op.orgqr(h, t).sin().sum() + qr2_op.ormqr(h, t, c, False, True).cos().sum()

    f = torch.compile(loss, fullgraph=True, dynamic=True)
    for shape in [(2, 7, 4), (3, 5, 5)]:
        H, tau = _reflectors(shape)
        args = [x.requires_grad_() for x in (H, tau, _other(shape, False, 3))]
        expected = torch.autograd.grad(loss(*args), args)
        for got, want in zip(torch.autograd.grad(f(*args), args), expected):
            torch.testing.assert_close(got, want)


def test_complex_reflector_derivatives_are_torch_s():
    H, tau = _reflectors((5, 3), dtype=torch.complex128)
    C = _other(H.shape, True, 2, torch.complex128)
    H.requires_grad_()
    got = torch.autograd.grad(qr2_op.ormqr(H, tau, C).abs().sum() + qr2_op.orgqr(H, tau).abs().sum(), H)[0]
    torchs = torch.ormqr(H, tau, C).abs().sum() + torch.linalg.householder_product(H, tau).abs().sum()
    want = torch.autograd.grad(torchs, H)[0]
    assert torch.equal(got, want)


def _relative_error(got, want):
    return (torch.linalg.matrix_norm(got.double() - want) / torch.linalg.matrix_norm(want)).max()


@requires_cuda
@pytest.mark.parametrize("batch,m,n", [(8, 64, 48), (4, 300, 200), (2, 128, 128)], ids=str)
def test_reflector_cuda_gradients_match_torch_in_fp64(batch, m, n):
    """FP32 CUDA calls (qr2's kernels forward) against torch's operators in FP64 on the same reflectors."""
    H, tau = _reflectors((batch, m, n), dtype=torch.float32, device="cuda")
    gQ = torch.randn(batch, m, n, device="cuda")
    args = [x.clone().requires_grad_() for x in (H, tau)]
    grads = torch.autograd.grad(qr2_op.orgqr(*args), args, gQ)
    args64 = [x.double().requires_grad_() for x in (H, tau)]
    want = torch.autograd.grad(torch.linalg.householder_product(*args64), args64, gQ.double())
    assert _relative_error(grads[0], want[0]) <= 1e-3
    assert (grads[1].double() - want[1]).norm() <= 1e-3 * want[1].norm()
    for left, transpose in SIDES:
        C = _other((batch, m, n), left, 40, torch.float32, "cuda")
        g = torch.randn_like(C)
        args = [x.clone().requires_grad_() for x in (H, tau, C)]
        grads = torch.autograd.grad(qr2_op.ormqr(*args, left, transpose), args, g)
        args64 = [x.double().requires_grad_() for x in (H, tau, C)]
        want = torch.autograd.grad(torch.ormqr(*args64, left, transpose), args64, g.double())
        for got, ref in zip(grads, want):
            assert (got.double() - ref).norm() <= 1e-3 * ref.norm(), (left, transpose)
