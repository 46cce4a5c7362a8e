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


def _needs_derivatives(A: torch.Tensor) -> bool:
    """Whether a derivative of the decomposition may be asked for (qr2.geqrf has none; torch.linalg.qr has both):
    A requires grad under grad mode, a forward-AD level is open, or a torch.func transform that differentiates
    (grad, vjp, jacrev, jvp, jacfwd) is active. vmap alone is not: qr2.geqrf batches the samples itself."""
    if A.requires_grad and torch.is_grad_enabled():
        return True
    if _forward_ad._current_level >= 0:
        return True
    if not torch._C._are_functorch_transforms_active():
        return False
    stack = torch._C._functorch.get_interpreter_stack() or []
    return any(i.key() in (TransformType.Grad, TransformType.Jvp) for i in stack)


def qr(A: torch.Tensor, mode: str = "reduced") -> tuple[torch.Tensor, torch.Tensor]:
    """QR decomposition A = Q R of every matrix of a batch, as ``torch.linalg.qr``: same shapes, strides (column-major
    inside each matrix) and signs (LAPACK's: R's diagonal may be negative).

    Args:
        A: tensor of shape ``(*, m, n)``, any strides; never modified.
        mode: ``"reduced"`` (Q ``(*, m, k)``, R ``(*, k, n)``, k = min(m, n)), ``"complete"`` (Q ``(*, m, m)``,
            R ``(*, m, n)``) or ``"r"`` (R only; Q is an empty tensor).

    R is the upper triangle of qr2.geqrf's H, bit for bit. Q is qr2.orgqr of H and tau.
    Where a derivative may be asked for (A requires grad under grad mode, forward-mode AD, torch.func's grad, vjp,
    jacrev, jvp or jacfwd) the call is ``torch.linalg.qr`` itself, which has the derivatives qr2.geqrf lacks;
    ``torch.vmap`` alone runs qr2.
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
    if _needs_derivatives(A):
        return torch.linalg.qr(A, mode=mode)
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
