"""qr2.orgqr and qr2.ormqr are drop-ins for torch.linalg.householder_product and torch.ormqr: shapes, strides, checks
and values (bit for bit on the CPU, where both run LAPACK), fake tensors, torch.compile, vmap; on CUDA, qr2's blocked
update within QR2's gates against FP64 products of the same reflectors. Their derivatives: test_derivatives.py."""
import pytest
import torch

import qr2_op
from conftest import requires_cuda
from reference import CASE_NAMES, EPS32, FACTOR_TOL_MULTIPLIER, ORTH_TOL_MULTIPLIER, check_qr, generate_input

SIDES = [(True, False), (True, True), (False, False), (False, True)]  # (left, transpose)


def _same_layout(x, y):
    return x.shape == y.shape and x.stride() == y.stride() and x.dtype == y.dtype and x.device == y.device


def _reflectors(shape, dtype=torch.float32, device="cpu", k=None):
    H, tau = torch.geqrf(torch.randn(shape, dtype=dtype, device=device))
    return H, tau if k is None else tau[..., :k].contiguous()


def _other(shape_h, left, cols, dtype=torch.float32, device="cpu"):
    *batch, mn, _ = shape_h
    return torch.randn((*batch, mn, cols) if left else (*batch, cols, mn), dtype=dtype, device=device)


# ---- CPU: aten's operators behind qr2's checks ----

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.complex64], ids=str)
@pytest.mark.parametrize("shape,k", [((6, 4), None), ((3, 7, 5), 3), ((2, 2, 9, 9), None), ((4, 4), 0), ((0, 5, 3), None),
                                     ((2, 70, 40), None)], ids=str)
def test_orgqr_cpu_is_householder_product_bit_for_bit(shape, k, dtype):
    H, tau = _reflectors(shape, dtype, k=k)
    Q, Qr = qr2_op.orgqr(H, tau), torch.linalg.householder_product(H, tau)
    assert _same_layout(Q, Qr) and torch.equal(Q, Qr)


@pytest.mark.parametrize("left,transpose", SIDES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.complex128], ids=str)
@pytest.mark.parametrize("shape", [(6, 4), (3, 5, 5), (2, 4, 7), (2, 70, 40)], ids=str)
def test_ormqr_cpu_is_torch_ormqr_bit_for_bit(shape, dtype, left, transpose):
    H, tau = _reflectors(shape, dtype)
    C = _other(shape, left, 3, dtype)
    X, Xr = qr2_op.ormqr(H, tau, C, left, transpose), torch.ormqr(H, tau, C, left, transpose)
    assert _same_layout(X, Xr) and torch.equal(X, Xr)


BAD_ORGQR = [
    (lambda: (torch.randn(4, 6), torch.randn(4)), r"qr2\.orgqr: expected A of shape \(\*, m, n\) with m >= n, got m=4"),
    (lambda: (torch.randn(6, 4), torch.randn(5)), r"qr2\.orgqr: expected tau.shape\[-1\] <= A.shape\[-1\], got 5 > 4"),
    (lambda: (torch.randn(2, 6, 4), torch.randn(3, 4)), r"qr2\.orgqr: expected the batch dimensions of tau to equal"),
    (lambda: (torch.randn(2, 6, 4), torch.randn(4)), r"qr2\.orgqr: expected tau to have one dimension less than A"),
    (lambda: (torch.randn(6, 4), torch.randn(4, dtype=torch.float64)),
     r"qr2\.orgqr: expected tau to have A's dtype \(float32\), got float64"),
    (lambda: (torch.randn(6), torch.randn(4)), r"qr2\.orgqr: expected A of shape \(\*, m, n\) with at least 2"),
    (lambda: (torch.randn(6, 4).int(), torch.randn(4)), r"qr2\.orgqr: expected a float32, float64, complex64 or "
                                                        r"complex128 tensor for A, got int32"),
]


@pytest.mark.parametrize("make,message", BAD_ORGQR)
def test_orgqr_bad_input_raises_naming_qr2(make, message):
    A, tau = make()
    with pytest.raises(RuntimeError, match=message):
        qr2_op.orgqr(A, tau)
    if A.dtype.is_floating_point:  # torch's operator takes calls that need derivatives: qr2's text first
        with pytest.raises(RuntimeError, match=message):
            qr2_op.orgqr(A.clone().requires_grad_(), tau)
    with pytest.raises(RuntimeError, match=message.split(", got")[0]):  # the fake too (its sizes may be symbols)
        torch.compile(qr2_op.orgqr, fullgraph=True, backend="eager")(A, tau)


BAD_ORMQR = [
    (lambda: (torch.randn(6, 4), torch.randn(4), torch.randn(5, 3), True),
     r"qr2\.ormqr: expected C.shape\[-2\] == A.shape\[-2\] \(left=True\), got 5 and 6"),
    (lambda: (torch.randn(6, 4), torch.randn(4), torch.randn(3, 5), False),
     r"qr2\.ormqr: expected C.shape\[-1\] == A.shape\[-2\] \(left=False\), got 5 and 6"),
    (lambda: (torch.randn(6, 4), torch.randn(3), torch.randn(6, 3), True),
     r"qr2\.ormqr: expected tau.shape\[-1\] == min\(A.shape\[-2\], A.shape\[-1\]\) = 4, got 3"),
    (lambda: (torch.randn(2, 6, 4), torch.randn(2, 4), torch.randn(3, 6, 3), True),
     r"qr2\.ormqr: expected the batch dimensions of tau and C to equal A.shape\[:-2\], dimension 0 differs"),
    (lambda: (torch.randn(2, 6, 4), torch.randn(2, 4), torch.randn(6, 3), True),
     r"qr2\.ormqr: expected C to have A's number of dimensions"),
    (lambda: (torch.randn(6, 4), torch.randn(4), torch.randn(6, 3, dtype=torch.float64), True),
     r"qr2\.ormqr: expected C to have A's dtype"),
]


@pytest.mark.parametrize("make,message", BAD_ORMQR)
def test_ormqr_bad_input_raises_naming_qr2(make, message):
    A, tau, C, left = make()
    with pytest.raises(RuntimeError, match=message):
        qr2_op.ormqr(A, tau, C, left)
    with pytest.raises(RuntimeError, match=message):
        qr2_op.ormqr(A, tau, C.clone().requires_grad_(), left)
    with pytest.raises(RuntimeError, match=message.split(", got")[0]):
        torch.compile(qr2_op.ormqr, fullgraph=True, backend="eager")(A, tau, C, left)


def test_fakes_have_torch_layouts():
    from torch._subclasses.fake_tensor import FakeTensorMode

    H, tau = _reflectors((3, 9, 5))
    C = _other((3, 9, 5), False, 4)
    Q, X = torch.linalg.householder_product(H, tau), torch.ormqr(H, tau, C, left=False)
    with FakeTensorMode() as mode:
        Hf, tauf, Cf = (mode.from_tensor(t) for t in (H, tau, C))
        assert _same_layout(torch.ops.qr2.orgqr(Hf, tauf), Q)
        assert _same_layout(torch.ops.qr2.ormqr(Hf, tauf, Cf, False, False), X)


def test_opcheck():
    H, tau = _reflectors((2, 7, 4))
    C = _other((2, 7, 4), True, 3)
    torch.library.opcheck(torch.ops.qr2.orgqr, (H, tau))
    torch.library.opcheck(torch.ops.qr2.ormqr, (H, tau, C, True, True))


def test_vmap_maps_every_argument():
    H, tau = _reflectors((3, 8, 5))
    C = _other((3, 8, 5), True, 2)
    assert torch.equal(torch.vmap(qr2_op.orgqr)(H, tau), torch.linalg.householder_product(H, tau))
    Cs = C[0]  # unmapped: shared by every sample
    got = torch.vmap(lambda h, t: qr2_op.ormqr(h, t, Cs, True, True))(H, tau)
    assert torch.equal(got, torch.ormqr(H, tau, Cs.expand(3, 8, 2), True, True))


def test_compiles_to_one_graph():
    f = torch.compile(lambda h, t, c: (qr2_op.orgqr(h, t), qr2_op.ormqr(h, t, c, False, True)), fullgraph=True,
                      dynamic=True)
    for shape in [(3, 6, 4), (2, 9, 7)]:
        H, tau = _reflectors(shape)
        C = _other(shape, False, 5)
        Q, X = f(H, tau, C)
        Qr, Xr = torch.linalg.householder_product(H, tau), torch.ormqr(H, tau, C, False, True)
        assert _same_layout(Q, Qr) and _same_layout(X, Xr)
        torch.testing.assert_close(Q, Qr)
        torch.testing.assert_close(X, Xr)


# ---- CUDA: qr2's kernels ----

def _gate(name, err, scale, size, multiplier):
    """err within QR2's multiplier * size * eps32 * scale, per matrix."""
    units = err / (EPS32 * max(size, 1) * scale.clamp_min(1e-30))
    assert torch.isfinite(units).all() and units.max().item() <= multiplier, f"{name}: {units.max().item():.3g} units"


def _l1(x):
    return torch.linalg.matrix_norm(x.double(), ord=1, dim=(-2, -1))


# single block, several blocks (64 reflectors each), a partial last block, k < n, k = 0, tall, one matrix (the split
# update), odd sizes (no 16-byte rows)
ORGQR_CUDA = [(640, 40, 40, None), (8, 200, 200, None), (3, 300, 150, 70), (2, 129, 129, 0), (1, 2048, 300, None),
              (4, 37, 33, 31), (1, 1500, 1500, None), (60, 96, 64, None)]


@requires_cuda
@pytest.mark.parametrize("batch,m,n,k", ORGQR_CUDA, ids=str)
def test_orgqr_cuda_within_gates(batch, m, n, k):
    H, tau = torch.geqrf(torch.randn(batch, m, n, device="cuda"))
    if k is not None:
        tau = tau[..., :k].contiguous()
    H_in, tau_in = H.clone(), tau.clone()
    Q = qr2_op.orgqr(H, tau)
    assert torch.equal(H, H_in) and torch.equal(tau, tau_in)
    ref = torch.linalg.householder_product(H.double(), tau.double())
    assert _same_layout(Q, torch.linalg.householder_product(H, tau))
    eye = torch.eye(n, dtype=torch.float64, device="cuda")
    _gate("orthogonality", _l1(Q.double().mT @ Q.double() - eye), torch.ones(batch, device="cuda"), n,
          ORTH_TOL_MULTIPLIER)
    _gate("against FP64", _l1(Q.double() - ref), _l1(ref), m, FACTOR_TOL_MULTIPLIER)


@requires_cuda
@pytest.mark.parametrize("left,transpose", SIDES)
@pytest.mark.parametrize("batch,mn,ka,cols", [(16, 200, 200, 70), (2, 300, 120, 129), (1, 1030, 1030, 64),
                                              (5, 33, 47, 9)], ids=str)
def test_ormqr_cuda_within_gates(batch, mn, ka, cols, left, transpose):
    H, tau = torch.geqrf(torch.randn(batch, mn, ka, device="cuda"))
    C = _other(H.shape, left, cols, device="cuda")
    C_in = C.clone()
    X = qr2_op.ormqr(H, tau, C, left, transpose)
    assert torch.equal(C, C_in)
    assert _same_layout(X, torch.ormqr(H, tau, C, left, transpose))
    ref = torch.ormqr(H.double(), tau.double(), C.double(), left, transpose)
    _gate("against FP64", _l1(X.double() - ref), _l1(C), mn, FACTOR_TOL_MULTIPLIER)


@requires_cuda
def test_cuda_reads_any_strides():
    """Row-major H, a batch no single stride walks, a strided tau and C: each read as it lies (or packed first)."""
    H, tau = torch.geqrf(torch.randn(2, 3, 90, 70, device="cuda"))
    Hr = H.contiguous()  # row-major matrices
    Hp = H.transpose(0, 1).contiguous().transpose(0, 1)  # batch dimensions out of order
    tau_s = torch.stack([tau, tau], -1)[..., 0]  # last stride 2
    C = torch.randn(3, 2, 50, 90, device="cuda").transpose(0, 1)
    want_q = qr2_op.orgqr(H, tau)
    want_x = qr2_op.ormqr(H, tau, C.contiguous(), False, False)
    for h in (Hr, Hp):
        torch.testing.assert_close(qr2_op.orgqr(h, tau_s), want_q, rtol=0, atol=0)
        torch.testing.assert_close(qr2_op.ormqr(h, tau_s, C, False, False), want_x, rtol=0, atol=0)


@requires_cuda
def test_cuda_graph_capture_and_side_stream():
    H, tau = torch.geqrf(torch.randn(4, 160, 130, device="cuda"))
    C = torch.randn(4, 160, 20, device="cuda")
    want_q, want_x = qr2_op.orgqr(H, tau), qr2_op.ormqr(H, tau, C, True, True)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        qr2_op.orgqr(H, tau), qr2_op.ormqr(H, tau, C, True, True)  # warm-up off the default stream
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            Q, X = qr2_op.orgqr(H, tau), qr2_op.ormqr(H, tau, C, True, True)
        g.replay()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    assert torch.equal(Q, want_q) and torch.equal(X, want_x)


@requires_cuda
@pytest.mark.parametrize("batch,n", [(8, 256), (3, 600)], ids=str)
@pytest.mark.parametrize("profile", CASE_NAMES)
def test_qr_on_qr2_kernels_within_gates(profile, batch, n):
    """qr2_op.qr's Q comes from qr2.orgqr: QR2's factor and orthogonality gates against the original input, on every
    input profile, and R is geqrf's upper triangle bit for bit."""
    A = generate_input(batch=batch, n=n, cond=1, seed=5, case=profile)
    Q, R = qr2_op.qr(A)
    ok, msg = check_qr(A, (Q, R))
    assert ok, msg
    assert torch.equal(R, torch.triu(qr2_op.geqrf(A)[0]))


@requires_cuda
def test_opcheck_cuda():
    H, tau = torch.geqrf(torch.randn(3, 70, 40, device="cuda"))
    C = torch.randn(3, 9, 70, device="cuda")
    torch.library.opcheck(torch.ops.qr2.orgqr, (H, tau))
    torch.library.opcheck(torch.ops.qr2.ormqr, (H, tau, C, False, True))
