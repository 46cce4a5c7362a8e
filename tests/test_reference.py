"""Tests of reference.py: input profiles, case tables, seeds and the QR2 checker (CPU, small sizes)."""

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import reference  # noqa: E402
from reference import check_implementation, generate_input  # noqa: E402

ALL_CASES = ["dense", "upper", "diagonal", "rankdef", "nearrank", "clustered", "band", "rowscale",
             "nearcollinear", "mixed"]


def gen(batch, n, cond, seed, case):
    return generate_input(batch, n, cond, seed, case, device="cpu")


def base(batch, n, seed):
    """The first draw of every profile: dense with cond 0 leaves it untouched."""
    return gen(batch, n, 0, seed, "dense")


# ---------------------------------------------------------------------------------------------
# The checker accepts correct factorizations
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", ALL_CASES)
@pytest.mark.parametrize("n", [1, 8, 33])
def test_checker_accepts_torch_geqrf_on_every_profile(case, n):
    A = gen(5, n, 2, 11, case)
    ok, message = check_implementation(A, torch.geqrf(A))
    assert ok, message
    assert f"batch=5; n={n}" in message


def test_pass_message_has_qr2_fields_in_order():
    A = gen(3, 32, 1, 5, "dense")
    ok, message = check_implementation(A, torch.geqrf(A))
    assert ok
    keys = [part.split("=")[0] for part in message.split("; ")]
    assert keys == ["factor_rtol", "orth_rtol", "scaled_factor_residual", "scaled_reconstruction_residual",
                    "scaled_triangular_residual", "scaled_orthogonality_residual", "batch", "n"]
    fields = reference.parse_check_message(message)
    eps = torch.finfo(torch.float32).eps
    assert fields["factor_rtol"] == pytest.approx(20 * 32 * eps, rel=1e-2)
    assert fields["orth_rtol"] == pytest.approx(100 * 32 * eps, rel=1e-2)
    assert fields["scaled_factor_residual"] < 20 and fields["scaled_orthogonality_residual"] < 100


@pytest.mark.parametrize("m,n", [(12, 8), (8, 12), (1, 5), (5, 1), (17, 16)])
def test_checker_accepts_rectangular(m, n):
    A = torch.randn(4, m, n, generator=torch.Generator().manual_seed(m * 100 + n))
    H, tau = torch.geqrf(A)
    assert tau.shape == (4, min(m, n))
    ok, message = check_implementation(A, (H, tau))
    assert ok, message
    assert f"batch=4; m={m}; n={n}" in message
    # tolerance uses max(m, n)
    eps = torch.finfo(torch.float32).eps
    assert reference.parse_check_message(message)["factor_rtol"] == pytest.approx(20 * max(m, n) * eps, rel=1e-2)


@pytest.mark.parametrize("m,n", [(6, 6), (9, 6), (6, 9)])
def test_checker_accepts_extra_batch_dims(m, n):
    A = torch.randn(2, 3, m, n, generator=torch.Generator().manual_seed(3))
    ok, message = check_implementation(A, torch.geqrf(A))
    assert ok, message
    assert "batch=6;" in message


def test_checker_rejects_wrong_4d_tau_shape():
    A = torch.randn(2, 3, 6, 6)
    H, tau = torch.geqrf(A)
    ok, message = check_implementation(A, (H, tau.reshape(6, 6)))
    assert not ok and "tau shape must be (2, 3, 6)" in message


def test_checker_accepts_zero_tau_for_zero_columns():
    # tau = 0 (identity reflector) is allowed: rankdef's zero tail needs no reflection.
    A = gen(3, 16, 0, 2, "rankdef")
    H, tau = torch.geqrf(A)
    tau = tau.clone()
    tau[:, -1] = 0.0  # the last column of a square matrix has an empty tail anyway
    ok, message = check_implementation(A, (H, tau))
    assert ok, message


# ---------------------------------------------------------------------------------------------
# The checker rejects corrupted outputs
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def factored():
    A = gen(4, 16, 1, 99, "dense")
    H, tau = torch.geqrf(A)
    return A, H, tau


def test_rejects_flipped_reflector(factored):
    A, H, tau = factored
    H = H.clone()
    H[2, 4:, 3] = -H[2, 4:, 3]  # negate v_3 of matrix 2 below the diagonal, tau kept
    ok, message = check_implementation(A, (H, tau))
    assert not ok
    assert message.startswith("R - Q.T @ A is too large: matrix=2,")


def test_rejects_wrong_tau(factored):
    A, H, tau = factored
    tau = tau.clone()
    tau[0, 0] += 0.5
    ok, message = check_implementation(A, (H, tau))
    assert not ok
    assert message.startswith("R - Q.T @ A is too large: matrix=0,")


def test_rejects_perturbed_r(factored):
    A, H, tau = factored
    H = H.clone()
    H[1, 0, 10] += 100.0
    ok, message = check_implementation(A, (H, tau))
    assert not ok
    assert message.startswith("R - Q.T @ A is too large: matrix=1,")
    assert "allowed=" in message and "scaled=" in message


def test_rejects_lower_leakage_in_r(factored):
    # R = triu(H): a factorization that leaves Q^T A non-triangular fails the factor gate.
    A, H, tau = factored
    ok, message = check_implementation(A, (H, torch.zeros_like(tau)))  # Q = I, R = triu(H) != A
    assert not ok and message.startswith("R - Q.T @ A is too large")


def test_rejects_non_orthogonal_q():
    # A = 0 and R = 0 pass the factor gate exactly, so only the orthogonality gate can catch tau.
    A = torch.zeros(3, 8, 8)
    H = torch.randn(3, 8, 8, generator=torch.Generator().manual_seed(1)).tril(-1)
    tau = torch.full((3, 8), 0.5)
    tau[1] = 0.9
    ok, message = check_implementation(A, (H, tau))
    assert not ok
    assert message.startswith("Q is not orthogonal enough: matrix=")
    assert "allowed=" in message


def test_rejects_nan_in_h(factored):
    A, H, tau = factored
    H = H.clone()
    H[3, 5, 2] = float("nan")
    ok, message = check_implementation(A, (H, tau))
    assert not ok and message == "H contains NaN or Inf"


def test_rejects_inf_in_tau(factored):
    A, H, tau = factored
    tau = tau.clone()
    tau[1, 1] = float("inf")
    ok, message = check_implementation(A, (H, tau))
    assert not ok and message == "tau contains NaN or Inf"


def test_rejects_wrong_shape(factored):
    A, H, tau = factored
    ok, message = check_implementation(A, (H[:, :, :-1], tau))
    assert not ok and message == "H shape must be (4, 16, 16), got (4, 16, 15)"
    ok, message = check_implementation(A, (H, tau[:, :-1]))
    assert not ok and message == "tau shape must be (4, 16), got (4, 15)"


def test_rejects_wrong_dtype(factored):
    A, H, tau = factored
    ok, message = check_implementation(A, (H.double(), tau))
    assert not ok and message == "H dtype must be torch.float32, got torch.float64"
    ok, message = check_implementation(A, (H, tau.double()))
    assert not ok and message == "tau dtype must be torch.float32, got torch.float64"


def test_rejects_wrong_device(factored):
    A, H, tau = factored
    ok, message = check_implementation(A, (H.to("meta"), tau))
    assert not ok and message == "H must be on cpu, got meta"


@pytest.mark.parametrize("make_output", [
    lambda H, tau: [H, tau],
    lambda H, tau: (H,),
    lambda H, tau: (H, tau, tau),
    lambda H, tau: H,
    lambda H, tau: None,
])
def test_rejects_non_tuple_or_wrong_length(factored, make_output):
    A, H, tau = factored
    ok, message = check_implementation(A, make_output(H, tau))
    assert not ok and message == "output must be a tuple `(H, tau)`"


def test_rejects_non_tensor(factored):
    A, H, tau = factored
    ok, message = check_implementation(A, (H.tolist(), tau))
    assert not ok and message == "H must be a torch.Tensor"


# ---------------------------------------------------------------------------------------------
# Profile structure
# ---------------------------------------------------------------------------------------------


def test_dense_applies_column_ramp():
    A, B = gen(3, 16, 3, 4, "dense"), base(3, 16, 4)
    ramp = torch.logspace(0, -3, 16)
    torch.testing.assert_close(A, B * ramp, rtol=0, atol=0)
    assert A.dtype == torch.float32 and A.is_contiguous()
    torch.testing.assert_close(gen(3, 16, 0, 4, "dense"), B, rtol=0, atol=0)


def test_upper_is_triangular_with_diagonal_boost():
    A, B = gen(2, 12, 0, 8, "upper"), base(2, 12, 8)
    assert torch.equal(A, A.triu())
    torch.testing.assert_close(A.diagonal(dim1=-2, dim2=-1), B.diagonal(dim1=-2, dim2=-1) + torch.linspace(1, 0.25, 12))
    torch.testing.assert_close(A.triu(1), B.triu(1), rtol=0, atol=0)
    scaled = gen(2, 12, 2, 8, "upper")
    torch.testing.assert_close(scaled, A * torch.logspace(0, -2, 12))


def test_diagonal_is_diagonal_with_signed_ramp():
    for cond, decades in [(0, 2), (1, 2), (5, 5)]:
        A = gen(3, 10, cond, 6, "diagonal")
        diag = A.diagonal(dim1=-2, dim2=-1)
        assert torch.equal(A, torch.diag_embed(diag))
        torch.testing.assert_close(diag.abs(), torch.logspace(0, -decades, 10).expand(3, 10), rtol=0, atol=0)


@pytest.mark.parametrize("n", [4, 16, 30])
def test_rankdef_zeroes_exactly_the_tail_columns(n):
    A, B = gen(3, n, 0, 9, "rankdef"), base(3, n, 9)
    rank = 3 * n // 4
    assert torch.count_nonzero(A[:, :, rank:]) == 0
    torch.testing.assert_close(A[:, :, :rank], B[:, :, :rank], rtol=0, atol=0)


def test_nearrank_tail_copies_head_columns():
    n = 16
    A, B = gen(4, n, 0, 10, "nearrank"), base(4, n, 10)
    rank, tail = 3 * n // 4, n - 3 * n // 4
    torch.testing.assert_close(A[:, :, :rank], B[:, :, :rank], rtol=0, atol=0)
    gap = (A[:, :, rank:] - A[:, :, :tail]).norm(dim=1) / A[:, :, :tail].norm(dim=1)
    assert gap.max() < 5e-5  # 1e-5 * ||noise|| / ||column|| ~ 1e-5
    assert gap.min() > 0  # near, not exactly, rank deficient


def test_clustered_column_scales():
    n = 16
    A, B = gen(2, n, 3, 12, "clustered"), base(2, n, 12)  # cond ignored
    scales = reference.clustered_column_scales(n)
    eps = torch.finfo(torch.float32).eps
    expected = torch.ones(n)
    expected[n // 2:] = 4 * eps
    expected[n // 2 - 2:n // 2 + 2] = eps ** 0.5
    torch.testing.assert_close(scales, expected)
    torch.testing.assert_close(A, B * scales, rtol=0, atol=0)
    small = reference.clustered_column_scales(6)  # no sqrt(eps) cluster below n = 8
    assert torch.equal(small, torch.tensor([1, 1, 1, 4 * eps, 4 * eps, 4 * eps], dtype=torch.float32))


@pytest.mark.parametrize("n,width", [(16, 2), (32, 2), (96, 3)])
def test_band_is_zero_outside_the_band(n, width):
    assert reference.band_width(n) == width
    A, B = gen(2, n, 0, 13, "band"), base(2, n, 13)
    i = torch.arange(n)
    outside = (i[:, None] - i[None, :]).abs() > width
    assert torch.count_nonzero(A[:, outside]) == 0
    inside_off_diag = ~outside & ~torch.eye(n, dtype=torch.bool)
    torch.testing.assert_close(A[:, inside_off_diag], B[:, inside_off_diag], rtol=0, atol=0)
    torch.testing.assert_close(A.diagonal(dim1=-2, dim2=-1), B.diagonal(dim1=-2, dim2=-1) + torch.linspace(1, 0.5, n))


def test_band_width_table():
    assert [reference.band_width(n) for n in (32, 512, 1024, 4096)] == [2, 16, 32, 32]


@pytest.mark.parametrize("cond,decades", [(0, 4), (2, 4), (6, 6)])
def test_rowscale_rows_follow_logspace(cond, decades):
    A, B = gen(2, 12, cond, 14, "rowscale"), base(2, 12, 14)
    torch.testing.assert_close(A, B * torch.logspace(0, -decades, 12)[:, None], rtol=0, atol=0)


def test_nearcollinear_columns_share_one_direction():
    A = gen(3, 16, 0, 15, "nearcollinear")
    gap = (A - A[:, :, :1]).norm(dim=1) / A[:, :, :1].norm(dim=1)
    assert gap[:, 1:].max() < 1e-3 and gap[:, 1:].min() > 0


def test_mixed_has_dense_and_other_profiles():
    batch, n, cond, seed = 40, 16, 2, 21
    A = gen(batch, n, cond, seed, "mixed")
    names = reference.mixed_assignment(batch, n, seed, device="cpu")
    assert len(names) == batch and set(names) <= set(reference.MIXED_CHOICES)
    assert "dense" in names and any(name != "dense" for name in names)
    B = base(batch, n, seed)
    ramp = torch.logspace(0, -cond, n)
    for i, name in enumerate(names):
        if name == "dense":
            torch.testing.assert_close(A[i], B[i] * ramp, rtol=0, atol=0)
        elif name == "rankdef":
            assert torch.count_nonzero(A[i, :, 3 * n // 4:]) == 0
        elif name == "band":
            assert torch.count_nonzero(A[i].triu(reference.band_width(n) + 1)) == 0
        elif name == "clustered":  # ignores cond
            torch.testing.assert_close(A[i], B[i] * reference.clustered_column_scales(n), rtol=0, atol=0)
        elif name == "rowscale":  # uses max(cond, 4)
            torch.testing.assert_close(A[i], B[i] * torch.logspace(0, -4, n)[:, None], rtol=0, atol=0)


def test_mixed_small_batches_get_both_kinds():
    for seed in range(30):
        names = reference.mixed_assignment(2, 4, seed, device="cpu")
        assert "dense" in names and any(name != "dense" for name in names)
    assert len(reference.mixed_assignment(1, 4, 0, device="cpu")) == 1


@pytest.mark.parametrize("case", ALL_CASES)
def test_seeds_are_reproducible(case):
    a1, a2 = gen(3, 12, 1, 77, case), gen(3, 12, 1, 77, case)
    assert torch.equal(a1, a2)
    assert not torch.equal(a1, gen(3, 12, 1, 78, case))
    assert a1.shape == (3, 12, 12) and a1.dtype == torch.float32 and a1.is_contiguous()
    assert torch.isfinite(a1).all()


def test_case_name_is_case_insensitive_and_validated():
    assert torch.equal(gen(2, 8, 0, 1, "RankDef"), gen(2, 8, 0, 1, "rankdef"))
    with pytest.raises(ValueError):
        gen(2, 8, 0, 1, "nosuchprofile")
    with pytest.raises(ValueError):
        gen(0, 8, 0, 1, "dense")
    with pytest.raises(ValueError):
        gen(2, 8, -1, 1, "dense")


def test_profiles_dict_covers_every_case():
    assert set(reference.PROFILES) | {"mixed"} == set(ALL_CASES) == set(reference.CASE_NAMES)


# ---------------------------------------------------------------------------------------------
# Case tables, seeds, counts
# ---------------------------------------------------------------------------------------------


def test_tests_table_matches_spec():
    expected = [
        (20, 32, 1, 53124, "dense"), (40, 176, 1, 3321, "dense"), (40, 352, 1, 1200, "dense"),
        (16, 512, 2, 32523, "dense"), (4, 1024, 2, 4327, "dense"), (1, 4096, 1, 75342, "dense"),
        (16, 512, 4, 32524, "dense"), (16, 512, 0, 32525, "rankdef"), (16, 512, 0, 32526, "clustered"),
        (16, 512, 0, 32527, "band"), (16, 512, 0, 32528, "rowscale"), (16, 512, 0, 32529, "nearcollinear"),
        (4, 1024, 4, 4328, "dense"), (4, 1024, 0, 4329, "rankdef"), (4, 1024, 0, 4330, "nearrank"),
        (4, 1024, 0, 4331, "clustered"), (2, 2048, 2, 224466, "dense"), (2, 2048, 0, 224467, "rankdef"),
        (1, 4096, 0, 75343, "upper"), (16, 512, 2, 32530, "mixed"), (4, 1024, 2, 4332, "mixed"),
        (2, 2048, 2, 224468, "mixed"),
    ]
    got = [(t["batch"], t["n"], t["cond"], t["seed"], t["case"]) for t in reference.TESTS]
    assert got == expected
    assert all(set(t) == {"batch", "n", "cond", "seed", "case"} for t in reference.TESTS)


def test_benchmarks_table_matches_spec():
    expected = [
        (20, 32, 1, 43214, "dense"), (40, 176, 1, 423011, "dense"), (40, 352, 1, 123456, "dense"),
        (640, 512, 2, 1029, "dense"), (60, 1024, 2, 75342, "dense"), (8, 2048, 1, 224466, "dense"),
        (2, 4096, 1, 32412, "dense"), (640, 512, 2, 770001, "mixed"), (60, 1024, 2, 770002, "mixed"),
        (640, 512, 0, 770003, "rankdef"), (640, 512, 0, 770004, "clustered"), (60, 1024, 0, 770005, "nearrank"),
    ]
    got = [(b["batch"], b["n"], b["cond"], b["seed"], b["case"]) for b in reference.BENCHMARKS]
    assert got == expected


def test_combine_seed():
    # 1029 + (1036 * 1037) / 2 = 1029 + 537166
    assert reference.combine_seed(1029, 7) == 538195
    assert reference.combine_seed(0, 0) == 0
    assert reference.combine_seed(5, 0) == 5 + 15


def test_benchmark_count_for_the_seven_shapes():
    shapes = [(20, 32), (40, 176), (40, 352), (640, 512), (60, 1024), (8, 2048), (2, 4096)]
    assert [reference.benchmark_count(b, n) for b, n in shapes] == [50, 50, 13, 1, 1, 2, 2]


# ---------------------------------------------------------------------------------------------
# CUDA
# ---------------------------------------------------------------------------------------------


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("case", ALL_CASES)
def test_cuda_inputs_are_deterministic(case):
    a1 = generate_input(6, 64, 2, 123, case, device="cuda")
    a2 = generate_input(6, 64, 2, 123, case, device="cuda")
    assert a1.device.type == "cuda" and a1.dtype == torch.float32 and a1.is_contiguous()
    assert a1.shape == (6, 64, 64)
    assert torch.equal(a1, a2)
    ok, message = check_implementation(a1, torch.geqrf(a1))
    assert ok, message


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_mixed_assignment_matches_structure():
    names = reference.mixed_assignment(40, 64, 5, device="cuda")
    A = generate_input(40, 64, 2, 5, "mixed", device="cuda")
    for i, name in enumerate(names):
        if name == "rankdef":
            assert torch.count_nonzero(A[i, :, 48:]) == 0
