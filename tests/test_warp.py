"""cuda/whole/warp.cu: whole small matrices (n <= 32 with m <= 96, n <= 64 with m <= 64) factored by one warp,
a lane per column (routes `warp`, `warp`, `warp` and `warp`;
`warp` is forced here so that every case reaches the kernel)."""
import pytest
import torch

import qr2_op
import whole_matrix
from conftest import requires_cuda
from reference import CASE_NAMES, generate_input
from whole_matrix import check

pytestmark = requires_cuda

ROUTE = "warp"


def holds(m, n):
    return (n <= 32 and m <= 96) or (n <= 64 and m <= 64)


@pytest.fixture(autouse=True)
def forced():
    qr2_op._force_config(ROUTE)
    yield
    qr2_op._force_config(None)


def test_the_policy_sends_small_and_many_matrices_here():
    qr2_op._force_config(None)
    for m, n in [(32, 32), (1, 1), (8, 8), (32, 1), (1, 32), (17, 29)]:  # m, n <= 32: past 640 matrices
        for batch in (641, 1000, 100000):
            assert qr2_op.config_for(m, n, batch) == ROUTE, (m, n, batch)
        assert qr2_op.config_for(m, n, 640) == "quad", (m, n)
    for m, n in [(96, 32), (64, 1), (33, 32)]:  # the rest it holds of n <= 32: past 132 matrices
        assert holds(m, n) and qr2_op.config_for(m, n, 133) == "warp", (m, n)
        assert qr2_op.config_for(m, n, 132) not in (ROUTE, "warp"), (m, n)
    # 33 <= n <= 64: past builder' first wave (792 matrices for n <= 48, 528 for n >= 49)
    for m, n, first in [(64, 64, 529), (1, 64, 529), (64, 49, 529), (50, 40, 793), (33, 33, 793), (1, 48, 793)]:
        route = "warp" if n <= 48 else "warp"
        assert holds(m, n) and qr2_op.config_for(m, n, first) == route, (m, n)
        assert qr2_op.config_for(m, n, first - 1) == "builder", (m, n)
    warp_routes = (ROUTE, "warp", "warp", "warp")
    for m, n in [(65, 64), (97, 32), (96, 33), (256, 1), (96, 96)]:  # too large
        assert qr2_op.config_for(m, n, 1000) not in warp_routes, (m, n)


@pytest.mark.parametrize("case", CASE_NAMES)
@pytest.mark.parametrize("n", [32, 64], ids=lambda n: f"n{n}")
def test_every_profile(n, case):
    for cond in (1, 1000):  # 1000: columns fall below FP32's range (subnormal and zero columns)
        check(generate_input(batch=12, n=n, cond=cond, seed=n + len(case), case=case))


SHAPES = [(n, n) for n in (1, 2, 3, 4, 5, 7, 8, 9, 13, 16, 17, 31, 32, 33, 47, 48, 49, 63, 64)] + [
    (96, 32), (96, 1), (90, 31), (95, 17), (65, 32), (33, 64), (64, 33), (1, 64), (64, 1), (2, 9), (9, 2),
    (5, 64), (40, 50), (50, 40), (96, 7), (77, 32)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_shapes(shape):
    assert holds(*shape)
    check(torch.randn(5, *shape, device="cuda"))


@pytest.mark.parametrize("batch", [1, 20, 132, 133, 264, 265, 640, 1000])
def test_batch_sizes(batch):  # 132 / 264: the warps per block change there
    check(torch.randn(batch, 32, 32, device="cuda"))
    check(torch.randn(batch, 60, 40, device="cuda"))


def test_strided_inputs_are_read_in_place():
    base = torch.randn(6, 5, 70, 50, device="cuda")
    for A in (base[..., :50, :].transpose(-1, -2), base[:, :, ::2, 1:], base.permute(1, 0, 2, 3)[..., :64, :],
              base[0, :, :64, :64], torch.randn(1, 30, 30, device="cuda").expand(4, 30, 30),
              base.transpose(0, 1)[::2, :, :33, :]):
        before = A.clone()
        check(A)
        assert torch.equal(A, before)  # never modified


def test_lapack_conventions_match_torch():
    whole_matrix.lapack_conventions_match_torch(48)


def test_zero_and_triangular_inputs():
    whole_matrix.zero_and_triangular_inputs(90, 30, [0, 17])


@pytest.mark.parametrize("scale", [1e-38, 1e-30, 1e30, 1e36], ids=str)
def test_tiny_and_huge_values(scale):
    whole_matrix.tiny_and_huge_values(60, scale)


def test_rows_scaled_over_many_decades():
    check(torch.randn(4, 64, 64, device="cuda") * torch.logspace(-15, 15, 64, device="cuda")[:, None])
    check(torch.randn(4, 96, 32, device="cuda") * torch.logspace(-15, 15, 96, device="cuda")[:, None])


@pytest.mark.parametrize("bad", [float("nan"), float("inf")], ids=str)
def test_nan_and_inf_stay_in_their_matrix(bad):
    whole_matrix.nan_and_inf_stay_in_their_matrix(300, 64, bad)  # 300: several matrices share a block


def test_one_kernel_per_call():
    whole_matrix.one_kernel_per_call((20, 32, 32), "warp_kernel")


def test_side_stream_and_cuda_graph():
    whole_matrix.side_stream_and_cuda_graph((20, 32, 32))


def test_repeatable_bit_for_bit():
    """Reflectors pass between lanes through shared memory, ordered by __syncwarp only; a missed
    synchronisation would show up as run-to-run differences."""
    whole_matrix.repeatable_bit_for_bit((300, 64, 64))
