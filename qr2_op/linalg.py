"""qr2_op.qr: Q and R of a batch of matrices, a drop-in for ``torch.linalg.qr`` built on qr2.geqrf.

R comes from qr2.geqrf's H (its upper triangle); Q is formed from H and tau by qr2.orgqr (qr2's blocked update on
float32 CUDA tensors).
"""
import torch

from . import _autocast_float32, _is_dtensor, derivatives

__all__ = ["qr"]

_MODES = ("reduced", "complete", "r")


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
    ``torch.linalg.qr``, which raises or derives as it does. Inside ``torch.autocast``, float16 and bfloat16 input
    is decomposed in float32.
    """
    if not isinstance(A, torch.Tensor):
        raise TypeError(f"qr2.qr: expected a Tensor, got {type(A).__name__}")
    if mode not in _MODES:
        raise RuntimeError(f"qr2.qr: expected mode 'reduced', 'complete' or 'r', got {mode!r}")
    if A.dim() < 2:
        raise RuntimeError(f"qr2.qr: expected a tensor of shape (*, m, n) with at least 2 dimensions, got {A.dim()} "
                           "dimension(s)")
    A = _autocast_float32(A)
    if _is_dtensor(A):
        from .distributed import qr_where_it_lies

        return qr_where_it_lies(A, mode)
    wanted = derivatives.wanted(A)
    if wanted:
        m, n = A.shape[-2:]
        if (A.is_complex() or mode == "r" or (mode == "complete" and m > n) or derivatives.nested_forward()
                or derivatives.compiled_transform()):
            return torch.linalg.qr(A, mode=mode)
        # torch.compile traces no Function that has a jvp, so forward mode has a class of its own
        return (_QRForwardMode if wanted & derivatives.FORWARD else _QR).apply(A, mode)
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
        with derivatives.autocast_off(Q):
            return derivatives.qr_vjp(Q, R, gQ, gR), None


class _QRForwardMode(_QR):
    """_QR with the forward-mode derivative too."""

    @staticmethod
    def jvp(ctx, dA, _mode):
        Q, R = ctx.saved_tensors
        with derivatives.autocast_off(Q):
            return derivatives.qr_jvp(Q, R, dA)
