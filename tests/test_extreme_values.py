"""Finite inputs at the edges of FP32's range, on every route (each forced): subnormal and exactly zero rows and
columns, entries from 2^-149 (about 1.4e-45) to above 2^127 (about 1.7e38), column norms near FLT_MAX and FLT_MIN.
Wherever LAPACK factors the input with every entry of R representable, qr2 must return finite (H, tau) that pass
QR2's gates in FP64 against the original input."""
import pytest
import torch

import qr2_op
from conftest import requires_cuda
from reference import check_implementation
from test_policy import CONFIG_EXAMPLES

pytestmark = requires_cuda


def _shapes(route):
    """The route's first example (batch capped at 8), plus shapes that reach the blocked route's tall panels: 700 rows
    put a whole later panel (all subnormal in `subnormal_below_the_first_rows`) into the cluster panel, 9000 rows into the
    many-block tall-panel kernel."""
    m, n, batch = CONFIG_EXAMPLES[route][0]
    shapes = [(min(batch, 8), m, n)]
    if route.startswith("blocked"):
        shapes += [(2, 700, 96), (1, 9000, 40)]
    return shapes


def _rows_decaying_to_zero(batch, m, n, gen):
    """Rows scaled from 2^100 down to 2^-160: the last rows subnormal, the very last exactly zero; one zero row, one
    zero column."""
    A = torch.randn(batch, m, n, dtype=torch.float64, generator=gen)
    exps = torch.linspace(100.0, -160.0, m, dtype=torch.float64)
    A *= torch.pow(2.0, exps)[:, None]
    A[:, m // 3, :] = 0.0
    A[:, :, n // 2] = 0.0
    return A.float()


def _subnormal_below_the_first_rows(batch, m, n, gen):
    """Rows [0, k) standard normal, every row below at about 2^-135 (subnormal): the panels below row k hold only
    subnormal numbers, and some entries are the smallest subnormal, 2^-149."""
    A = torch.randn(batch, m, n, dtype=torch.float64, generator=gen)
    k = min(32, max(1, m // 2))
    A[:, k:, :] *= 2.0 ** -135
    A[:, -1, ::2] = 2.0 ** -149
    A[:, :, min(m, n) - 1] = 0.0
    return A.float()


def _column_norms_near_flt_max(batch, m, n, gen):
    """A diagonal of 2.5e38 (above 2^127, the largest power of two FP32 holds) over entries of 1e35: R's diagonal is
    near FLT_MAX, every entry representable."""
    A = torch.randn(batch, m, n, dtype=torch.float64, generator=gen) * 1e35
    k = min(m, n)
    A[:, torch.arange(k), torch.arange(k)] = 2.5e38
    return A.float()


def _column_norms_near_flt_min(batch, m, n, gen):
    """Every column's norm about FLT_MIN = 2^-126: most entries below it, many subnormal."""
    A = torch.randn(batch, m, n, dtype=torch.float64, generator=gen) * (2.0 ** -126 / max(m, 1) ** 0.5)
    return A.float()


INPUTS = {f.__name__.lstrip("_"): f for f in (_rows_decaying_to_zero, _subnormal_below_the_first_rows,
                                              _column_norms_near_flt_max, _column_norms_near_flt_min)}


def _factor_forced(route, A):
    qr2_op._force_config(route)
    try:
        return torch.ops.qr2.geqrf(A)
    finally:
        qr2_op._force_config(None)


@pytest.mark.parametrize("kind", list(INPUTS))
@pytest.mark.parametrize("route", list(CONFIG_EXAMPLES))
def test_extreme_values(route, kind):
    gen = torch.Generator().manual_seed(29)
    for batch, m, n in _shapes(route):
        A = INPUTS[kind](batch, m, n, gen).cuda()
        assert torch.isfinite(A).all()
        H, tau = _factor_forced(route, A)
        assert torch.isfinite(H).all() and torch.isfinite(tau).all(), f"{route} {batch}x{m}x{n}: NaN or Inf"
        ok, msg = check_implementation(A, (H, tau))
        assert ok, f"{route} {batch}x{m}x{n}: {msg}"


def test_rows_decaying_into_subnormals_at_2048():
    """A user's report: 4 x 2048 x 2048 with rows decaying geometrically (the last few hundred subnormal or zero)
    came back with NaN in H from the policy's configuration: a cluster panel (more than 512 rows) whose largest entry
    is subnormal was scaled by 2^-expo > 2^127 = Inf."""
    gen = torch.Generator().manual_seed(4)
    A = torch.randn(4, 2048, 2048, dtype=torch.float64, generator=gen)
    A *= torch.pow(2.0, -torch.arange(2048, dtype=torch.float64) / 10.0)[:, None]  # row 1260 at FLT_MIN
    A = A.float().cuda()
    assert (A[:, 1200] != 0).all() and (A[:, 1300:1400].abs() < 2.0 ** -126).all() and (A[:, -500:] == 0).all()
    H, tau = torch.ops.qr2.geqrf(A)
    assert torch.isfinite(H).all() and torch.isfinite(tau).all()
    ok, msg = check_implementation(A, (H, tau))
    assert ok, msg
