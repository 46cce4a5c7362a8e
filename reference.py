"""Inputs, correctness gates and case tables of the GPU MODE "QR2" (qr_v2) problem.

Written for this project from the problem statement; nothing here is imported from upstream.

* ``generate_input`` builds a batch of FP32 test matrices. On CUDA it reproduces QR2's inputs bit
  for bit: it makes the same random draws, in the same order and with the same shapes, from a
  ``torch.Generator`` on the device, and transforms them with the same torch operations. On the
  CPU the values differ (another random stream) but every profile has the same structure.
* ``check_implementation`` applies QR2's two hard gates (per-matrix factor residual, batch-max
  orthogonality) to an ``(H, tau)`` pair in ``torch.geqrf``'s compact Householder form. Beyond
  QR2 it also takes rectangular inputs and extra leading batch dimensions.
* ``TESTS`` and ``BENCHMARKS`` are QR2's 22 test specs and 12 ranked specs; ``combine_seed`` is the
  secret-seed remap and ``benchmark_count`` the number of inputs timed per benchmark case.

Run as a program (``python3 reference.py --help``) it lists the case tables and profiles, or checks
torch.geqrf's (or qr2's) output on given cases; benchmark.py is the harness that times.
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable

import torch

# ---------------------------------------------------------------------------------------------
# Case tables
# ---------------------------------------------------------------------------------------------


def _spec(batch: int, n: int, cond: int, seed: int, case: str = "dense") -> dict:
    return {"batch": batch, "n": n, "cond": cond, "seed": seed, "case": case}


# QR2's test specs, in QR2's order (test mode uses these seeds as they are).
TESTS: list[dict] = [
    _spec(20, 32, 1, 53124),
    _spec(40, 176, 1, 3321),
    _spec(40, 352, 1, 1200),
    _spec(16, 512, 2, 32523),
    _spec(4, 1024, 2, 4327),
    _spec(1, 4096, 1, 75342),
    _spec(16, 512, 4, 32524),
    _spec(16, 512, 0, 32525, "rankdef"),
    _spec(16, 512, 0, 32526, "clustered"),
    _spec(16, 512, 0, 32527, "band"),
    _spec(16, 512, 0, 32528, "rowscale"),
    _spec(16, 512, 0, 32529, "nearcollinear"),
    _spec(4, 1024, 4, 4328),
    _spec(4, 1024, 0, 4329, "rankdef"),
    _spec(4, 1024, 0, 4330, "nearrank"),
    _spec(4, 1024, 0, 4331, "clustered"),
    _spec(2, 2048, 2, 224466),
    _spec(2, 2048, 0, 224467, "rankdef"),
    _spec(1, 4096, 0, 75343, "upper"),
    _spec(16, 512, 2, 32530, "mixed"),
    _spec(4, 1024, 2, 4332, "mixed"),
    _spec(2, 2048, 2, 224468, "mixed"),
]

# QR2's ranked benchmark specs, in QR2's order (the score is the geometric mean over these).
BENCHMARKS: list[dict] = [
    _spec(20, 32, 1, 43214),
    _spec(40, 176, 1, 423011),
    _spec(40, 352, 1, 123456),
    _spec(640, 512, 2, 1029),
    _spec(60, 1024, 2, 75342),
    _spec(8, 2048, 1, 224466),
    _spec(2, 4096, 1, 32412),
    _spec(640, 512, 2, 770001, "mixed"),
    _spec(60, 1024, 2, 770002, "mixed"),
    _spec(640, 512, 0, 770003, "rankdef"),
    _spec(640, 512, 0, 770004, "clustered"),
    _spec(60, 1024, 0, 770005, "nearrank"),
]

# Benchmark inputs per case: enough to cover about 256 MiB of A, between 1 and 50 of them.
BENCHMARK_INPUT_BYTES = 256 * 1024 * 1024
MAX_BENCHMARK_INPUTS = 50


def benchmark_count(batch: int, n: int) -> int:
    """How many inputs a benchmark case generates and times per iteration."""
    bytes_per_input = batch * n * n * 4  # FP32 A
    if bytes_per_input <= 0:
        return 1
    return max(1, min(MAX_BENCHMARK_INPUTS, BENCHMARK_INPUT_BYTES // bytes_per_input))


def combine_seed(seed: int, secret: int) -> int:
    """QR2's secret-seed remap: seed + T(seed + secret), T(k) = k(k+1)/2 (Cantor-style pairing)."""
    total = seed + secret
    return int(seed + total * (total + 1) // 2)


# ---------------------------------------------------------------------------------------------
# Input profiles
#
# Each profile takes the base batch `a` (m matrices of n x n, already drawn from `gen`), the
# case's `cond` and the generator, and returns the transformed batch. A profile that needs more
# randomness draws it from `gen` after the base draw. The exact torch operations matter for
# bit-identical CUDA inputs (for example masking the band by multiplying with a boolean mask,
# which keeps QR2's signed zeros).
# ---------------------------------------------------------------------------------------------

EPS32 = torch.finfo(torch.float32).eps  # 2**-23


def _ramp(n: int, decades: float, device: torch.device) -> torch.Tensor:
    """n FP32 values from 1 down to 10**-decades, geometrically spaced (computed on `device`)."""
    return torch.logspace(0.0, -float(decades), n, device=device, dtype=torch.float32)


def scale_columns(a: torch.Tensor, cond: int) -> torch.Tensor:
    """C(cond): column j times 10**(-cond * j / (n - 1)); the identity when cond == 0."""
    if not cond:
        return a.contiguous()
    return a * _ramp(a.shape[-1], cond, a.device)


def profile_dense(a: torch.Tensor, cond: int, gen: torch.Generator) -> torch.Tensor:
    """Gaussian matrix with the column ramp C(cond)."""
    return scale_columns(a, cond)


def profile_upper(a: torch.Tensor, cond: int, gen: torch.Generator) -> torch.Tensor:
    """Upper triangle of the Gaussian matrix, diagonal raised by 1 .. 0.25, then C(cond)."""
    n = a.shape[-1]
    boost = torch.linspace(1.0, 0.25, n, device=a.device, dtype=torch.float32)
    a = torch.triu(a)
    a.diagonal(dim1=-2, dim2=-1).add_(boost)
    return scale_columns(a, cond)


def profile_diagonal(a: torch.Tensor, cond: int, gen: torch.Generator) -> torch.Tensor:
    """Diagonal matrix of random signs times 1 .. 10**-max(cond, 2); the base batch is unused."""
    m, n = a.shape[0], a.shape[-1]
    draw = torch.randn((m, n), device=a.device, dtype=torch.float32, generator=gen)
    signs = torch.where(draw > 0, 1.0, -1.0).to(torch.float32)  # zero counts as negative
    return torch.diag_embed(signs * _ramp(n, max(cond, 2), a.device))


def _rank_of(n: int) -> int:
    """Rank kept by rankdef and nearrank: three quarters of the columns, at least one."""
    return max(1, (3 * n) // 4)


def profile_rankdef(a: torch.Tensor, cond: int, gen: torch.Generator) -> torch.Tensor:
    """Last n - 3n/4 columns set to exactly zero, then C(cond)."""
    a[:, :, _rank_of(a.shape[-1]):] = 0.0
    return scale_columns(a, cond)


def profile_nearrank(a: torch.Tensor, cond: int, gen: torch.Generator) -> torch.Tensor:
    """Last n - 3n/4 columns = copies of the first ones plus 1e-5 Gaussian noise, then C(cond)."""
    m, n = a.shape[0], a.shape[-1]
    rank = _rank_of(n)
    tail = n - rank
    if tail > 0:
        noise = torch.randn((m, n, tail), device=a.device, dtype=torch.float32, generator=gen)
        a[:, :, rank:] = a[:, :, :tail] + 1.0e-5 * noise
    return scale_columns(a, cond)


def clustered_column_scales(n: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """Column scales of the clustered profile: 1 for the first half, 4*eps32 for the second,
    and sqrt(eps32) for the four columns around the middle when n >= 8."""
    scales = torch.ones((n,), device=device, dtype=torch.float32)
    scales[n // 2:] = 4.0 * EPS32
    if n >= 8:
        middle = slice(max(0, n // 2 - 2), min(n, n // 2 + 2))
        scales[middle] = torch.tensor(EPS32, device=device).sqrt()
    return scales


def profile_clustered(a: torch.Tensor, cond: int, gen: torch.Generator) -> torch.Tensor:
    """Columns scaled into three clusters (1, sqrt(eps32), 4*eps32); `cond` is ignored."""
    return a * clustered_column_scales(a.shape[-1], a.device)


def band_width(n: int) -> int:
    """Half-bandwidth of the band profile: n/32 clamped to [2, 32]."""
    return max(2, min(32, n // 32))


def profile_band(a: torch.Tensor, cond: int, gen: torch.Generator) -> torch.Tensor:
    """Entries with |i - j| <= band_width(n) kept, diagonal raised by 1 .. 0.5, then C(cond)."""
    n = a.shape[-1]
    index = torch.arange(n, device=a.device)
    inside = (index[:, None] - index[None, :]).abs() <= band_width(n)
    a = a * inside
    boost = torch.linspace(1.0, 0.5, n, device=a.device, dtype=torch.float32)
    a.diagonal(dim1=-2, dim2=-1).add_(boost)
    return scale_columns(a, cond)


def profile_nearcollinear(a: torch.Tensor, cond: int, gen: torch.Generator) -> torch.Tensor:
    """Every column = one shared Gaussian column plus 1e-4 Gaussian noise, then C(cond);
    the base batch is unused."""
    m, n = a.shape[0], a.shape[-1]
    shared = torch.randn((m, n, 1), device=a.device, dtype=torch.float32, generator=gen)
    noise = torch.randn((m, n, n), device=a.device, dtype=torch.float32, generator=gen)
    a = shared.expand(m, n, n) + 1.0e-4 * noise
    return scale_columns(a, cond)


def profile_rowscale(a: torch.Tensor, cond: int, gen: torch.Generator) -> torch.Tensor:
    """Row i times 10**(-max(cond, 4) * i / (n - 1)); no column ramp."""
    n = a.shape[-1]
    return _ramp(n, max(cond, 4), a.device).reshape(1, n, 1) * a


# Single profiles by name (mixed is built from these; see profile_mixed).
PROFILES: dict[str, Callable[[torch.Tensor, int, torch.Generator], torch.Tensor]] = {
    "dense": profile_dense,
    "upper": profile_upper,
    "diagonal": profile_diagonal,
    "rankdef": profile_rankdef,
    "nearrank": profile_nearrank,
    "clustered": profile_clustered,
    "band": profile_band,
    "rowscale": profile_rowscale,
    "nearcollinear": profile_nearcollinear,
}

# The profiles a mixed batch draws from, with their sampling weights (dense half the time).
# Label k means MIXED_CHOICES[k]; the order fixes both the labels and the order of extra draws.
MIXED_CHOICES = ("dense", "rankdef", "nearrank", "clustered", "band", "rowscale", "nearcollinear")
MIXED_WEIGHTS = (6.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0)

CASE_NAMES = tuple(PROFILES) + ("mixed",)


def _draw_mixed_labels(m: int, gen: torch.Generator, device: torch.device) -> torch.Tensor:
    """One label per matrix; when m >= 2, at least one dense and at least one other."""
    weights = torch.tensor(MIXED_WEIGHTS, dtype=torch.float32, device=device)
    labels = torch.multinomial(weights, m, replacement=True, generator=gen)
    if m >= 2:
        dense = labels == 0
        if not bool(dense.any()):
            where = int(torch.randint(0, m, (1,), device=device, generator=gen))
            labels[where] = 0
        elif bool(dense.all()):
            where = int(torch.randint(0, m, (1,), device=device, generator=gen))
            other = int(torch.randint(1, len(MIXED_CHOICES), (1,), device=device, generator=gen))
            labels[where] = other
    return labels


def profile_mixed(a: torch.Tensor, cond: int, gen: torch.Generator) -> torch.Tensor:
    """Each matrix gets its own profile from MIXED_CHOICES, all with the case's cond. The groups
    are processed in MIXED_CHOICES order so that their extra draws come in a fixed order."""
    labels = _draw_mixed_labels(a.shape[0], gen, a.device)
    for label, name in enumerate(MIXED_CHOICES):
        members = labels == label
        if bool(members.any()):
            a[members] = PROFILES[name](a[members], cond, gen)
    return a


def _seeded_generator(seed: int, device: torch.device | str) -> torch.Generator:
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    return gen


def _draw_base(batch: int, n: int, gen: torch.Generator, device) -> torch.Tensor:
    """The first draw of every case: batch i.i.d. N(0, 1) matrices."""
    return torch.randn((batch, n, n), device=device, dtype=torch.float32, generator=gen)


def generate_input(
    batch: int, n: int, cond: int, seed: int, case: str = "dense", device: torch.device | str = "cuda"
) -> torch.Tensor:
    """A contiguous (batch, n, n) FP32 batch of the named profile (see CASE_NAMES).

    On CUDA this equals QR2's input for the same (batch, n, cond, seed, case) bit for bit.
    """
    if batch <= 0 or n <= 0 or cond < 0:
        raise ValueError(f"need batch > 0, n > 0, cond >= 0; got batch={batch}, n={n}, cond={cond}")
    case = case.lower()
    if case not in CASE_NAMES:
        raise ValueError(f"unknown case {case!r}; known: {', '.join(CASE_NAMES)}")
    gen = _seeded_generator(seed, device)
    a = _draw_base(batch, n, gen, device)
    make = profile_mixed if case == "mixed" else PROFILES[case]
    return make(a, cond, gen).contiguous()


def mixed_assignment(batch: int, n: int, seed: int, device: torch.device | str = "cuda") -> list[str]:
    """The profile name each matrix of generate_input(batch, n, cond, seed, "mixed", device) gets
    (it does not depend on cond). Repeats the same draws, so it costs one base batch."""
    gen = _seeded_generator(seed, device)
    _draw_base(batch, n, gen, device)
    labels = _draw_mixed_labels(batch, gen, torch.device(device))
    return [MIXED_CHOICES[int(k)] for k in labels.tolist()]


# ---------------------------------------------------------------------------------------------
# Correctness check
# ---------------------------------------------------------------------------------------------

FACTOR_TOL_MULTIPLIER = 20.0  # factor gate: ||R - Q^T A||_1 <= 20 * n * eps32 * ||A||_1
ORTH_TOL_MULTIPLIER = 100.0  # orthogonality gate: ||Q^T Q - I||_1 <= 100 * n * eps32


def relative_tolerance(size: int, multiplier: float) -> float:
    return multiplier * max(size, 1) * EPS32


def _l1_norms(x: torch.Tensor) -> torch.Tensor:
    """Matrix 1-norm (largest absolute column sum) of each matrix, in FP64."""
    return torch.linalg.matrix_norm(x.double(), ord=1, dim=(-2, -1))


def _in_eps_units(residual: torch.Tensor, scale: torch.Tensor, size: int) -> torch.Tensor:
    """residual / (eps32 * size * scale): how many 'size * eps32 * scale' units the residual is."""
    return residual / (EPS32 * max(size, 1) * scale.clamp_min(1e-30))


def _finite(x: torch.Tensor) -> bool:
    return bool(torch.isfinite(x).all().item())


def _tensor_problem(name: str, value, shape: tuple, device: torch.device) -> str | None:
    """Why `value` is not a finite FP32 tensor of `shape` on `device`, or None if it is."""
    if not isinstance(value, torch.Tensor):
        return f"{name} must be a torch.Tensor"
    if value.shape != shape:
        return f"{name} shape must be {shape}, got {tuple(value.shape)}"
    if value.dtype != torch.float32:
        return f"{name} dtype must be torch.float32, got {value.dtype}"
    if value.device != device:
        return f"{name} must be on {device}, got {value.device}"
    if not _finite(value):
        return f"{name} contains NaN or Inf"
    return None


def _output_problem(A: torch.Tensor, output, names: tuple[str, str], shapes) -> str | None:
    """Why `output` is not a tuple of two finite FP32 tensors on A's device with the shapes
    shapes(batch_dims, m, n, min(m, n)) gives, or None if it is. A must be a non-empty (*batch, m, n) tensor."""
    if A.dim() < 2 or A.numel() == 0:
        raise ValueError(f"A must be a non-empty (*batch, m, n) tensor, got shape {tuple(A.shape)}")
    if not isinstance(output, tuple) or len(output) != 2:
        return f"output must be a tuple `({names[0]}, {names[1]})`"
    *batch_dims, m, n = A.shape
    for name, value, shape in zip(names, output, shapes(tuple(batch_dims), m, n, min(m, n))):
        problem = _tensor_problem(name, value, shape, A.device)
        if problem is not None:
            return problem
    return None


def check_implementation(A: torch.Tensor, output) -> tuple[bool, str]:
    """Check a geqrf-style output ``(H, tau)`` for the input ``A``: returns (ok, message).

    A may be (batch, m, n) with any m, n >= 1, or have further leading batch dimensions (they are
    flattened; "matrix=" in a failure message is then the flat index). H must have A's shape and
    tau shape (*batch, min(m, n)), both FP32 on A's device and finite. With k = min(m, n):
    Q = householder_product(H[..., :k], tau) in FP32 (m x k), R = the first k rows of triu(H)
    (k x n); then in FP64 each matrix must satisfy ||R - Q^T A||_1 <= 20 n eps32 ||A||_1 and the
    batch maximum of ||Q^T Q - I_k||_1 must be <= 100 n eps32. For square input these are exactly
    QR2's gates, and the messages are QR2's.
    """
    problem = _output_problem(A, output, ("H", "tau"), lambda b, m, n, k: ((*b, m, n), (*b, k)))
    if problem is not None:
        return False, problem
    H, tau = output
    m, n = A.shape[-2:]
    k = min(m, n)
    A = A.reshape(-1, m, n)
    H = H.reshape(-1, m, n)
    tau = tau.reshape(-1, k)

    # Q and R exactly as a user of torch.geqrf would form them: in FP32, by torch.
    Q = torch.linalg.householder_product(H[:, :, :k], tau)
    R = torch.triu(H)[:, :k, :]
    if not _finite(Q):
        return False, "Q materialized from `(H, tau)` contains NaN or Inf"
    if not _finite(R):
        return False, "R extracted from `triu(H)` contains NaN or Inf"
    return _check_factors(A, Q, R)


def check_qr(A: torch.Tensor, output) -> tuple[bool, str]:
    """Check a ``torch.linalg.qr``-style output ``(Q, R)`` (mode "reduced") for the input ``A``: returns (ok, message).

    Q must be (*batch, m, k) and R (*batch, k, n), k = min(m, n), both finite FP32 on A's device, R zero below its
    diagonal; then the gates of check_implementation, with its messages, on this Q and R.
    """
    problem = _output_problem(A, output, ("Q", "R"), lambda b, m, n, k: ((*b, m, k), (*b, k, n)))
    if problem is not None:
        return False, problem
    Q, R = output
    m, n = A.shape[-2:]
    k = min(m, n)
    if bool(torch.tril(R, diagonal=-1).ne(0).any().item()):
        return False, "R is not upper triangular"
    return _check_factors(A.reshape(-1, m, n), Q.reshape(-1, m, k), R.reshape(-1, k, n))


def check_orgqr(A: torch.Tensor, output) -> tuple[bool, str]:
    """Check an orgqr output for the input ``A``: output is ``((H, tau), Q)``, where (H, tau) is a geqrf of A and Q
    (*batch, m, k), k = min(m, n), was formed from it (``torch.linalg.householder_product``'s contract). The gates of
    check_implementation on this Q and R = the first k rows of triu(H)."""
    (H, tau), Q = output
    m, n = A.shape[-2:]
    k = min(m, n)
    problem = _tensor_problem("Q", Q, (*A.shape[:-2], m, k), A.device)
    if problem is not None:
        return False, problem
    R = torch.triu(H)[..., :k, :]
    return _check_factors(A.reshape(-1, m, n), Q.reshape(-1, m, k), R.reshape(-1, k, n))


def check_ormqr(A: torch.Tensor, output) -> tuple[bool, str]:
    """Check an ormqr output for the input ``A``: output is ``((H, tau, A), X)``, where (H, tau) is a geqrf of A and X
    = Q^T A (``torch.ormqr(H, tau, A, left=True, transpose=True)``). QR2's factor gate on Q^T A as the operator
    computed it: ||triu(H) - X||_1 <= 20 max(m, n) eps32 ||A||_1 for every matrix (zeros below R's rows too)."""
    (H, _, _), X = output
    m, n = A.shape[-2:]
    problem = _tensor_problem("X", X, tuple(A.shape), A.device)
    if problem is not None:
        return False, problem
    n_eff = max(m, n)
    A_norm = _l1_norms(A.reshape(-1, m, n))
    residual = _l1_norms(torch.triu(H).reshape(-1, m, n).double() - X.reshape(-1, m, n).double())
    scaled = _in_eps_units(residual, A_norm, n_eff)
    if not _finite(scaled):
        return False, "R - Q.T @ A residual produced NaN or Inf"
    if bool((scaled > FACTOR_TOL_MULTIPLIER).any().item()):
        worst = int(scaled.argmax().item())
        return False, f"R - Q.T @ A is too large: matrix={worst}, scaled={scaled[worst].item():.3g}"
    return True, f"scaled_factor_residual={scaled.amax().item():.3g}; batch={A_norm.numel()}; m={m}; n={n}"


def _check_factors(A: torch.Tensor, Q: torch.Tensor, R: torch.Tensor) -> tuple[bool, str]:
    """QR2's gates for A (batch, m, n), Q (batch, m, k) and R (batch, k, n), all finite FP32: see
    check_implementation."""
    batch, m, n = A.shape
    k = min(m, n)
    # Rectangular inputs: a Householder QR of an m x n matrix has errors that grow with both
    # dimensions (the reflectors have length up to m, there are k of them, and ||.||_1 sums over
    # up to max(m, n) entries), so the tolerance uses n_eff = max(m, n). Square: n_eff = n.
    n_eff = max(m, n)
    factor_rtol = relative_tolerance(n_eff, FACTOR_TOL_MULTIPLIER)
    orth_rtol = relative_tolerance(n_eff, ORTH_TOL_MULTIPLIER)
    A64, Q64, R64 = A.double(), Q.double(), R.double()
    QtA = Q64.transpose(-1, -2) @ A64
    if not _finite(QtA):
        return False, "Q.T @ A contains NaN or Inf"

    # Gate 1, for every matrix on its own: R must equal Q^T A.
    A_norm = _l1_norms(A64)
    factor_residual = _l1_norms(R64 - QtA)
    factor_allowed = factor_rtol * A_norm
    factor_scaled = _in_eps_units(factor_residual, A_norm, n_eff)
    if not _finite(factor_scaled):
        return False, "R - Q.T @ A residual produced NaN or Inf"
    if bool((factor_residual > factor_allowed).any().item()):
        worst = int(factor_scaled.argmax().item())
        return False, (
            "R - Q.T @ A is too large: "
            f"matrix={worst}, residual={factor_residual[worst].item():.3g}, "
            f"allowed={factor_allowed[worst].item():.3g}, "
            f"scaled={factor_scaled[worst].item():.3g}"
        )

    # Gate 2, on the batch maximum: Q must be orthogonal.
    identity = torch.eye(k, device=A.device, dtype=torch.float64).expand(batch, k, k)
    QtQ = Q64.transpose(-1, -2) @ Q64
    if not _finite(QtQ):
        return False, "Q.T @ Q contains NaN or Inf"
    orth_each = _l1_norms(QtQ - identity)
    identity_norm = _l1_norms(identity).amax()  # = 1
    orth_residual = orth_each.amax()
    orth_allowed = orth_rtol * identity_norm
    orth_scaled = _in_eps_units(orth_residual, identity_norm, n_eff)
    if not _finite(orth_scaled):
        return False, "Q.T @ Q residual produced NaN or Inf"
    if orth_residual.item() > orth_allowed.item():
        worst = int(orth_each.argmax().item())
        return False, (
            "Q is not orthogonal enough: "
            f"matrix={worst}, residual={orth_residual.item():.3g}, "
            f"allowed={orth_allowed.item():.3g}, scaled={orth_scaled.item():.3g}"
        )

    # Diagnostics (not gated): what Q^T A leaves below the diagonal, and how well QR rebuilds A.
    largest_A = A_norm.amax()
    triangular_scaled = _in_eps_units(_l1_norms(torch.tril(QtA, diagonal=-1)).amax(), largest_A, n_eff)
    QR = Q64 @ R64
    if not _finite(QR):
        return False, "Q @ R contains NaN or Inf"
    reconstruction_scaled = _in_eps_units(_l1_norms(QR - A64).amax(), largest_A, n_eff)

    shape_fields = f"batch={batch}; n={n}" if m == n else f"batch={batch}; m={m}; n={n}"
    return True, (
        f"factor_rtol={factor_rtol:.3g}; "
        f"orth_rtol={orth_rtol:.3g}; "
        f"scaled_factor_residual={factor_scaled.amax().item():.3g}; "
        f"scaled_reconstruction_residual={reconstruction_scaled.item():.3g}; "
        f"scaled_triangular_residual={triangular_scaled.item():.3g}; "
        f"scaled_orthogonality_residual={orth_scaled.item():.3g}; "
        f"{shape_fields}"
    )


def parse_check_message(message: str) -> dict[str, float]:
    """The numeric `key=value` fields of a passing check message, e.g. {'scaled_factor_residual': 3.1}."""
    fields = {}
    for part in message.split(";"):
        key, sep, value = part.strip().partition("=")
        if not sep:
            continue
        try:
            fields[key] = float(value)
        except ValueError:
            pass
    return fields


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------

CLI_DESCRIPTION = """\
The QR2 reference implementation and checker: how the GPU MODE QR2 (qr_v2) problem generates
its inputs and judges an output. benchmark.py and the tests import it; run on its own it
prints the case tables or checks a factorisation, and times nothing (benchmark.py times).

Input generation, generate_input(batch, n, cond, seed, case, device): a (batch, n, n) FP32 batch
of one profile (the case), one of
  {profiles},
or mixed (each matrix draws its own profile, dense half the time). cond sets the column ramp
10**-cond where the profile uses one. On CUDA the inputs equal QR2's bit for bit; on the CPU
the values differ (another random stream) but every profile has the same structure.

The checker, check_implementation(A, (H, tau)): H and tau must be finite FP32 tensors of the
right shapes on A's device (torch.geqrf's compact Householder form). Q and R are formed in FP32
by torch, the residuals in FP64, and two gates apply: every matrix must satisfy
||R - Q^T A||_1 <= 20 n eps32 ||A||_1, and the batch maximum of ||Q^T Q - I||_1 must be
<= 100 n eps32 (rectangular inputs use max(m, n) for n). It returns (ok, message): QR2's
failure message, or the scaled residuals of a pass.

Running it: without options it prints QR2's 22 test specs and 12 ranked benchmark specs (with
the inputs timed per benchmark case) and the profiles. --check generates the case's input with
the given seed and checks torch.geqrf's output on it (qr2_op.geqrf's with --impl qr2), one
line per case; the exit status is 1 if any check fails.
"""


def _format_spec(index: int, spec: dict, timed_inputs: bool) -> str:
    line = (f"{index:>3}  batch {spec['batch']:>4}  n {spec['n']:>5}  cond {spec['cond']}  "
            f"seed {spec['seed']:>7}  {spec['case']}")
    if timed_inputs:
        line += f"  ({benchmark_count(spec['batch'], spec['n'])} inputs timed)"
    return line


def _parse_check(text: str) -> dict:
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 5:
        raise argparse.ArgumentTypeError(f"wants batch,n,cond,profile,seed; got {text!r}")
    try:
        spec = _spec(int(parts[0]), int(parts[1]), int(parts[2]), int(parts[4]), parts[3].lower())
    except ValueError:
        raise argparse.ArgumentTypeError(f"batch, n, cond and seed must be integers; got {text!r}") from None
    if spec["case"] not in CASE_NAMES:
        raise argparse.ArgumentTypeError(f"unknown profile {parts[3]!r}; known: {', '.join(CASE_NAMES)}")
    if spec["batch"] <= 0 or spec["n"] <= 0 or spec["cond"] < 0:
        raise argparse.ArgumentTypeError(f"need batch > 0, n > 0, cond >= 0; got {text!r}")
    return spec


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="reference.py",
        description=CLI_DESCRIPTION.format(profiles=", ".join(PROFILES)),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Examples:\n  python3 reference.py\n  python3 reference.py --check 20,32,1,dense,53124 "
               "--check 4,64,0,mixed,7 --device cpu",
    )
    p.add_argument("--check", action="append", default=[], type=_parse_check, metavar="B,N,COND,PROFILE,SEED",
                   help="generate this case's input (the seed as given) and check a factorisation of it (repeatable)")
    p.add_argument("--impl", choices=("torch", "qr2"), default="torch",
                   help="what --check factors: torch.geqrf (default) or qr2_op.geqrf (needs the built library)")
    p.add_argument("--device", choices=("cpu", "cuda"), default=None,
                   help="where --check generates and factors (default: cuda if available, else cpu)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not args.check:
        print(f"QR2 test specs ({len(TESTS)}; test mode uses these seeds as they are):")
        for i, spec in enumerate(TESTS):
            print(_format_spec(i, spec, timed_inputs=False))
        print(f"\nQR2 ranked benchmark specs ({len(BENCHMARKS)}; timed inputs use seeds seed+42, seed+84, ...):")
        for i, spec in enumerate(BENCHMARKS):
            print(_format_spec(i, spec, timed_inputs=True))
        print(f"\nprofiles: {', '.join(CASE_NAMES)}")
        return 0
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        print("reference.py: --device cuda but no CUDA device is available", file=sys.stderr)
        return 2
    if args.impl == "qr2":
        import qr2_op

        factor = qr2_op.geqrf
    else:
        factor = torch.geqrf
    failed = 0
    for spec in args.check:
        A = generate_input(spec["batch"], spec["n"], spec["cond"], spec["seed"], spec["case"], device)
        ok, message = check_implementation(A, factor(A.clone()))
        failed += not ok
        label = f"{spec['batch']}x{spec['n']} {spec['case']} c{spec['cond']} seed {spec['seed']}"
        print(f"{'pass' if ok else 'FAIL'}  {label} [{args.impl}, {device}]: {message}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
