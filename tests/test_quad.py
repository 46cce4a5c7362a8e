"""cuda/whole/quad.cu: whole small matrices (m, n <= 64) factored by one thread block each, a quad of four lanes per
column (configuration `quad`, forced here so that every case reaches the kernel; the table sends it m, n <= 32)."""
import pytest
import torch

import qr2_op
import whole_matrix
from conftest import requires_cuda
from reference import CASE_NAMES, generate_input
from whole_matrix import check

pytestmark = requires_cuda

ROUTE = "quad"


@pytest.fixture(autouse=True)
def forced():
    qr2_op._force_config(ROUTE)
    yield
    qr2_op._force_config(None)


def test_the_policy_sends_up_to_640_small_matrices_here():
    qr2_op._force_config(None)
    for m, n in [(32, 32), (1, 1), (8, 8), (32, 1), (1, 32), (17, 29)]:
        for batch in (1, 20, 132, 640):
            assert qr2_op.config_for(m, n, batch) == ROUTE, (m, n, batch)
        assert qr2_op.config_for(m, n, 641) == "warp", (m, n)
    for m, n in [(33, 32), (64, 8), (32, 65)]:
        assert qr2_op.config_for(m, n, 20) != ROUTE, (m, n)
    # 33 <= n <= 64 (m <= 64) up to one wave of blocks only
    assert qr2_op.config_for(32, 33, 132) == ROUTE and qr2_op.config_for(32, 33, 133) != ROUTE


def test_holds_exactly_the_matrices_up_to_64_by_64():
    for m, n in [(1, 1), (64, 64), (64, 1), (1, 64), (8, 8), (9, 31), (33, 32)]:
        assert qr2_op._can_run(ROUTE, m, n), (m, n)
    for m, n in [(65, 64), (64, 65), (65, 1)]:
        assert not qr2_op._can_run(ROUTE, m, n), (m, n)


@pytest.mark.parametrize("case", CASE_NAMES)
@pytest.mark.parametrize("n", [8, 16, 32, 64], ids=lambda n: f"n{n}")
def test_every_profile(n, case):
    for cond in (1, 1000):  # 1000: columns fall below FP32's range (subnormal and zero columns)
        check(generate_input(batch=12, n=n, cond=cond, seed=n + len(case), case=case))


# every row count of the four instantiations (rows per lane 2, 4, 8, 16) and every column count of 1-8 warps
SHAPES = [(n, n) for n in (1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 16, 17, 24, 25, 31, 32, 33, 40, 47, 48, 57, 63, 64)] + [
    (32, 1), (1, 32), (32, 9), (9, 32), (2, 9), (9, 2), (16, 32), (32, 16), (31, 17), (17, 31), (5, 24), (27, 3),
    (8, 32), (32, 8), (30, 29), (64, 1), (1, 64), (64, 33), (33, 64), (8, 64), (64, 8), (40, 50), (50, 40)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_shapes(shape):
    assert qr2_op._can_run(ROUTE, *shape)
    check(torch.randn(5, *shape, device="cuda"))


def test_every_shape_up_to_32_by_32_and_the_rows_and_columns_up_to_64():
    for m in range(1, 33):
        for n in range(1, 33):
            check(torch.randn(2, m, n, device="cuda"))
    for k in range(33, 65):
        for m, n in [(k, k), (k, 32), (32, k), (k, 5), (5, k)]:
            check(torch.randn(2, m, n, device="cuda"))


def test_tails_too_small_for_fp32_squares():
    """Column tails 1e-17 below the matrix's largest entry: their FP32 sums of squares fall below the kernel's 2^-100,
    so every reflector takes the FP64 path, which rescales v in shared memory (square, wide, tall; one warp or
    several)."""
    for m, n in [(32, 32), (9, 32), (32, 9), (16, 16), (5, 7), (64, 64), (40, 64)]:
        A = torch.randn(4, m, n, device="cuda")
        A = torch.triu(A) + 1e-17 * torch.tril(A, -1)  # every tail stays ~1e-17: tau ~1e-33, still an FP32 normal
        H, tau = whole_matrix.factor(A)
        assert torch.all(tau[:, :-1] != 0)  # the FP64 path built them: tiny but non-zero tails
        check(A, (H, tau))


@pytest.mark.parametrize("batch", [1, 20, 132, 133, 640, 5000])
def test_batch_sizes(batch):
    check(torch.randn(batch, 32, 32, device="cuda"))
    check(torch.randn(batch, 13, 7, device="cuda"))
    check(torch.randn(batch, 64, 64, device="cuda"))


def test_strided_inputs_are_read_in_place():
    base = torch.randn(6, 5, 70, 50, device="cuda")
    for A in (base[..., :30, :30].transpose(-1, -2), base[:, :, ::3, 1:33], base.permute(1, 0, 2, 3)[..., :32, :20],
              base[0, :, :32, :32], torch.randn(1, 30, 30, device="cuda").expand(4, 30, 30),
              base.transpose(0, 1)[::2, :, :17, :32]):
        before = A.clone()
        check(A)
        assert torch.equal(A, before)  # never modified


def test_first_call_of_a_process():
    whole_matrix.first_call_of_a_process(ROUTE, (3, 64, 64))


@pytest.mark.parametrize("n", [32, 64])
def test_lapack_conventions_match_torch(n):
    whole_matrix.lapack_conventions_match_torch(n)


def test_zero_and_triangular_inputs():
    whole_matrix.zero_and_triangular_inputs(32, 30, [0, 17, 29])
    whole_matrix.zero_and_triangular_inputs(64, 60, [0, 17, 59])


@pytest.mark.parametrize("scale", [1e-38, 1e-30, 1e30, 1e36], ids=str)
def test_tiny_and_huge_values(scale):
    whole_matrix.tiny_and_huge_values(32, scale)


def test_rows_scaled_over_many_decades():
    check(torch.randn(4, 32, 32, device="cuda") * torch.logspace(-15, 15, 32, device="cuda")[:, None])
    check(torch.randn(4, 64, 64, device="cuda") * torch.logspace(-15, 15, 64, device="cuda")[:, None])
    check(torch.randn(4, 32, 20, device="cuda") * torch.logspace(-15, 15, 32, device="cuda")[:, None])


@pytest.mark.parametrize("bad", [float("nan"), float("inf")], ids=str)
def test_nan_and_inf_stay_in_their_matrix(bad):
    whole_matrix.nan_and_inf_stay_in_their_matrix(300, 32, bad)
    whole_matrix.nan_and_inf_stay_in_their_matrix(300, 64, bad)


def test_one_kernel_per_call():
    whole_matrix.one_kernel_per_call((20, 32, 32), "quad_kernel")


def test_side_stream_and_cuda_graph():
    whole_matrix.side_stream_and_cuda_graph((20, 32, 32))


def test_repeatable_bit_for_bit():
    """Reflectors pass between warps through shared memory, ordered by one block barrier per reflector; a missed
    synchronisation would show up as run-to-run differences."""
    whole_matrix.repeatable_bit_for_bit((300, 32, 32))
    whole_matrix.repeatable_bit_for_bit((300, 64, 64))
