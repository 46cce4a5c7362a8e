"""qr2_op.qr is a drop-in for torch.linalg.qr: shapes, strides, signs and values (bit for bit on the CPU, where both
run LAPACK), every mode, torch.compile, vmap, errors; on CUDA, QR2's gates in FP64 against the original input and R
equal to qr2.geqrf's upper triangle. Its derivatives: test_derivatives.py."""
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
