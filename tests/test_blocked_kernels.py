"""The blocked family's kernels one at a time, through the test entry points of c_api/testing.c: each panel kind
(registers in panel mode, cluster, tall, cholqr) against LAPACK's (H, tau), the explicit V and T it writes, and QR2's
checker; the CholeskyQR panel's guard; the compact-WY update against Q^T C in FP64; the merge of two T factors against
LAPACK's T; the search for exactly zero trailing columns and the input transpose against torch."""
import ctypes

import pytest
import torch

import qr2_op
from conftest import requires_cuda
from reference import check_implementation
from test_extreme_values import INPUTS

pytestmark = requires_cuda

_lib = qr2_op._lib
_p, _i64, _int, _str = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_char_p
for _name, _res, _args in [
    ("qr2_test_panel_holds", _int, [_str, _i64, _i64, _int]),
    ("qr2_test_panel_work_floats", _i64, [_i64, _i64, _int]),
    ("qr2_test_panel", _int, [_str, _i64, _int, _int, _p, _p, _p, _p, _p, _int, _p]),
    ("qr2_test_update_work_floats", _i64, [_i64, _int, _int, _int, _int]),
    ("qr2_test_update", _int, [_i64, _int, _int, _int, _p, _p, _p, _p, _p, _p, _int, _p]),
    ("qr2_test_merge_t", _int, [_i64, _int, _int, _int, _p, _p, _p, _i64, _p, _i64, _p, _int, _p]),
    ("qr2_test_merge_t_parts", _int, [_i64, _int, _int, _int]),
    ("qr2_test_zero_tail", _int, [_p, _i64, _i64, _i64, _int, _int, _i64, _p, _p]),
    ("qr2_test_transpose", _int, [_p, _i64, _i64, _i64, _p, _int, _int, _i64, _p]),
    ("qr2_test_panel_tall_resident_blocks", _int, [_i64, _int, _int, _int]),
    ("qr2_test_panel_cholqr_after", _int, [_i64, _int, _p, _p, _p, _p, _p, _p, _p, _int, _p]),
    ("qr2_test_last_error", _str, []),
]:
    getattr(_lib, _name).restype, getattr(_lib, _name).argtypes = _res, _args


def _stream():
    return torch.cuda.current_stream().cuda_stream


def _check(rc):
    assert rc == 0, _lib.qr2_test_last_error().decode()
    torch.cuda.synchronize()


def _column_major(A):
    """A copy of A (batch, m, n) stored column-major per matrix: strides (m n, 1, m). Always a copy: for n = 1 the
    transpose of a contiguous A is contiguous already, and the kernels write in place."""
    return A.transpose(-1, -2).clone(memory_format=torch.contiguous_format).transpose(-1, -2)


def _panel(kind, A, with_flags=False):
    """Runs panel `kind` on a copy of A (batch, m, w): (H, tau, V, T), T in (batch, w, w) with T[b][i][j] = T_ij;
    with_flags: also the CholeskyQR panel's per-matrix flags (1: factored, 0: left as it was)."""
    batch, m, w = A.shape
    dev = A.device.index or 0
    assert _lib.qr2_test_panel_holds(kind.encode(), m, w, dev) == 1, (kind, m, w)
    h = _column_major(A)
    tau = torch.full((batch, w), float("nan"), device="cuda")
    v = _column_major(torch.full_like(A, float("nan")))
    t = torch.full((batch, w, w), float("nan"), device="cuda")  # written column-major: t[b][j][i] = T_ij
    work = torch.empty(max(_lib.qr2_test_panel_work_floats(m, batch, dev), 1), device="cuda")
    _check(_lib.qr2_test_panel(kind.encode(), batch, m, w, h.data_ptr(), tau.data_ptr(), v.data_ptr(), t.data_ptr(),
                               work.data_ptr(), dev, _stream()))
    out = h, tau, v, t.transpose(-1, -2)
    return (*out, work[:batch].view(torch.int32)) if with_flags else out


# (kind, m, w): every rows-per-lane build of the register panel, the cluster panel from one block to eight, the tall
# panel (its resident form, and one launch per reflector) at heights the others hold too and beyond them
PANELS = [("registers", 32, 32), ("registers", 100, 17), ("registers", 300, 32), ("registers", 512, 32),
          ("cluster", 513, 32), ("cluster", 2000, 20), ("cluster", 8192, 32), ("cluster", 600, 1),
          ("tall", 600, 32), ("tall", 9000, 32), ("tall", 20000, 7), ("tall", 30000, 3),
          ("tall_launches", 600, 32), ("tall_launches", 9000, 32), ("tall_launches", 20000, 7)]


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("kind,m,w", PANELS, ids=str)
def test_panel_matches_lapack(kind, m, w, batch):
    A = torch.randn(batch, m, w, device="cuda", dtype=torch.float64)
    A[:, :w, :] += m ** 0.5 * torch.eye(w, device="cuda", dtype=torch.float64)  # well separated: H is unique
    A = A.float()
    A[:, :, w // 2] = 0.0  # a zero column: tau 0, an identity reflector
    before = A.clone()
    H, tau, V, T = _panel(kind, A)
    assert torch.equal(A, before)
    ok, msg = check_implementation(A, (H, tau))
    assert ok, msg
    Hr, taur = torch.geqrf(A)
    torch.testing.assert_close(H, Hr, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(tau, taur, rtol=1e-3, atol=1e-3)
    assert torch.all(tau[:, w // 2] == 0)
    # V: zeros above the diagonal, ones on it, H's reflectors below
    eye = torch.eye(m, w, device="cuda")
    torch.testing.assert_close(V, torch.tril(H, -1) + eye, rtol=0, atol=0)
    if kind != "tall_launches":  # the tall panel's per-reflector form builds no T
        Q = torch.eye(m, device="cuda", dtype=torch.float64) - V.double() @ T.double() @ V.double().transpose(-1, -2)
        torch.testing.assert_close(Q[..., :w], torch.linalg.householder_product(H, tau).double(), rtol=1e-4,
                                   atol=1e-4)
        assert torch.all(torch.tril(T, -1) == 0)


@pytest.mark.parametrize("kind,m,w", [p for p in PANELS if p[1] <= 9000], ids=str)
@pytest.mark.parametrize("inputs", list(INPUTS))
def test_panel_at_the_edges_of_fp32(kind, m, w, inputs):
    """The input kinds of test_extreme_values.py, on the panel kernel itself: a cluster panel whose entries were all
    subnormal once came back as NaN."""
    A = INPUTS[inputs](2, m, w, torch.Generator().manual_seed(3)).cuda()
    H, tau, V, T = _panel(kind, A)
    assert torch.isfinite(H).all() and torch.isfinite(tau).all() and torch.isfinite(V).all()
    if kind != "tall_launches":
        assert torch.isfinite(T).all()
    ok, msg = check_implementation(A, (H, tau))
    assert ok, msg


@pytest.mark.parametrize("m,w,batch", [(m, w, b) for kind, m, w in PANELS if kind == "tall" for b in (1, 3)] +
                         [(100000, 32, 1), (100000, 5, 1)])
def test_tall_panel_takes_its_resident_form(m, w, batch):
    """The `tall` cases above run the resident form (one launch a panel), not the per-reflector launches again."""
    assert _lib.qr2_test_panel_tall_resident_blocks(batch, m, w, torch.cuda.current_device()) > 0


@pytest.mark.parametrize("m,w,batch", [(9000, 32, 3), (100000, 5, 1)])
def test_tall_panel_resident_form_repeats_its_bits(m, w, batch):
    """Whichever block arrives last sums the partials, in block order: the same bits every call."""
    A = torch.randn(batch, m, w, device="cuda")
    first = _panel("tall", A)
    for _ in range(3):
        for x, y in zip(first, _panel("tall", A)):
            assert torch.equal(x, y) or (x.isnan().all() and y.isnan().all())


def test_tall_panel_too_tall_for_shared_memory_takes_launches():
    """Rows a block beyond its shared memory: one launch per reflector."""
    assert _lib.qr2_test_panel_tall_resident_blocks(1, 4_000_000, 32, torch.cuda.current_device()) == 0


# (m, batch): one block, a cluster of 3-16 blocks (256-row blocks from 2049 rows), and batches whose 256-row clusters
# need more waves of SMs than 512-row ones, which take the 512-row blocks (300 x 300: one block a matrix; 80 x 1000 and
# 40 x 1500: clusters of 2 and 4)
CHOLQR = [("cholqr", 64, 1), ("cholqr", 300, 3), ("cholqr", 2000, 1), ("cholqr", 2049, 2), ("cholqr", 4096, 2),
          ("cholqr", 300, 300), ("cholqr", 1000, 80), ("cholqr", 1500, 40),
          # the grid form past a cluster's rows: one part partial (8193 rows), many matrices, parts walking two chunks
          ("cholqr_grid", 8193, 1), ("cholqr_grid", 9000, 40), ("cholqr_grid", 100000, 1)]


@pytest.mark.parametrize("kind,m,batch", CHOLQR, ids=str)
def test_cholqr_panel_matches_lapack(kind, m, batch):
    """A CholeskyQR panel alone, on panels its guard passes: LAPACK's (H, tau) (the Householder reconstruction
    chooses LAPACK's signs), V, and a T that rebuilds the same Q."""
    w = 32
    A = torch.randn(batch, m, w, device="cuda", dtype=torch.float64)
    A[:, :w, :] += m ** 0.5 * torch.eye(w, device="cuda", dtype=torch.float64)  # well separated: H is unique
    A = A.float()
    H, tau, V, T, flags = _panel(kind, A, with_flags=True)
    assert torch.all(flags == 1)
    ok, msg = check_implementation(A, (H, tau))
    assert ok, msg
    Hr, taur = torch.geqrf(A)
    torch.testing.assert_close(H, Hr, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(tau, taur, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(V, torch.tril(H, -1) + torch.eye(m, w, device="cuda"), rtol=0, atol=0)
    # Q's first w columns, I - V T V[:w]^T (m x w: a 100000-row panel's whole Q would not fit)
    V64 = V.double()
    Q = torch.eye(m, w, device="cuda", dtype=torch.float64) - V64 @ T.double() @ V64[..., :w, :].transpose(-1, -2)
    torch.testing.assert_close(Q, torch.linalg.householder_product(H, tau).double(), rtol=1e-4, atol=1e-4)
    assert torch.all(torch.tril(T, -1) == 0)


@pytest.mark.parametrize("kind,m,copies", [("cholqr", 600, 1), ("cholqr", 600, 10), ("cholqr_grid", 9000, 1)],
                         ids=["256_row_blocks", "512_row_blocks", "grid"])
def test_cholqr_panel_leaves_what_its_guard_rejects(kind, m, copies):
    """A zero column, a NaN, an upper triangular panel (LAPACK's tau = 0): those matrices are left exactly as they were
    and flagged 0. Two equal columns are rejected or, where FP64 rounding left their Gram matrix positive definite and
    the second pass near I, factored correctly. The others are factored. Six matrices, or ten copies of them (60
    clusters of 512-row blocks fit one wave where 256-row ones need two), and six in the grid form."""
    A = torch.randn(6, m, 32, device="cuda")
    A[1, :, 3] = 0.0
    A[2, :, 7] = A[2, :, 6]
    A[3, 100, 9] = float("nan")
    A[4] = torch.triu(A[4])
    A = A.repeat(copies, 1, 1)
    H, tau, V, T, flags = _panel(kind, A, with_flags=True)
    flags = flags.tolist()
    for c in range(0, 6 * copies, 6):
        assert flags[c] == flags[c + 5] == 1 and flags[c + 1] == flags[c + 3] == flags[c + 4] == 0
    for b in [b for b in range(6 * copies) if flags[b] == 0]:
        assert torch.equal(torch.nan_to_num(H[b], nan=7.0), torch.nan_to_num(A[b], nan=7.0))
    good = [b for b in range(6 * copies) if flags[b] == 1]
    ok, msg = check_implementation(A[good], (H[good], tau[good]))
    assert ok, msg


@pytest.mark.parametrize("m,batch", [(64, 3), (600, 1), (1000, 5), (2049, 2), (4064, 2)])
def test_cholqr_panel_applies_the_previous_reflectors_first(m, batch):
    """Lookahead's CholeskyQR panel: the previous panel's reflectors (V, T of a 32-column panel over the 32 rows
    above it and its own) applied to its columns, then the panel factored. The 32 rows above come out as
    C - V T^T V^T C gives them in FP64 (rounded to FP32), the panel as LAPACK factors the updated rows. One matrix
    holds a NaN: its guard fails, and its columns are left updated (the NaN's column all NaN) for the Householder
    panel."""
    w = 32
    rows = m + w
    P = torch.randn(batch, rows, w, device="cuda", dtype=torch.float64)
    Hp, taup = torch.geqrf(P)
    Vp = (torch.tril(Hp, -1) + torch.eye(rows, w, device="cuda", dtype=torch.float64)).float()
    Tp = _larft64(Vp.double(), taup.float().double()).float()
    # the columns after the update: R's rows on top, a panel LAPACK factors uniquely below; C = Q times them
    U = torch.randn(batch, rows, w, device="cuda", dtype=torch.float64)
    U[:, w:2 * w, :] += m ** 0.5 * torch.eye(w, device="cuda", dtype=torch.float64)
    V64, T64 = Vp.double(), Tp.double()
    C = (U - V64 @ (T64 @ (V64.mT @ U))).float()
    if batch > 1:
        C[1, w + m // 2, 7] = float("nan")
    expected = C.double() - V64 @ (T64.mT @ (V64.mT @ C.double()))
    h = _column_major(C)
    prev_v, prev_t = _column_major(Vp), Tp.mT.contiguous()  # T column-major
    tau = torch.full((batch, w), float("nan"), device="cuda")
    v = _column_major(torch.full((batch, m, w), float("nan"), device="cuda"))
    t = torch.full((batch, w, w), float("nan"), device="cuda")
    dev = torch.cuda.current_device()
    work = torch.zeros(max(_lib.qr2_test_panel_work_floats(m, batch, dev), 1), device="cuda")
    _check(_lib.qr2_test_panel_cholqr_after(batch, m, h.data_ptr(), tau.data_ptr(), v.data_ptr(), t.data_ptr(),
                                            prev_v.data_ptr(), prev_t.data_ptr(), work.data_ptr(), dev, _stream()))
    flags = work[:batch].view(torch.int32).tolist()
    assert flags == [0 if b == 1 else 1 for b in range(batch)]
    scale = expected.nan_to_num(0.0).abs().amax(dim=(1, 2), keepdim=True)
    top = (h[:, :w].double() - expected[:, :w]) / scale[..., :1, :1]
    for b in range(batch):
        if flags[b]:
            assert top[b].abs().max() < 1e-6
            ok, msg = check_implementation(expected[b:b + 1, w:].float(), (h[b:b + 1, w:], tau[b:b + 1]))
            assert ok, msg
            Hr, taur = torch.geqrf(expected[b, w:])
            torch.testing.assert_close(h[b, w:].double(), Hr, rtol=1e-3, atol=1e-3)
            torch.testing.assert_close(tau[b].double(), taur, rtol=1e-3, atol=1e-3)
        else:  # left for the Householder panel: every row updated, the NaN's column all NaN
            assert torch.all(h[b, :, 7].isnan())
            rest = [c for c in range(w) if c != 7]
            assert ((h[b][:, rest].double() - expected[b][:, rest]).abs() / scale[b]).max() < 1e-6


def _larft64(V, tau):
    """LAPACK dlarft (forward, column-wise) in FP64: T with H_0 ... H_{w-1} = I - V T V^T."""
    batch, _, w = V.shape
    T = torch.zeros(batch, w, w, dtype=torch.float64, device=V.device)
    for j in range(w):
        T[:, j, j] = tau[:, j]
        if j:
            T[:, :j, j] = -tau[:, j, None] * (T[:, :j, :j] @ (V[:, :, :j].transpose(-1, -2) @ V[:, :, j:j + 1]))[..., 0]
    return T


def _reflectors64(A64):
    """The explicit reflectors V (unit lower trapezoidal), tau and LAPACK's T of A64's QR, all FP64."""
    H, tau = torch.geqrf(A64)
    mr, w = A64.shape[-2:]
    V64 = torch.tril(H, -1) + torch.eye(mr, w, device=A64.device, dtype=torch.float64)
    return V64, tau, _larft64(V64, tau)


def _update(V64, tau, T64, C, given_t=True):
    """C <- Q^T C in place by qr2's update (column-major FP32 C; T given, or built by the update from V and tau);
    returns Q^T C computed in FP64 from C as it was."""
    batch, mr, w = V64.shape
    nc = C.shape[-1]
    expected = C.double() - V64 @ (T64.transpose(-1, -2) @ (V64.transpose(-1, -2) @ C.double()))
    V = _column_major(V64.float())
    tau32 = tau.float().contiguous()
    T = T64.float().transpose(-1, -2).contiguous() if given_t else None  # column-major w x w
    work = torch.empty(_lib.qr2_test_update_work_floats(batch, mr, w, nc, torch.cuda.current_device()), device="cuda")
    _check(_lib.qr2_test_update(batch, mr, w, nc, V.data_ptr(), tau32.data_ptr(), T.data_ptr() if given_t else None,
                                C.data_ptr(), work.data_ptr(), torch.cuda.current_blas_handle(),
                                torch.cuda.current_device(), _stream()))
    return expected


# One block a matrix (a batch of at least the SMs, or too few rows to split) and rows split into parts (on an H200:
# 4 for 5 x 1000, 16 for 2 x 4096, 13 of 320 rows for 2 x 4132, the last one partial).
@pytest.mark.parametrize("batch, mr, w1, w2", [(3, 64, 32, 32), (2, 200, 32, 32), (5, 1000, 24, 16), (1, 33, 32, 1),
                                              (4, 130, 16, 17), (2, 4096, 32, 32), (2, 4132, 32, 32),
                                              (200, 600, 32, 32)])
def test_merge_t_matches_lapack(batch, mr, w1, w2):
    """T of [V1 V2] from its halves' T factors (T12 = -T1 V1^T V2 T2) against LAPACK's T of all w1 + w2 reflectors in
    FP64, with the halves' T factors given in FP32 with garbage below their diagonals (the merge reads only the upper
    triangles)."""
    parts = _lib.qr2_test_merge_t_parts(batch, mr, w1, torch.cuda.current_device())
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    assert parts >= 1 and (parts > 1) == (batch < sms and mr - w1 > 256)
    work = torch.full((batch * parts * 1024,), float("nan"), device="cuda")
    w = w1 + w2
    V64, tau, T64 = _reflectors64(torch.randn(batch, mr, w, device="cuda", dtype=torch.float64))
    pad = torch.randn(batch, w, w, device="cuda", dtype=torch.float64).tril(-1)
    halves = T64 + pad
    t1 = halves[:, :w1, :w1].float().transpose(-1, -2).contiguous()  # column-major, ld w1
    t2 = halves[:, w1:, w1:].float().transpose(-1, -2).contiguous()
    t_bs = 32 * 32
    t12 = torch.zeros(batch, 2, t_bs, device="cuda")
    t12[:, 0, :w1 * w1] = t1.reshape(batch, -1)
    t12[:, 1, :w2 * w2] = t2.reshape(batch, -1)
    out = torch.full((batch, w * w), float("nan"), device="cuda")
    V = _column_major(V64.float())
    _check(_lib.qr2_test_merge_t(batch, mr, w1, w2, V.data_ptr(), t12[:, 0].data_ptr(), t12[:, 1].data_ptr(),
                                 2 * t_bs, out.data_ptr(), w * w, work.data_ptr(), torch.cuda.current_device(),
                                 _stream()))
    T = out.reshape(batch, w, w).transpose(-1, -2).double()  # T[b][i][j] = T_ij
    assert torch.isfinite(T).all()
    assert torch.equal(T.tril(-1), torch.zeros_like(T))
    err = (T - T64).abs().amax() / T64.abs().amax()
    assert err < max(1e-5, mr * 2.0 ** -24), err


@pytest.mark.parametrize("scale", [1.0, 2.0 ** -120, 2.0 ** 100], ids=["unit", "tiny", "huge"])
@pytest.mark.parametrize("given_t", [False, True], ids=["t_from_gram", "t_given"])
# fewer 32-column strips than SMs with under 512 or over 4096 rows take cuBLAS's FP32 GEMMs (1 x 40, 3 x 300, 5 x 64,
# 1 x 5000), the others the tensor-core kernel (64- and 32-column strips, w up to 64 and w = 128 in two blocks); fewer
# than two 32-column strips per SM with rows to spare split the rows over blocks (2 x 1000 x 64, 2 x 513 x 128,
# 1 x 3000 x 32, 8 x 3000 x 32, 3 x 2000 x 64, 4 x 1030 x 48)
@pytest.mark.parametrize("batch,mr,w,nc", [(1, 40, 8, 5), (3, 300, 32, 200), (2, 1000, 64, 33), (2, 513, 128, 700),
                                           (5, 64, 1, 1), (1, 3000, 32, 1000), (1, 5000, 32, 100), (200, 40, 8, 5),
                                           (40, 300, 32, 200),
                                           (150, 1000, 64, 33), (20, 513, 128, 700), (300, 64, 1, 1),
                                           (8, 3000, 32, 1000), (3, 2000, 64, 2000), (4, 1030, 48, 1500)], ids=str)
def test_update_applies_q_transpose(batch, mr, w, nc, given_t, scale):
    """C <- Q^T C against FP64, with C's entries near 1, near 2^-120 (where tensor cores flush the products of
    subnormals) and near 2^100."""
    V64, tau, T64 = _reflectors64(torch.randn(batch, mr, w, device="cuda", dtype=torch.float64))
    C = _column_major(torch.randn(batch, mr, nc, device="cuda", dtype=torch.float64).mul(scale).float())
    expected = _update(V64, tau, T64, C, given_t)
    err = (C.double() - expected).abs().amax() / expected.abs().amax()
    assert err < max(1e-5, mr * 2.0 ** -24), err  # FP32's bound for dot products of length mr


def _columns_of_many_magnitudes(batch, mr, nc, columns):
    """C (column-major FP32) with entries in [-1, 1] and: alternate columns near 2^100 and 2^-70, an entry of 3.401e38
    (just below FLT_MAX) in every third column, subnormal odd columns, or a NaN in column 7."""
    C64 = torch.rand(batch, mr, nc, device="cuda", dtype=torch.float64) * 2 - 1
    if columns == "2^100_and_2^-70":
        C64[..., 0::2] *= 2.0 ** 100
        C64[..., 1::2] *= 2.0 ** -70
    elif columns == "near_flt_max_and_1":
        C64[..., 0, 0::3] = 3.401e38
    elif columns == "subnormal_and_1":
        C64[..., 1::2] *= 2.0 ** -130
    else:
        C64[..., 3, 7] = float("nan")
    return _column_major(C64.float())


@pytest.mark.parametrize("columns", ["2^100_and_2^-70", "near_flt_max_and_1", "subnormal_and_1"])
# whole strips of 32 and 64 columns, and rows split over blocks
@pytest.mark.parametrize("batch,mr,w,nc", [(100, 64, 32, 64), (150, 300, 64, 100), (3, 2000, 64, 2000),
                                           (8, 3000, 32, 1000)], ids=str)
def test_update_scales_each_column_on_its_own(batch, mr, w, nc, columns):
    """Columns of very different magnitudes in one strip (LAPACK scales column by column): alternate columns near
    2^100 and 2^-70, an entry of 3.401e38 (just below FLT_MAX) in a column next to columns near 1, subnormal columns
    next to normal ones. Each column of C <- Q^T C within FP32's bound relative to that column, and finite."""
    V64, tau, T64 = _reflectors64(torch.randn(batch, mr, w, device="cuda", dtype=torch.float64))
    C = _columns_of_many_magnitudes(batch, mr, nc, columns)
    expected = _update(V64, tau, T64, C)
    assert torch.isfinite(C).all()
    err = (C.double() - expected).abs().amax(dim=-2) / expected.abs().amax(dim=-2)
    assert err.max() < max(1e-5, mr * 2.0 ** -24), err.max()


@pytest.mark.parametrize("batch, mr, w, nc", [(200, 512, 32, 256), (200, 300, 64, 200), (3, 4000, 32, 500)], ids=str)
def test_update_leaves_columns_it_does_not_change_bit_for_bit(batch, mr, w, nc):
    """Columns of C that Q^T leaves as they are come back with the same bits: exact zero columns (whole 64-column
    strips of them, and single ones among non-zero columns), and columns orthogonal to every reflector (zero in the
    reflectors' rows, which are zero elsewhere). The other columns within FP32's bound of Q^T C."""
    A = torch.randn(batch, mr, w, device="cuda", dtype=torch.float64)
    A[:, 2 * w:] = 0.0  # reflectors zero below row 2w
    V64, tau, T64 = _reflectors64(A)
    C64 = torch.randn(batch, mr, nc, device="cuda", dtype=torch.float64)
    C64[..., 64:192] = 0.0  # two whole strips
    C64[..., 5] = 0.0
    C64[..., :2 * w, 200 % nc:] = 0.0  # from column 200 (or all, when nc <= 200): orthogonal to every reflector
    unchanged = (C64 == 0).all(dim=-2)
    unchanged[..., 200 % nc:] = True
    C = _column_major(C64.float())
    before = C.clone()
    expected = _update(V64, tau, T64, C)
    same = (C.view(torch.int32) == before.view(torch.int32)).all(dim=-2)
    assert same[unchanged].all()
    err = (C.double() - expected).abs().amax() / expected.abs().amax()
    assert err < max(1e-5, mr * 2.0 ** -24), err


@pytest.mark.parametrize("layout", ["row_major", "column_major", "transposed_slice", "batch_strided"])
@pytest.mark.parametrize("batch,m,n", [(1, 1, 1), (3, 33, 65), (2, 100, 7), (70000, 2, 3)], ids=str)
def test_transpose_copies_any_strides_into_column_major(layout, batch, m, n):
    base = torch.randn(batch, m, n, device="cuda")
    if layout == "column_major":
        A = _column_major(base)
    elif layout == "transposed_slice":
        A = torch.randn(batch, n + 3, m + 2, device="cuda").transpose(-1, -2)[:, 1:m + 1, 2:n + 2]
    elif layout == "batch_strided":
        A = torch.randn(2 * batch, m, n, device="cuda")[::2]
    else:
        A = base
    out = torch.full((batch, n, m), float("nan"), device="cuda")  # column-major m x n per matrix
    _check(_lib.qr2_test_transpose(A.data_ptr(), A.stride(1), A.stride(2), A.stride(0), out.data_ptr(), m, n, batch,
                                   _stream()))
    assert torch.equal(out.transpose(-1, -2), A)


@pytest.mark.parametrize("layout", ["row_major", "column_major", "transposed_slice"])
@pytest.mark.parametrize("batch,m,n", [(5, 40, 70), (3, 5000, 100), (2, 1, 33), (4, 700, 1)], ids=str)
def test_zero_tail_finds_the_last_nonzero_column(layout, batch, m, n):
    """zero_from = 1 + the last column holding a non-zero entry: tails of every length (none, 1, 31, 32, 33 columns,
    all), the last non-zero entry in the first or last row (rows split over blocks past 4096 rows), -0 counted as zero
    and NaN and subnormals as non-zero (the last column, read alone first, too); any strides."""
    base = torch.randn(batch, m, n, device="cuda")
    tails = [0, 1, 31, 32, 33, n][:batch]
    for b, z in enumerate(tails):
        base[b, :, n - min(z, n):] = -0.0 if b % 2 else 0.0
    if n > 1 and m > 1:  # the last column zero but for a subnormal in its last row
        base[0, :, n - 1] = 0.0
        base[0, m - 1, n - 1] = 1e-45
    if n > 33 and batch > 3:
        base[3, :, :] = 0.0
        base[3, m - 1, 5] = float("nan")  # the last column holding something: 5, in the last row only
    if layout == "column_major":
        A = _column_major(base)
    elif layout == "transposed_slice":
        A = torch.zeros(batch, n + 3, m + 2, device="cuda").transpose(-1, -2)[:, 1:m + 1, 2:n + 2]
        A.copy_(base)
    else:
        A = base
    expected = []
    for b in range(batch):
        nonzero = (A[b].cpu().view(torch.int32) & 0x7fffffff) != 0
        cols = nonzero.any(dim=0).nonzero()
        expected.append(int(cols.max()) + 1 if len(cols) else 0)
    zero_from = torch.full((batch,), -7, dtype=torch.int32, device="cuda")
    _check(_lib.qr2_test_zero_tail(A.data_ptr(), A.stride(1), A.stride(2), A.stride(0), m, n, batch,
                                   zero_from.data_ptr(), _stream()))
    assert zero_from.tolist() == expected
