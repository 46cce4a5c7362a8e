"""cuda/register_qr.cu: whole matrices (m, n <= 256) factored in registers by one block (route `registers`)
or a 2-block cluster (route `registers_cluster2`), each forced here so both kernels see every case."""
import pytest
import torch

import qr2_op
from conftest import requires_cuda
from reference import CASE_NAMES, check_implementation, generate_input

pytestmark = requires_cuda

ROUTES = ["registers", "registers_cluster2"]


def holds(route, m, n):
    """Whether `route`'s kernel can hold m x n: the table tries one block first, then the cluster."""
    table = qr2_op.route_for(m, n, 1)
    return table == route or (route == "registers_cluster2" and table == "registers")


@pytest.fixture(params=ROUTES)
def route(request):
    qr2_op._force_route(request.param)
    yield request.param
    qr2_op._force_route(None)


def factor(A):
    return torch.ops.qr2.geqrf(A)


def check(A, out=None):
    ok, msg = check_implementation(A, factor(A) if out is None else out)
    assert ok, msg


def test_the_table_sends_small_shapes_here():
    for m, n in [(1, 1), (32, 32), (176, 176), (224, 224), (256, 3), (3, 256), (97, 211), (256, 200)]:
        assert qr2_op.route_for(m, n, 40) in ROUTES, (m, n)
    assert qr2_op.route_for(257, 257, 40) not in ROUTES


@pytest.mark.parametrize("case", CASE_NAMES)
@pytest.mark.parametrize("n", [32, 176, 224], ids=lambda n: f"n{n}")
def test_every_profile(route, n, case):
    if not holds(route, n, n):
        pytest.skip(f"{route} cannot hold {n} x {n}")
    for cond in (1, 1000):  # 1000: columns fall below FP32's range (subnormal and zero columns)
        check(generate_input(batch=12, n=n, cond=cond, seed=n + len(case), case=case))


SIZES = [1, 2, 3, 4, 5, 7, 8, 13, 16, 17, 31, 32, 33, 47, 64, 65, 97, 127, 128, 129, 160, 176, 191, 192, 193,
         223, 255, 256]


@pytest.mark.parametrize("n", SIZES, ids=lambda n: f"n{n}")
def test_square_sizes(route, n):
    if not holds(route, n, n):
        pytest.skip(f"{route} cannot hold {n} x {n}")
    check(torch.randn(5, n, n, device="cuda"))


RECT = [(1, 256), (256, 1), (2, 9), (9, 2), (17, 250), (250, 17), (64, 200), (200, 64), (129, 31), (31, 129),
        (191, 256), (256, 191), (255, 128), (128, 255), (101, 103), (103, 101)]


@pytest.mark.parametrize("shape", RECT, ids=lambda s: f"{s[0]}x{s[1]}")
def test_rectangular(route, shape):
    if not holds(route, *shape):
        pytest.skip(f"{route} cannot hold {shape}")
    check(torch.randn(3, *shape, device="cuda"))


@pytest.mark.parametrize("batch", [1, 20, 40, 133, 640, 1000])
def test_batch_sizes(route, batch):
    check(torch.randn(batch, 32, 32, device="cuda"))
    check(torch.randn(batch, 33, 17, device="cuda"))


def test_strided_inputs_are_read_in_place(route):
    base = torch.randn(6, 5, 90, 70, device="cuda")
    for A in (base.transpose(-1, -2), base[:, :, ::2, 1:], base.permute(1, 0, 2, 3), base[0, :, :64, :64],
              torch.randn(1, 50, 50, device="cuda").expand(4, 50, 50), base.transpose(0, 1)[::2]):
        before = A.clone()
        check(A)
        assert torch.equal(A, before)  # never modified


def test_lapack_conventions_match_torch(route):
    n = 96
    A = (torch.randn(4, n, n, device="cuda", dtype=torch.float64) + n ** 0.5 * torch.eye(n, device="cuda",
                                                                                          dtype=torch.float64)).float()
    H, tau = factor(A)
    Hr, taur = torch.geqrf(A)
    torch.testing.assert_close(H, Hr, rtol=2e-3, atol=2e-3)  # the factorisation is unique: all of H agrees
    torch.testing.assert_close(tau, taur, rtol=2e-3, atol=2e-3)
    assert torch.all(tau[:, -1] == 0)


def test_zero_and_triangular_inputs(route):
    H, tau = factor(torch.zeros(3, 40, 40, device="cuda"))
    assert torch.all(H == 0) and torch.all(tau == 0)
    A = torch.randn(3, 150, 120, device="cuda")
    A[:, :, 0] = 0
    A[:, :, 77] = 0
    H, tau = factor(A)
    assert torch.all(tau[:, 0] == 0) and torch.all(tau[:, 77] == 0)
    check(A, (H, tau))
    U = torch.triu(torch.randn(3, 100, 100, device="cuda")) + 3 * torch.eye(100, device="cuda")
    H, tau = factor(U)
    assert torch.all(tau == 0) and torch.equal(H, U)  # nothing to annihilate: H is U, bit for bit


@pytest.mark.parametrize("scale", [1e-38, 1e-30, 1e30, 1e36], ids=str)
def test_tiny_and_huge_values(route, scale):
    A = torch.randn(2, 100, 100, device="cuda")
    H, tau = factor(A * scale)
    Href, tauref = factor(A)
    assert torch.isfinite(H).all() and torch.isfinite(tau).all()
    # power-of-two scaling inside the kernel: R scales with A, the reflectors and tau do not move
    torch.testing.assert_close(torch.triu(H) / scale, torch.triu(Href), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(torch.tril(H, -1), torch.tril(Href, -1), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(tau, tauref, rtol=1e-4, atol=1e-4)


def test_rows_scaled_over_many_decades(route):
    A = torch.randn(4, 64, 64, device="cuda") * torch.logspace(-15, 15, 64, device="cuda")[:, None]
    check(A)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")], ids=str)
def test_nan_and_inf_stay_in_their_matrix(route, bad):
    A = torch.randn(3, 176, 176, device="cuda")
    A[1, 9, 4] = bad
    H, tau = factor(A)
    torch.cuda.synchronize()
    ok, msg = check_implementation(A[::2].contiguous(), (H[::2].contiguous(), tau[::2].contiguous()))
    assert ok, msg


def test_one_kernel_per_call(route):
    A = torch.randn(40, 176, 176, device="cuda")
    factor(A)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        factor(A)
        torch.cuda.synchronize()
    kernels = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    assert len(kernels) == 1 and "register_qr_kernel" in kernels[0], kernels


def test_side_stream_and_cuda_graph(route):
    A = torch.randn(20, 32, 32, device="cuda")
    expected = factor(A)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        got = factor(A)
    torch.cuda.current_stream().wait_stream(side)
    assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        captured = factor(A)
    A.copy_(torch.randn_like(A))
    g.replay()
    torch.cuda.synchronize()
    fresh = factor(A)
    assert torch.equal(captured[0], fresh[0]) and torch.equal(captured[1], fresh[1])


def test_empty_kernel_floor_route_is_measurement_only():
    """`empty_kernel` is not in the table; forcing it launches one kernel and leaves H and tau unset."""
    assert "empty_kernel" not in [name for name, _ in qr2_op.routes()]
    qr2_op._force_route("empty_kernel")
    try:
        H, tau = factor(torch.randn(20, 32, 32, device="cuda"))
    finally:
        qr2_op._force_route(None)
    assert H.shape == (20, 32, 32) and tau.shape == (20, 32)


def test_repeatable_bit_for_bit(route):
    """Reflectors pass between warps (and blocks) through shared memory and mbarriers only; a missed
    synchronisation would show up as run-to-run differences."""
    A = torch.randn(40, 176, 176, device="cuda")
    H0, tau0 = factor(A)
    for _ in range(10):
        H, tau = factor(A)
        assert torch.equal(H, H0) and torch.equal(tau, tau0)
