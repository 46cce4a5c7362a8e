"""qr2's own CUDA kernels (cuda/*.cu behind c_api/policy.c): QR2 gates on the QR2 suite, a shape sweep,
LAPACK conventions and hostile inputs."""
import pytest
import torch

from conftest import requires_cuda
from reference import BENCHMARKS, TESTS, check_implementation, generate_input

pytestmark = requires_cuda


def spec_id(spec):
    return f"b{spec['batch']}_n{spec['n']}_c{spec['cond']}_{spec.get('case', 'dense')}_s{spec['seed']}"


def factor(A):
    return torch.ops.qr2.geqrf(A)


@pytest.mark.parametrize("spec", TESTS, ids=spec_id)
def test_qr2_test_cases(spec):
    A = generate_input(**spec)
    ok, msg = check_implementation(A, factor(A.clone()))
    assert ok, msg


@pytest.mark.parametrize("spec", BENCHMARKS, ids=spec_id)
def test_qr2_benchmark_cases(spec):
    A = generate_input(**{**spec, "seed": spec["seed"] + 42})  # the first timed input
    ok, msg = check_implementation(A, factor(A))
    assert ok, msg


SQUARE = [1, 2, 3, 5, 8, 16, 31, 32, 33, 63, 64, 65, 100, 127, 128, 129, 176, 200, 255, 256, 257, 300, 352, 353,
          509, 512, 600]
RECT = [(600, 37), (37, 600), (1000, 64), (64, 1000), (513, 257), (257, 513), (2, 600), (600, 2), (1, 600),
        (600, 1), (4096, 16), (16, 4096), (97, 89), (89, 97), (331, 173)]


@pytest.mark.parametrize("n", SQUARE, ids=lambda n: f"n{n}")
def test_square_sweep(n):
    A = torch.randn(3, n, n, device="cuda")
    ok, msg = check_implementation(A, factor(A))
    assert ok, msg


@pytest.mark.parametrize("shape", RECT, ids=lambda s: f"{s[0]}x{s[1]}")
def test_rectangular_sweep(shape):
    A = torch.randn(2, *shape, device="cuda")
    ok, msg = check_implementation(A, factor(A))
    assert ok, msg


@pytest.mark.parametrize("shape", [(1000, 8, 8), (1000, 32, 32), (300, 64, 48), (1, 600, 600), (7, 7),
                                   (2, 3, 9, 9), (2, 1, 3, 17, 11)], ids=str)
def test_batch_sizes_and_batch_ranks(shape):
    A = torch.randn(shape, device="cuda")
    ok, msg = check_implementation(A, factor(A))
    assert ok, msg


def test_panel_taller_than_shared_memory():
    A = torch.randn(1, 70000, 5, device="cuda")  # one column is 280 KB: factored in global memory
    ok, msg = check_implementation(A, factor(A))
    assert ok, msg


def test_noncontiguous_batch_dims_and_views():
    base = torch.randn(6, 5, 40, 30, device="cuda")
    for A in (base.permute(1, 0, 2, 3), base[:, :, ::2, 1:], base.transpose(-1, -2)[::2],
              torch.randn(1, 50, 50, device="cuda").expand(4, 50, 50), base.transpose(0, 1)[..., :400, :300]):
        ok, msg = check_implementation(A, factor(A))
        assert ok, msg


@pytest.mark.parametrize("n", [16, 200, 700], ids=lambda n: f"n{n}")
def test_zero_matrix_gives_zero_tau(n):
    H, tau = factor(torch.zeros(2, n, n, device="cuda"))
    assert torch.all(tau == 0) and torch.all(H == 0)


@pytest.mark.parametrize("n", [24, 180, 520], ids=lambda n: f"n{n}")
def test_zero_columns_and_upper_triangular_give_tau_zero(n):
    A = torch.randn(2, n, n, device="cuda")
    A[:, :, 3] = 0
    A[:, :, n - 5] = 0
    H, tau = factor(A)
    assert torch.all(tau[:, 3] == 0) and torch.all(tau[:, n - 5] == 0)
    assert check_implementation(A, (H, tau))[0]
    U = torch.triu(torch.randn(2, n, n, device="cuda")) + 2 * torch.eye(n, device="cuda")
    H, tau = factor(U)
    assert torch.all(tau == 0)
    torch.testing.assert_close(H, U, rtol=0, atol=0)  # nothing to annihilate: H is U itself


@pytest.mark.parametrize("n", [16, 150, 400, 1100], ids=lambda n: f"n{n}")
def test_lapack_conventions_match_torch(n):
    """R's diagonal (with its sign) and tau agree with cuSOLVER's to FP32 accuracy on well-conditioned input."""
    A = torch.randn(2, n, n, device="cuda", dtype=torch.float64)
    A = (A + n ** 0.5 * torch.eye(n, device="cuda", dtype=torch.float64)).float()
    H, tau = factor(A)
    Hr, taur = torch.geqrf(A)
    torch.testing.assert_close(H.diagonal(dim1=-2, dim2=-1), Hr.diagonal(dim1=-2, dim2=-1), rtol=2e-3, atol=2e-3)
    torch.testing.assert_close(tau, taur, rtol=2e-3, atol=2e-3)
    assert torch.all((tau[:, :-1] >= 1) & (tau[:, :-1] <= 2)) and torch.all(tau[:, -1] == 0)


@pytest.mark.parametrize("scale", [1e-30, 1e-18, 1e18, 1e30], ids=str)
def test_tiny_and_huge_values_do_not_overflow(scale):
    A = torch.randn(2, 96, 96, device="cuda")
    H, tau = factor(A * scale)
    assert torch.isfinite(H).all() and torch.isfinite(tau).all()
    Href, tauref = factor(A)
    # R scales with A; the reflectors (below the diagonal) and tau are scale-invariant
    torch.testing.assert_close(torch.triu(H) / scale, torch.triu(Href), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(torch.tril(H, -1), torch.tril(Href, -1), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(tau, tauref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")], ids=str)
@pytest.mark.parametrize("n", [20, 300], ids=lambda n: f"n{n}")
def test_nan_and_inf_neither_crash_nor_hang(bad, n):
    A = torch.randn(3, n, n, device="cuda")
    A[1, 4, 2] = bad
    H, tau = factor(A)
    torch.cuda.synchronize()
    assert H.shape == A.shape
    good = check_implementation(A[::2].contiguous(), (H[::2].contiguous(), tau[::2].contiguous()))
    assert good[0], good[1]  # the other matrices of the batch are unaffected
