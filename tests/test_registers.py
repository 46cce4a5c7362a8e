"""cuda/whole/registers.cu: whole matrices (m, n <= 256) factored in registers by one block (configuration `registers`)
or a 2-block cluster (configuration `registers_cluster2`), each forced here so both kernels see every case."""
import pytest
import torch

import qr2_op
import whole_matrix
from conftest import requires_cuda
from reference import CASE_NAMES, generate_input
from whole_matrix import check, factor

pytestmark = requires_cuda

ROUTES = ["registers", "registers_cluster2"]


def holds(route, m, n):
    """Whether `route`'s kernel can hold m x n (a forced route that cannot falls back to the table)."""
    return qr2_op._can_run(route, m, n)


@pytest.fixture(params=ROUTES)
def route(request):
    qr2_op._force_config(request.param)
    yield request.param
    qr2_op._force_config(None)


def test_the_policy_sends_small_shapes_here():
    for m, n in [(33, 16), (64, 200), (256, 40), (256, 3), (3, 256), (60, 250), (177, 32), (64, 8)]:
        assert qr2_op.config_for(m, n, 40) in ROUTES, (m, n)
    assert qr2_op.config_for(257, 257, 40) not in ROUTES


@pytest.mark.parametrize("case", CASE_NAMES)
@pytest.mark.parametrize("n", [32, 176, 224, 256], ids=lambda n: f"n{n}")
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
    whole_matrix.lapack_conventions_match_torch(96)


def test_zero_and_triangular_inputs(route):
    whole_matrix.zero_and_triangular_inputs(150, 120, [0, 77])


@pytest.mark.parametrize("scale", [1e-38, 1e-30, 1e30, 1e36], ids=str)
def test_tiny_and_huge_values(route, scale):
    whole_matrix.tiny_and_huge_values(100, scale)


def test_rows_scaled_over_many_decades(route):
    check(torch.randn(4, 64, 64, device="cuda") * torch.logspace(-15, 15, 64, device="cuda")[:, None])


@pytest.mark.parametrize("bad", [float("nan"), float("inf")], ids=str)
def test_nan_and_inf_stay_in_their_matrix(route, bad):
    whole_matrix.nan_and_inf_stay_in_their_matrix(3, 160, bad)


def test_one_kernel_per_call(route):
    whole_matrix.one_kernel_per_call((40, 160, 160), "registers_kernel")


def test_side_stream_and_cuda_graph(route):
    whole_matrix.side_stream_and_cuda_graph((20, 32, 32))


def test_empty_kernel_floor_route_is_measurement_only():
    """`empty_kernel` is not in the table; forcing it launches one kernel and leaves H and tau unset."""
    assert "empty_kernel" not in [name for name, _, _ in qr2_op.configs()]
    qr2_op._force_config("empty_kernel")
    try:
        H, tau = factor(torch.randn(20, 32, 32, device="cuda"))
    finally:
        qr2_op._force_config(None)
    assert H.shape == (20, 32, 32) and tau.shape == (20, 32)


def test_repeatable_bit_for_bit(route):
    """Reflectors pass between warps (and blocks) through shared memory and mbarriers only; a missed
    synchronisation would show up as run-to-run differences."""
    whole_matrix.repeatable_bit_for_bit((40, 160, 160))
