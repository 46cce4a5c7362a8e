"""cuda/whole/builder.cu: whole matrices up to 176 x 176 factored by one thread block each, a builder warp and column warps
(configuration `builder`), or by a cluster of two (`builder_cluster2`), and up to 256 x 256 by a cluster of three
(`builder_cluster3`); each forced here in turn so that every case reaches the kernel (cases a route cannot hold
are skipped: they would fall back to the policy)."""
import pytest
import torch

import qr2_op
import whole_matrix
from conftest import requires_cuda
from reference import CASE_NAMES, generate_input
from whole_matrix import check

pytestmark = requires_cuda

ROUTES = ["builder", "builder_cluster2", "builder_cluster3"]


@pytest.fixture(autouse=True, params=ROUTES)
def route(request):
    qr2_op._force_config(request.param)
    yield request.param
    qr2_op._force_config(None)


def needs(route, m, n):
    if not qr2_op._can_run(route, m, n):
        pytest.skip(f"{route} does not hold {m} x {n}")


def largest(route):
    return 256 if qr2_op._can_run(route, 256, 256) else 176


@pytest.mark.parametrize("case", CASE_NAMES)
@pytest.mark.parametrize("n", [32, 128, 176, 256], ids=lambda n: f"n{n}")
def test_every_profile(n, case, route):
    needs(route, n, n)
    for cond in (1, 1000):  # 1000: columns fall below FP32's range (subnormal and zero columns)
        check(generate_input(batch=6, n=n, cond=cond, seed=n + len(case), case=case))


# every instantiation (columns of 64, 128, 176, 256 rows), every quarter ending the matrix, wide and tall shapes; past
# 176 the three-block cluster only (column blocks dealt 4/4/4 .. 5/5/6, packed reflector tile)
SHAPES = [(n, n) for n in (1, 2, 3, 4, 5, 8, 9, 15, 16, 17, 31, 33, 49, 63, 64, 65, 100, 127, 128, 129, 160, 175, 176,
                           177, 180, 192, 193, 208, 224, 240, 241, 255, 256)] + [
    (176, 1), (1, 176), (176, 97), (97, 176), (130, 60), (60, 130), (12, 170), (170, 12), (68, 68), (66, 150),
    (96, 96), (150, 60), (256, 200), (200, 256), (256, 49), (49, 256), (177, 256), (256, 177), (100, 250), (250, 100),
    (3, 256), (256, 65)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_shapes(shape, route):
    needs(route, *shape)
    check(torch.randn(3, *shape, device="cuda"))


@pytest.mark.parametrize("shape", [(2, 96, 96), (2, 150, 60)], ids=lambda s: f"{s[1]}x{s[2]}")
def test_first_call_needing_just_over_48_kb_of_shared_memory(shape, route):
    # the reflector tile plus the static shared memory just over the default 48 KB
    whole_matrix.first_call_of_a_process(route, shape)


def test_larger_shapes_go_elsewhere(route):
    for m, n in [(177, 176), (176, 177), (256, 256), (257, 256), (256, 257), (300, 300)]:
        if qr2_op._can_run(route, m, n):
            continue
        qr2_op._force_config(route)  # a forced route that cannot hold the shape falls back to the table
        check(torch.randn(2, m, n, device="cuda"))


@pytest.mark.parametrize("batch", [1, 40, 133, 1000])
def test_batch_sizes(batch, route):
    n = largest(route)
    check(torch.randn(batch, n, n, device="cuda"))


def test_strided_inputs_are_read_in_place():
    base = torch.randn(3, 4, 180, 178, device="cuda")
    for A in (base[..., :176, :176].transpose(-1, -2), base[:, :, ::2, 1:], base.permute(1, 0, 2, 3)[..., :100, :150],
              torch.randn(1, 90, 90, device="cuda").expand(3, 90, 90)):
        before = A.clone()
        check(A)
        assert torch.equal(A, before)  # never modified


# each route at its largest shape (the 3-block cluster's 256-row build with its packed tile)
def test_lapack_conventions_match_torch(route):
    whole_matrix.lapack_conventions_match_torch(largest(route))


def test_zero_and_triangular_inputs(route):
    n = largest(route)
    whole_matrix.zero_and_triangular_inputs(n, n - 26, [0, 17, 100])


@pytest.mark.parametrize("scale", [1e-38, 1e-30, 1e30, 1e36], ids=str)
def test_tiny_and_huge_values(scale, route):
    whole_matrix.tiny_and_huge_values(largest(route), scale)


def test_rows_scaled_over_many_decades(route):
    n = largest(route)
    check(torch.randn(4, n, n, device="cuda") * torch.logspace(-15, 15, n, device="cuda")[:, None])


@pytest.mark.parametrize("bad", [float("nan"), float("inf")], ids=str)
def test_nan_and_inf_stay_in_their_matrix(bad, route):
    whole_matrix.nan_and_inf_stay_in_their_matrix(8, largest(route), bad)


def test_one_kernel_per_call(route):
    # the forced route's instantiation ran (its second template argument: blocks per matrix)
    blocks = int(route[-1]) if route[-1].isdigit() else 1
    n = largest(route)
    whole_matrix.one_kernel_per_call((40, n, n), r"builder_kernel<%d, ?%d>" % (64 if blocks > 2 else 44, blocks))


def test_side_stream_and_cuda_graph(route):
    n = largest(route)
    whole_matrix.side_stream_and_cuda_graph((40, n, n))


@pytest.mark.parametrize("n", [176, 256])
def test_repeatable_bit_for_bit(n, route):
    """Reflectors pass between warps through shared memory, ordered by one block barrier each, and between the blocks
    of a cluster by st.async behind an mbarrier each; a missed synchronisation would show up as run-to-run
    differences."""
    needs(route, n, n)
    whole_matrix.repeatable_bit_for_bit((40, n, n))
