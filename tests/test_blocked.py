"""The blocked family (c_api/blocked.c), each configuration forced: `blocked_nb32` and `blocked_nb64` (64-column outer panels
split into two 32-column panels). Their panels of up to 512 rows go to the register kernel of
cuda/whole/registers.cu (which then also writes V and T), taller ones to cuda/blocked/panel_cluster.cu while one cluster holds
them (8192 rows), the tallest to cuda/blocked/panel_tall.cu. Both configurations must pass the QR2 checker on every shape,
profile and batch."""
import pytest
import torch

import qr2_op
import whole_matrix
from conftest import requires_cuda
from reference import CASE_NAMES, generate_input
from whole_matrix import check

pytestmark = requires_cuda

ROUTES = ["blocked_nb32", "blocked_nb64", "blocked_cholqr_nb32"]


@pytest.fixture(params=ROUTES)
def route(request):
    qr2_op._force_config(request.param)
    yield request.param
    qr2_op._force_config(None)


# Panel heights cross every rows-per-lane step of the register panels (32 | 64 | 128 | 256 | 384 | 512), the
# switch to the cluster panel past 512 rows and to the tall-panel kernel past 8192; widths leave a last panel narrower
# than 32.
SHAPES = [(257, 257), (300, 300), (384, 384), (385, 385), (512, 512), (513, 513), (700, 700), (1024, 1024),
          (1100, 40), (512, 33), (513, 95), (40, 1100), (777, 300), (300, 777), (1000, 5), (6, 1000), (65, 300),
          (8193, 32), (10000, 40), (20000, 7), (30000, 70)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_shapes(route, shape):
    A = torch.randn(2, *shape, device="cuda")
    A[..., :, 1] = 0.0  # a zero column: its reflector must be the identity, T's row and column zero
    H, tau = whole_matrix.factor(A)
    check(A, (H, tau))
    assert torch.all(tau[:, 1] == 0)


# Batches below, at and past half a wave of a 132-SM GPU, and several waves: the update's strip width and launch
# shapes depend on the batch (register panels are one block at every batch).
@pytest.mark.parametrize("batch", [1, 66, 67, 300])
def test_batch_sizes(route, batch):
    check(torch.randn(batch, 400, 400, device="cuda"))


@pytest.mark.parametrize("case", CASE_NAMES)
def test_every_profile(route, case):
    for cond in (1, 1000):
        check(generate_input(batch=3, n=512, cond=cond, seed=7 + len(case), case=case))


def test_columns_of_many_magnitudes_in_whole_strips(route):
    """Columns alternately near 2^60 and 2^-60 at a batch whose updates take whole strips: the updates' products keep
    each column's scale (3xTF32's split of a column near 2^60 beside one near 2^-60 must neither overflow nor flush)."""
    A = torch.randn(300, 400, 400, device="cuda")
    A[..., 0::2] *= 2.0 ** 60
    A[..., 1::2] *= 2.0 ** -60
    check(A)


def test_strided_input_is_not_modified(route):
    base = torch.randn(3, 700, 600, device="cuda")
    A = base.transpose(-1, -2)[:, :500, :]
    before = A.clone()
    check(A)
    assert torch.equal(A, before)


# A row-major input is copied into H only for its first outer panel; the first update reads the rest from the input
# and writes it into H. That must give the bits of the same matrices laid out column-major (copied into H whole):
# dense strips, exactly zero strips (negative zeros kept) at the tail and between non-zero columns (whole strips of
# the first update whose W is zero), rows whose stride is no multiple of four.
@pytest.mark.parametrize("shape", [(384, 384), (513, 300), (300, 777), (1000, 70), (131, 257)],
                         ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("pad", [0, 3])
def test_first_update_reads_row_major_input(route, shape, pad):
    m, n = shape
    A = torch.randn(3, m, n + pad, device="cuda")[..., :n]
    A[1, :, 64:] = -0.0
    A[2, :, 96:224] = -0.0
    before = A.clone()
    H, tau = whole_matrix.factor(A)
    Hc, tauc = whole_matrix.factor(A.mT.contiguous().mT)
    assert torch.equal(A, before)
    assert torch.equal(H.view(torch.int32), Hc.view(torch.int32))
    assert torch.equal(tau.view(torch.int32), tauc.view(torch.int32))
    check(A, (H, tau))


# Exactly zero trailing columns (rank-deficient inputs): the panels and updates leave them alone. Tails ending
# inside a 32-column panel and on its edges, a zero matrix, matrices without a tail in the same batch; a row-major
# input (its first update writes the tail's zeros into H), a column-major one and a strided one; panels of the
# register kind and, past 512 rows, of the cluster and CholeskyQR kinds.
@pytest.mark.parametrize("layout", ["row_major", "column_major", "strided"])
@pytest.mark.parametrize("shape", [(512, 512), (300, 257), (700, 300)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_exact_zero_tails(route, layout, shape):
    m, n = shape
    tails = [0, 1, 31, 32, 33, 128, 200, n - 1, n]
    base = torch.randn(len(tails), m, n + 2, device="cuda")
    for b, z in enumerate(tails):
        base[b, :, n - z:n] = 0.0
    A = base[..., :n]
    if layout == "column_major":
        A = A.mT.contiguous().mT
    elif layout == "row_major":
        A = A.contiguous()
    H, tau = whole_matrix.factor(A)
    Hc, tauc = whole_matrix.factor(A.mT.contiguous().mT)
    assert torch.equal(H.view(torch.int32), Hc.view(torch.int32)) and torch.equal(tau, tauc)  # any layout, same bits
    for b, z in enumerate(tails):
        assert torch.all(H[b, :, n - z:] == 0) and torch.all(tau[b, min(m, n) - min(z, min(m, n)):] == 0), (b, z)
    check(A, (H, tau))


# Large batches run as two halves, the second on a side stream one panel behind the first (c_api/blocked.c): each half
# gets the bits of factoring it alone (which forks nothing), also on a user's stream and inside a CUDA graph; register
# panels (200 rows) and, past 512 rows, CholeskyQR and cluster panels; row-major, column-major and expanded inputs.
def _two_waves():
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    return 2 * sms + 1, sms  # halves of sms and sms + 1 matrices: both shapes below split (qr2_op._blocked_halves)


def _factor_in_halves(A):
    """Factors A in one call that forks one side stream; each half has the bits of factoring it alone (one call each,
    which fork nothing) and the whole passes the checker."""
    batch, first = A.shape[0], A.shape[0] // 2
    forks = qr2_op._side_fork_count()
    H, tau = whole_matrix.factor(A)
    assert qr2_op._side_fork_count() == forks + 1
    for part in (slice(0, first), slice(first, batch)):
        Hp, taup = whole_matrix.factor(A[part])
        assert torch.equal(H[part], Hp) and torch.equal(tau[part], taup)
    assert qr2_op._side_fork_count() == forks + 1
    check(A, (H, tau))


@pytest.mark.parametrize("layout", ["row_major", "column_major", "expanded"])
@pytest.mark.parametrize("shape", [(200, 200), (600, 160)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_batches_of_two_waves_run_as_two_halves(route, layout, shape):
    batch, first = _two_waves()
    if layout == "expanded":
        A = torch.randn(1, *shape, device="cuda").expand(batch, *shape)
    else:
        A = torch.randn(batch, *shape, device="cuda")
        A[3, :, shape[1] // 2:] = 0.0  # zero tails in both halves
        A[first + 2, :, shape[1] - 33:] = 0.0
        if layout == "column_major":
            A = A.mT.contiguous().mT
    assert qr2_op._blocked_halves(*shape, batch, qr2_op.device_of())
    _factor_in_halves(A)


def test_halves_of_fewer_matrices_than_sms(route):
    """Past 512 rows a half needs only 2 waves of 64-column strips: 1024 x 1024 splits with halves of a few matrices
    (CholeskyQR and cluster panels, the updates' rows split over blocks, Gram matrices in parts)."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    batch = 2 * -(-sms // 8) + 1
    assert qr2_op._blocked_halves(1024, 1024, batch, qr2_op.device_of()) and batch // 2 < sms
    first = batch // 2
    A = torch.randn(batch, 1024, 1024, device="cuda")
    A[1, :, 1000:] = 0.0  # zero tails in both halves
    A[first + 1, :, 900:] = 0.0
    _factor_in_halves(A)


def test_batches_below_the_halves_rule_run_whole(route):
    """Halves of too few strips lost (c_api/blocked.c): such a batch forks nothing."""
    batch = torch.cuda.get_device_properties(0).multi_processor_count
    assert not qr2_op._blocked_halves(352, 352, batch, qr2_op.device_of())
    A = torch.randn(batch, 352, 352, device="cuda")
    forks = qr2_op._side_fork_count()
    H, tau = whole_matrix.factor(A)
    assert qr2_op._side_fork_count() == forks
    check(A, (H, tau))


def _capture_holding_the_side_stream(A, B, expected, captured_forks, eager_forks):
    """A captured in a CUDA graph (its call forking `captured_forks` times), B factored eagerly on another stream while
    that capture holds this thread's side stream (forking `eager_forks` times, with `expected`'s bits); then the
    replay gives a fresh call's bits."""
    graph, capturing, other = torch.cuda.CUDAGraph(), torch.cuda.Stream(), torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(capturing):
        graph.capture_begin(capture_error_mode="relaxed")
        try:
            forks = qr2_op._side_fork_count()
            captured = whole_matrix.factor(A)
            assert qr2_op._side_fork_count() == forks + captured_forks
            forks = qr2_op._side_fork_count()
            with torch.cuda.stream(other):
                eager = whole_matrix.factor(B)
            assert qr2_op._side_fork_count() == forks + eager_forks
        finally:
            graph.capture_end()
    torch.cuda.synchronize()
    assert torch.equal(eager[0], expected[0]) and torch.equal(eager[1], expected[1])
    graph.replay()
    torch.cuda.synchronize()
    fresh = whole_matrix.factor(A)
    assert torch.equal(captured[0], fresh[0]) and torch.equal(captured[1], fresh[1])


def test_two_halves_on_a_user_stream_and_in_a_cuda_graph(route):
    whole_matrix.side_stream_and_cuda_graph((_two_waves()[0], 200, 200))


def test_two_halves_while_the_side_stream_is_held_by_a_capture(route):
    """A split call captured in a graph leaves this thread's side stream in that capture until it ends; a split call on
    another stream meanwhile runs both halves on its own stream, each once, with the same bits. B's two batch
    dimensions take no single stride, so B is copied into H first and factored there in place: a half run twice
    would come out wrong."""
    batch, _ = _two_waves()
    A = torch.randn(batch, 200, 200, device="cuda")
    B = torch.randn(batch // 2 + 1, 2, 200, 200, device="cuda").transpose(0, 1)
    _capture_holding_the_side_stream(A, B, whole_matrix.factor(B), captured_forks=1, eager_forks=0)


# Lookahead (configurations `<route>_lookahead`, c_api/blocked.c): the next panel's columns updated and that panel
# factored on a side stream, beside the update of the rest (a CholeskyQR panel updates its columns itself). The policy
# picks only blocked_cholqr_nb32_lookahead (a few large matrices), so the tests force them.
# One fork a step that has a next panel and columns right of it; never where an update might call cuBLAS (over 4096
# rows, fewer matrices than SMs). An update split in two may split its rows over blocks differently from the whole
# one, so the bits may differ from the schedule without lookahead: the checker decides.
NB = {"blocked_nb32": 32, "blocked_nb64": 64, "blocked_cholqr_nb32": 32}


@pytest.fixture(params=list(NB))
def ahead(request):
    qr2_op._force_config(request.param + "_lookahead")
    yield request.param
    qr2_op._force_config(None)


def _forks_of(A):
    forks = qr2_op._side_fork_count()
    H, tau = whole_matrix.factor(A)
    torch.cuda.synchronize()
    return qr2_op._side_fork_count() - forks, (H, tau)


def _steps_ahead(m, n, nb):
    """Steps of the schedule with a next panel and columns right of it."""
    kmin = min(m, n)
    return sum(1 for k in range(0, kmin, nb) if k + nb < kmin and k + nb + min(nb, kmin - k - nb) < n)


# 1500 x 300: panels over 1024 rows at a batch below the SMs, where blocked_nb64 merges T from partial products in each
# stream's own split region.
@pytest.mark.parametrize("layout", ["row_major", "column_major"])
@pytest.mark.parametrize("shape", [(2, 300, 300), (3, 1024, 1024), (2, 200, 500), (3, 700, 130), (1, 65, 300),
                                   (2, 1500, 300)], ids=lambda s: "x".join(map(str, s)))
def test_lookahead_forks_a_step_and_passes_the_checker(ahead, layout, shape):
    batch, m, n = shape
    A = torch.randn(*shape, device="cuda")
    A[0, :, n // 2:] = 0.0  # a zero tail in one matrix
    if layout == "column_major":
        A = A.mT.contiguous().mT
    forks, (H, tau) = _forks_of(A)
    assert forks == _steps_ahead(m, n, NB[ahead]) > 0
    check(A, (H, tau))
    _, (H2, tau2) = _forks_of(A)
    assert torch.equal(H2, H) and torch.equal(tau2, tau)  # the same bits again


def test_no_lookahead_where_an_update_might_call_cublas(ahead):
    A = torch.randn(1, 4200, 100, device="cuda")
    forks, out = _forks_of(A)
    assert forks == 0
    check(A, out)


def test_lookahead_on_a_user_stream_and_in_a_cuda_graph(ahead):
    whole_matrix.side_stream_and_cuda_graph((2, 300, 300))


def test_lookahead_while_the_side_stream_is_held_by_a_capture(ahead):
    """While another capture holds the side stream, a call runs every step on its own stream: the bits of the schedule
    without lookahead."""
    A = torch.randn(2, 300, 300, device="cuda")
    B = torch.randn(2, 260, 260, device="cuda")
    qr2_op._force_config(ahead)
    expected = whole_matrix.factor(B)
    qr2_op._force_config(ahead + "_lookahead")
    _capture_holding_the_side_stream(A, B, expected, captured_forks=_steps_ahead(300, 300, NB[ahead]),
                                     eager_forks=0)


# The tails are found on the GPU at every call: a CUDA graph captured with one pattern of tails and replayed on
# another gives the eager bits of the new one. 5000 rows: the search splits rows over blocks (a memset first).
@pytest.mark.parametrize("shape", [(300, 100), (5000, 40)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_zero_tails_in_a_cuda_graph(route, shape):
    m, n = shape
    A = torch.randn(3, m, n, device="cuda")
    A[0, :, n - 33:] = 0.0
    A[2] = 0.0
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        captured = torch.ops.qr2.geqrf(A)
    A.copy_(torch.randn_like(A))
    A[1, :, n - 5:] = 0.0
    A[2, m - 1, n - 1] = 1e-45  # a matrix that is zero but for its last entry, a subnormal
    g.replay()
    fresh = torch.ops.qr2.geqrf(A)
    assert torch.equal(captured[0], fresh[0]) and torch.equal(captured[1], fresh[1])
    check(A, fresh)


@pytest.mark.parametrize("scale", [1e-30, 1e30], ids=str)
def test_tiny_and_huge_values(route, scale):
    whole_matrix.tiny_and_huge_values(400, scale)


def test_lapack_conventions_match_torch(route):
    whole_matrix.lapack_conventions_match_torch(600)


@pytest.mark.parametrize("batch", [1, 3, 300])
def test_tall_panels(route, batch):
    """Panels taller than a cluster holds: many blocks per matrix, in one launch (batches 1 and 3) or one launch per
    reflector (300 matrices' rows do not fit in shared memory at once)."""
    A = torch.randn(batch, 9000, 20, device="cuda")
    A[:, :, 4] *= 1e-30  # a column far below the others: its reflector's scalars need FP64
    A[:, 4000:, 7] = 0.0  # a column with a zero tail in most blocks
    check(A)


@pytest.mark.parametrize("scale", [1e-30, 1e30], ids=str)
def test_tall_panels_of_tiny_and_huge_values(route, scale):
    """The tall-panel kernel does not scale the panel: its sums must hold any finite FP32 range."""
    A = torch.randn(2, 9000, 40, device="cuda") * scale
    H, tau = whole_matrix.factor(A)
    assert torch.isfinite(H).all() and torch.isfinite(tau).all()
    check(A, (H, tau))


def test_tall_panel_nan_stays_in_its_matrix(route):
    A = torch.randn(3, 9000, 10, device="cuda")
    A[1, 5000, 3] = float("nan")
    H, tau = whole_matrix.factor(A)
    keep = [0, 2]
    check(A[keep].contiguous(), (H[keep].contiguous(), tau[keep].contiguous()))


@pytest.mark.parametrize("route", ["blocked_cholqr_nb32", "blocked_cholqr_nb32_lookahead"], indirect=True)
def test_cholqr_guard_decides_for_each_matrix(route):
    """Matrices whose CholeskyQR panel fails its guard (a zero column, two equal columns, a NaN) take the Householder
    panel; the others of the batch come out bit for bit as they do in a batch where every matrix passes. With
    lookahead, the panel of columns 32-63 applies the first panel's reflectors itself, and the equal columns 40 and 41
    fail its guard after that: the Householder panel must find the columns as it left them."""
    A = torch.randn(6, 600, 600, device="cuda")
    A[1, :, 5] = 0.0
    A[3, :, 41] = A[3, :, 40]
    A[4, 300, 100] = float("nan")
    H, tau = whole_matrix.factor(A)
    good = [0, 1, 2, 3, 5]
    check(A[good].contiguous(), (H[good].contiguous(), tau[good].contiguous()))
    assert torch.all(tau[1, 5] == 0)
    B = A.clone()
    B[[1, 3, 4]] = torch.randn(3, 600, 600, device="cuda")
    HB, tauB = whole_matrix.factor(B)
    for b in (0, 2, 5):
        assert torch.equal(H[b], HB[b]) and torch.equal(tau[b], tauB[b])
