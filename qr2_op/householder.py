"""qr2_op.orgqr and qr2_op.ormqr: Q from qr2.geqrf's reflectors, and Q applied to a matrix.

Drop-ins for ``torch.linalg.householder_product`` and ``torch.ormqr``: same arguments, shapes, strides and checks.
float32 CUDA tensors run qr2's blocked compact-WY update (tensor cores at FP32 accuracy) in blocks of 64 reflectors,
one launch sequence for the whole batch; other dtypes and CPU tensors run torch's own operator. Both are
differentiable in every argument (real dtypes: qr2's derivatives, qr2_op/derivatives.py; complex: torch's operator).
"""
import torch

from . import _autocast_float32, _autocast_to_float32, _column_major_strides, _is_dtensor, _lib, derivatives

__all__ = ["orgqr", "ormqr"]

_LAPACK_DTYPES = (torch.float32, torch.float64, torch.complex64, torch.complex128)


def orgqr(A: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
    """The first n columns of ``Q = H_0 H_1 ... H_{k-1}`` for reflectors stored as qr2.geqrf (and LAPACK) leave them,
    as ``torch.linalg.householder_product(A, tau)``.

    Args:
        A: ``(*, m, n)`` with ``m >= n``: ``v_j`` below the diagonal of column j (its unit implied); the rest is not
            read. Any strides; never modified.
        tau: ``(*, k)`` with ``k <= n``, A's batch dimensions, dtype and device.

    Returns:
        Q, ``(*, m, n)``, column-major inside each matrix (torch's strides). Inside ``torch.autocast``, float16 and
        bfloat16 arguments run in float32.
    """
    A, tau = _autocast_float32(A), _autocast_float32(tau)
    if isinstance(A, torch.Tensor) and isinstance(tau, torch.Tensor):
        wanted = derivatives.wanted(A, tau)
        if wanted:
            _check_orgqr(A, tau)  # qr2's messages before torch's autograd or operator sees the call
            if _is_dtensor(A) or _is_dtensor(tau):
                return _where_it_lies("qr2.orgqr", orgqr, (A, tau), A.shape)
            if not A.is_complex() and not derivatives.compiled_transform():  # else torch's derivatives
                _refuse_nested_forward("qr2.orgqr")
                return (_OrgqrForwardMode if wanted & derivatives.FORWARD else _Orgqr).apply(A, tau)
    return torch.ops.qr2.orgqr(A, tau)


def ormqr(A: torch.Tensor, tau: torch.Tensor, C: torch.Tensor, left: bool = True,
          transpose: bool = False) -> torch.Tensor:
    """``Q C``, ``Q^T C`` (left), ``C Q`` or ``C Q^T`` (right) for ``Q = H_0 H_1 ... H_{k-1}`` stored in A and tau, as
    ``torch.ormqr(A, tau, C, left, transpose)``: Q is never formed.

    Args:
        A: ``(*, mn, ka)``, the reflectors as qr2.geqrf leaves them; mn is C's row count (left) or column count
            (right).
        tau: ``(*, min(mn, ka))``.
        C: ``(*, m, n)``, A's batch dimensions, dtype and device; never modified.

    Returns:
        The product, ``(*, m, n)``, column-major inside each matrix (torch's strides). Inside ``torch.autocast``,
        float16 and bfloat16 arguments run in float32.
    """
    A, tau, C = args = tuple(_autocast_float32(t) for t in (A, tau, C))
    if all(isinstance(t, torch.Tensor) for t in args):
        wanted = derivatives.wanted(*args)
        if wanted:
            _check_ormqr(A, tau, C, left)
            if any(_is_dtensor(t) for t in args):
                return _where_it_lies("qr2.ormqr", lambda *t: ormqr(*t, left, transpose), args, C.shape)
            if not A.is_complex() and not derivatives.compiled_transform():  # else torch's derivatives
                _refuse_nested_forward("qr2.ormqr")
                return (_OrmqrForwardMode if wanted & derivatives.FORWARD else _Ormqr).apply(A, tau, C, left, transpose)
    return torch.ops.qr2.ormqr(A, tau, C, left, transpose)


# qr2's operators with qr2's derivatives (torch.compile traces no Function that has a jvp: forward mode has its own
# classes, taken only where forward mode is active)
class _Orgqr(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(A, tau):
        return torch.ops.qr2.orgqr(A, tau)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.set_materialize_grads(False)  # an argument without a tangent stays None: no work for it
        ctx.save_for_backward(*inputs)
        ctx.save_for_forward(*inputs)

    @staticmethod
    def backward(ctx, gQ):
        if gQ is None:
            return None, None
        A, tau = ctx.saved_tensors
        with derivatives.autocast_off(A):
            return derivatives.orgqr_vjp(A, tau, gQ)


class _OrgqrForwardMode(_Orgqr):
    @staticmethod
    def jvp(ctx, dA, dtau):
        A, tau = ctx.saved_tensors
        with derivatives.autocast_off(A):
            return derivatives.orgqr_jvp(A, tau, dA, dtau)


class _Ormqr(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(A, tau, C, left, transpose):
        return torch.ops.qr2.ormqr(A, tau, C, left, transpose)

    @staticmethod
    def setup_context(ctx, inputs, output):
        A, tau, C, ctx.left, ctx.transpose = inputs
        ctx.set_materialize_grads(False)  # an argument without a tangent stays None: no work for it
        ctx.save_for_backward(A, tau, C)
        ctx.save_for_forward(A, tau, C)

    @staticmethod
    def backward(ctx, g):
        if g is None:
            return None, None, None, None, None
        A, tau, C = ctx.saved_tensors
        needs = ctx.needs_input_grad
        with derivatives.autocast_off(A):
            grads = derivatives.ormqr_vjp(A, tau, C, g, ctx.left, ctx.transpose, ormqr, needs[0] or needs[1], needs[2])
        return *grads, None, None


class _OrmqrForwardMode(_Ormqr):
    @staticmethod
    def jvp(ctx, dA, dtau, dC, _left, _transpose):
        A, tau, C = ctx.saved_tensors
        with derivatives.autocast_off(A):
            return derivatives.ormqr_jvp(A, tau, C, dA, dtau, dC, ctx.left, ctx.transpose, ormqr)


def _refuse_nested_forward(name):
    if derivatives.nested_forward():
        raise RuntimeError(f"{name}: forward-mode AD nested in forward-mode AD (jacfwd of jacfwd) is not supported: "
                           "torch would not differentiate the inner derivative; use jacrev for one of the levels "
                           "(as torch.func.hessian does)")


def _where_it_lies(name, op, tensors, out_shape):
    """A call on DTensors that may need a derivative: qr2's derivatives on each rank's local tensors."""
    from .distributed import apply_where_it_lies

    if not all(_is_dtensor(t) for t in tensors):
        raise RuntimeError(f"{name}: expected every tensor argument to be a DTensor where one is, got a torch.Tensor "
                           "too (distribute it, or pass local tensors)")
    return apply_where_it_lies(op, tensors, out_shape)


def _name(dtype):
    return str(dtype).removeprefix("torch.")


def _check(cond, message):
    """Raises RuntimeError(message()) unless cond. The fakes run under the C Autograd kernel's nested call, which
    loses a Python exception's text: the message is noted for that kernel to raise."""
    if not cond:
        text = message()
        _lib.qr2_note_error(text.encode())
        raise RuntimeError(text)


def _check_common(name, tensors):
    A = tensors[0]
    for label, t, dims in zip(("A", "tau", "C"), tensors, (2, 1, 2)):
        shape = "(*, m, n)" if dims == 2 else "(*, k)"
        _check(t.dim() >= dims, lambda: f"{name}: expected {label} of shape {shape} with at least {dims} "
                     f"dimension{'s' if dims > 1 else ''}, got {t.dim()} dimension(s)")
        _check(t.dtype in _LAPACK_DTYPES, lambda: f"{name}: expected a float32, float64, complex64 or "
                     f"complex128 tensor for {label}, got {_name(t.dtype)}")
    for label, t in zip(("tau", "C"), tensors[1:]):
        _check(t.dtype == A.dtype, lambda: f"{name}: expected {label} to have A's dtype ({_name(A.dtype)}), got "
               f"{_name(t.dtype)}")
        _check(t.device == A.device, lambda: f"{name}: expected {label} on A's device, got another device")
    tau = tensors[1]
    _check(tau.dim() == A.dim() - 1, lambda: f"{name}: expected tau to have one dimension less than A, got "
                 f"tau.ndim={tau.dim()} and A.ndim={A.dim()}")
    if len(tensors) == 3:
        C = tensors[2]
        _check(C.dim() == A.dim(), lambda: f"{name}: expected C to have A's number of dimensions, got "
                     f"C.ndim={C.dim()} and A.ndim={A.dim()}")
    for i in range(A.dim() - 2):
        _check(all(t.shape[i] == A.shape[i] for t in tensors[1:]), lambda: f"{name}: expected the batch dimensions "
               f"of tau{' and C' if len(tensors) == 3 else ''} to equal A.shape[:-2], dimension {i} differs")


def _check_orgqr(A, tau):
    _check_common("qr2.orgqr", (A, tau))
    m, n = A.shape[-2:]
    _check(m >= n, lambda: f"qr2.orgqr: expected A of shape (*, m, n) with m >= n, got m={m}, n={n}")
    _check(tau.shape[-1] <= n, lambda: f"qr2.orgqr: expected tau.shape[-1] <= A.shape[-1], got "
                 f"{tau.shape[-1]} > {n}")


def _orgqr_fake(A, tau):
    _check_orgqr(A, tau)
    return A.new_empty_strided(A.shape, _column_major_strides(A.shape))


def _check_ormqr(A, tau, C, left):
    _check_common("qr2.ormqr", (A, tau, C))
    mn, ka = A.shape[-2:]
    order = C.shape[-2] if left else C.shape[-1]
    _check(order == mn, lambda: f"qr2.ormqr: expected C.shape[{-2 if left else -1}] == A.shape[-2] "
                 f"(left={left}), got {order} and {mn}")
    _check(tau.shape[-1] == min(mn, ka), lambda: "qr2.ormqr: expected tau.shape[-1] == "
                 f"min(A.shape[-2], A.shape[-1]) = {min(mn, ka)}, got {tau.shape[-1]}")


def _ormqr_fake(A, tau, C, left=True, transpose=False):
    _check_ormqr(A, tau, C, left)
    return C.new_empty_strided(C.shape, _column_major_strides(C.shape))


for _op, _fake in (("orgqr", _orgqr_fake), ("_orgqr_impl", _orgqr_fake), ("ormqr", _ormqr_fake),
                   ("_ormqr_impl", _ormqr_fake)):
    torch.library.register_fake(f"qr2::{_op}")(_fake)


def _to_front(x, dim, size):
    """x with its vmapped dimension first (expanded when x is not mapped)."""
    return x.movedim(dim, 0) if dim is not None else x.expand(size, *x.shape)


def _orgqr_vmap(info, in_dims, A, tau):
    if all(d is None for d in in_dims):
        return torch.ops.qr2.orgqr(A, tau), None
    A, tau = (_to_front(x, d, info.batch_size) for x, d in zip((A, tau), in_dims))
    return torch.ops.qr2.orgqr(A, tau), 0


def _ormqr_vmap(info, in_dims, A, tau, C, left=True, transpose=False):
    if all(d is None for d in in_dims[:3]):
        return torch.ops.qr2.ormqr(A, tau, C, left, transpose), None
    A, tau, C = (_to_front(x, d, info.batch_size) for x, d in zip((A, tau, C), in_dims))
    return torch.ops.qr2.ormqr(A, tau, C, left, transpose), 0


# torch.vmap: the mapped dimension becomes the outermost batch dimension, so one call serves every sample.
for _op in ("orgqr", "_orgqr_impl"):
    torch.library.register_vmap(f"qr2::{_op}", _orgqr_vmap)
for _op in ("ormqr", "_ormqr_impl"):
    torch.library.register_vmap(f"qr2::{_op}", _ormqr_vmap)
_autocast_to_float32(("orgqr", "_orgqr_impl", "ormqr", "_ormqr_impl"))
