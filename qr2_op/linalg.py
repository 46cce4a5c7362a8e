"""qr2_op.qr: Q and R of a batch of matrices, a drop-in for ``torch.linalg.qr`` built on qr2.geqrf.

R comes from qr2.geqrf's H (its upper triangle); Q is formed from H and tau by qr2.orgqr (qr2's blocked update on
float32 CUDA tensors).
"""
import sys

import torch
import torch.autograd.forward_ad as _forward_ad
from torch._C._functorch import TransformType

__all__ = ["qr"]

_MODES = ("reduced", "complete", "r")


_REVERSE, _FORWARD = 1, 2


def _derivatives(A: torch.Tensor) -> int:
    """Which derivatives of the decomposition may be asked for (qr2.geqrf has none): reverse mode where A requires
    grad under grad mode or torch.func's grad, vjp or jacrev is active; forward mode where a forward-AD level is open
    or torch.func's jvp or jacfwd is active. vmap alone asks for none: qr2.geqrf batches the samples itself."""
    modes = _REVERSE if A.requires_grad and torch.is_grad_enabled() else 0
    if _forward_ad._current_level >= 0:
        modes |= _FORWARD
    if torch._C._are_functorch_transforms_active():
        for i in torch._C._functorch.get_interpreter_stack() or []:
            modes |= {TransformType.Grad: _REVERSE, TransformType.Jvp: _FORWARD}.get(i.key(), 0)
    return modes


def qr(A: torch.Tensor, mode: str = "reduced") -> tuple[torch.Tensor, torch.Tensor]:
    """QR decomposition A = Q R of every matrix of a batch, as ``torch.linalg.qr``: same shapes, strides (column-major
    inside each matrix) and signs (LAPACK's: R's diagonal may be negative).

    Args:
        A: tensor of shape ``(*, m, n)``, any strides; never modified.
        mode: ``"reduced"`` (Q ``(*, m, k)``, R ``(*, k, n)``, k = min(m, n)), ``"complete"`` (Q ``(*, m, m)``,
            R ``(*, m, n)``) or ``"r"`` (R only; Q is an empty tensor).

    R is the upper triangle of qr2.geqrf's H, bit for bit. Q is qr2.orgqr of H and tau.
    Differentiable as ``torch.linalg.qr`` is (modes "reduced", and "complete" with m <= n; real dtypes): backward,
    forward-mode AD and torch.func's transforms run qr2's decomposition and derive from Q and R with batched
    products and one triangular solve. The other modes and complex dtypes hand calls that need a derivative to
    ``torch.linalg.qr``, which raises or derives as it does.
    """
    if not isinstance(A, torch.Tensor):
        raise TypeError(f"qr2.qr: expected a Tensor, got {type(A).__name__}")
    if mode not in _MODES:
        raise RuntimeError(f"qr2.qr: expected mode 'reduced', 'complete' or 'r', got {mode!r}")
    if A.dim() < 2:
        raise RuntimeError(f"qr2.qr: expected a tensor of shape (*, m, n) with at least 2 dimensions, got {A.dim()} "
                           "dimension(s)")
    dtensor = sys.modules.get("torch.distributed.tensor")  # loaded by whoever made a DTensor
    if dtensor is not None and isinstance(A, dtensor.DTensor):
        from .distributed import qr_where_it_lies

        return qr_where_it_lies(A, mode)
    derivatives = _derivatives(A)
    if derivatives:
        m, n = A.shape[-2:]
        if A.is_complex() or mode == "r" or (mode == "complete" and m > n):
            return torch.linalg.qr(A, mode=mode)
        # torch.compile traces a Function with a jvp not at all, so forward mode has a class of its own
        return (_QRForwardMode if derivatives & _FORWARD else _QR).apply(A, mode)
    return _decompose(A, mode)


def _decompose(A: torch.Tensor, mode: str) -> tuple[torch.Tensor, torch.Tensor]:
    H, tau = torch.ops.qr2.geqrf(A)
    *batch, m, n = A.shape
    k = min(m, n)
    rows = m if mode == "complete" else k
    R = torch.tril(H.mT[..., :rows]).mT  # tril of the row-major (n, rows) copy: R column-major, one copy
    if mode == "r":
        return H.new_empty(0), R
    if mode == "reduced" or m <= n:
        return torch.ops.qr2.orgqr(H[..., :, :k], tau), R
    # complete with m > n: the first m columns of H_0 ... H_{n-1} (LAPACK orgqr with k = n < m columns, as torch)
    Hc = torch.cat([H, H.new_zeros((*batch, m, m - n))], dim=-1)
    return torch.ops.qr2.orgqr(Hc, tau), R


# Derivatives of A = Q R (real; Q m x k with orthonormal columns, R k x n upper triangular, k = min(m, n)). For the
# leading k columns X = Q R1: C = Q^T dX R1^-1 is the skew Q^T dQ plus the upper triangular dR1 R1^-1, so the strict
# lower triangle of C fixes the skew part W = tril(C, -1) - tril(C, -1)^T and U = C - W gives dR1 = U R1,
# dQ = dX R1^-1 - Q U. The trailing columns Y = Q R2 (m < n) add dR2 = Q^T dY - W R2 (Q is square there).


def _skew_of_lower(C: torch.Tensor) -> torch.Tensor:
    L = torch.tril(C, -1)
    return L - L.mT


def _mirror_upper(M: torch.Tensor) -> torch.Tensor:
    """M's upper triangle (diagonal included) reflected into its lower one: the adjoint of C -> C - skew(C)."""
    return torch.triu(M) + torch.triu(M, 1).mT


def _leading(x: torch.Tensor, k: int) -> torch.Tensor:
    return x if x.shape[-1] == k else x[..., :k]  # no slice where none is needed (legacy vmap has no rule for alias)


def _qr_jvp(Q, R, dA):
    k = Q.shape[-1]
    R1 = _leading(R, k)
    X = torch.linalg.solve_triangular(R1, _leading(dA, k), upper=True, left=False)  # dX R1^-1
    C = Q.mT @ X
    W = _skew_of_lower(C)
    U = C - W
    dQ = X - Q @ U
    dR = U @ R1
    if R.shape[-1] > k:
        dR = torch.cat([dR, Q.mT @ dA[..., k:] - W @ R[..., k:]], dim=-1)
    return _column_major(dQ), _column_major(dR)  # forward AD wants the tangents laid out as Q and R are


def _column_major(x: torch.Tensor) -> torch.Tensor:
    return x.mT.contiguous().mT


def _qr_vjp(Q, R, gQ, gR):
    """The adjoint of _qr_jvp: gX = (gQ + Q mirror(gR1 R1^T - Q^T gQ)) R1^-T, and gY = Q gR2 where m < n."""
    k, n = Q.shape[-1], R.shape[-1]
    R1 = _leading(R, k)
    if n > k:  # dR2's -W R2 pairs gR2 with W as a cotangent Q R2 gR2^T of Q would (only W's skew part counts)
        if gR is None:
            gY = Q.new_zeros((*Q.shape[:-1], n - k))
        else:
            gR2 = gR[..., k:]
            gY = Q @ gR2
            through_w = Q @ (R[..., k:] @ gR2.mT)
            gQ = through_w if gQ is None else gQ + through_w
    M = torch.zeros_like(R1) if gR is None else _leading(gR, k) @ R1.mT
    if gQ is not None:
        M = M - Q.mT @ gQ
    B = Q @ _mirror_upper(M)
    if gQ is not None:
        B = B + gQ
    gX = torch.linalg.solve_triangular(R1.mT, B, upper=False, left=False)  # B R1^-T
    return gX if n == k else torch.cat([gX, gY], dim=-1)


class _QR(torch.autograd.Function):
    """qr2's decomposition with torch.linalg.qr's reverse-mode derivative (modes whose Q has min(m, n) columns)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(A, mode):
        return _decompose(A, mode)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(*output)
        ctx.save_for_forward(*output)

    @staticmethod
    def backward(ctx, gQ, gR):
        if gQ is None and gR is None:
            return None, None
        Q, R = ctx.saved_tensors
        return _qr_vjp(Q, R, gQ, gR), None


class _QRForwardMode(_QR):
    """_QR with the forward-mode derivative too."""

    @staticmethod
    def jvp(ctx, dA, _mode):
        Q, R = ctx.saved_tensors
        return _qr_jvp(Q, R, dA)
