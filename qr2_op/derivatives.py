"""Derivatives of qr2's operators (real dtypes): which ones a call may need, and their formulas in batched torch
operations (products and triangular solves), so that differentiating a call keeps qr2's decomposition and applies no
reflector one at a time.

QR (A = Q R; Q m x k with orthonormal columns, R k x n upper triangular, k = min(m, n)): for the leading k columns
X = Q R1, C = Q^T dX R1^-1 is the skew Q^T dQ plus the upper triangular dR1 R1^-1, so C's strict lower triangle fixes
the skew part W = tril(C, -1) - tril(C, -1)^T, and U = C - W gives dR1 = U R1, dQ = dX R1^-1 - Q U. The trailing
columns Y = Q R2 (m < n, Q square) add dR2 = Q^T dY - W R2.

Reflectors (Q = H_0 ... H_{k-1} = I - V T V^T, H_j = I - tau_j v_j v_j^T, V unit lower trapezoidal): with
S = striu(V^T V) and D = diag(tau), LAPACK's T (larft) is the solution of T (I + S D) = D. I + S D is unit upper
triangular, so T, dT = ((I - T S) dD - T dS D) (I + S D)^-1 and their adjoints need no division by tau: a tau of zero
(H_j = I) needs no care. orgqr is Q's first n columns; ormqr is Q or Q^T applied to C, so every product with Q's
derivative is taken through V^T C and never forms an m x m matrix.
"""
import contextlib

import torch
import torch.autograd.forward_ad as _forward_ad
import torch.nn.functional as F
from torch._C._functorch import TransformType

REVERSE, FORWARD = 1, 2


def wanted(*tensors) -> int:
    """Which derivatives a call may be asked for: REVERSE where an argument requires grad under grad mode or
    torch.func's grad, vjp or jacrev is active; FORWARD where a forward-AD level is open or torch.func's jvp or jacfwd
    is active (0: none; vmap alone asks for none)."""
    modes = REVERSE if torch.is_grad_enabled() and any(_unbatched(t).requires_grad for t in tensors) else 0
    if _forward_ad._current_level >= 0:
        modes |= FORWARD
    if torch._C._are_functorch_transforms_active():
        if torch.compiler.is_compiling():  # torch.compile cannot trace the interpreter stack (see compiled_transform)
            return modes | REVERSE
        for i in torch._C._functorch.get_interpreter_stack() or []:
            modes |= {TransformType.Grad: REVERSE, TransformType.Jvp: FORWARD}.get(i.key(), 0)
    return modes


def _unbatched(t: torch.Tensor) -> torch.Tensor:
    """t without vmap's wrappers: inside torch.vmap a sample does not report that the batch requires grad."""
    while torch._C._functorch.is_batchedtensor(t):
        t = torch._C._functorch.get_unwrapped(t)
    return t


def compiled_transform() -> bool:
    """Whether torch.compile is tracing inside a torch.func transform. There qr2's Functions are not used: traced
    that way, orgqr's and ormqr's gave wrong gradients where an argument was a view (torch 2.11), and torch's own
    operators' derivatives were right."""
    return torch._C._are_functorch_transforms_active() and torch.compiler.is_compiling()


def nested_forward() -> bool:
    """Forward mode inside forward mode (jacfwd of jacfwd): there torch does not differentiate an autograd.Function's
    jvp at the outer level, so second-order terms would silently be zero. (torch.autograd.forward_ad has one level;
    torch.func's jvp levels are on the interpreter stack.)"""
    if not torch._C._are_functorch_transforms_active() or torch.compiler.is_compiling():
        return False
    return sum(i.key() == TransformType.Jvp for i in torch._C._functorch.get_interpreter_stack() or []) >= 2


def autocast_off(x: torch.Tensor):
    """A context in which torch.autocast leaves the derivatives' products in the arguments' precision (float32 or
    float64), as torch's own autocast kernels run below their cast."""
    device = x.device.type
    return torch.autocast(device, enabled=False) if device in ("cpu", "cuda") else contextlib.nullcontext()


def column_major(x: torch.Tensor) -> torch.Tensor:
    """x laid out as qr2's (and LAPACK's) outputs are: forward AD wants a tangent laid out as its primal."""
    return x.mT.contiguous().mT


# No slice where none is needed: legacy vmap (gradcheck's batched checks) has no rule for the alias a full slice is.
def _leading(x: torch.Tensor, k: int) -> torch.Tensor:
    return x if x.shape[-1] == k else x[..., :k]


def _trailing(x: torch.Tensor, k: int) -> torch.Tensor:
    return x if k == 0 else x[..., k:]


def _top(x: torch.Tensor, n: int) -> torch.Tensor:
    return x if x.shape[-2] == n else x[..., :n, :]


# ---- QR ----

def qr_jvp(Q, R, dA):
    k = Q.shape[-1]
    R1 = _leading(R, k)
    X = torch.linalg.solve_triangular(R1, _leading(dA, k), upper=True, left=False)  # dX R1^-1
    C = Q.mT @ X
    L = torch.tril(C, -1)
    W = L - L.mT
    U = C - W
    dQ, dR = X - Q @ U, U @ R1
    if R.shape[-1] > k:
        dR = torch.cat([dR, Q.mT @ _trailing(dA, k) - W @ _trailing(R, k)], dim=-1)
    return column_major(dQ), column_major(dR)


def qr_vjp(Q, R, gQ, gR):
    """The adjoint of qr_jvp: gX = (gQ + Q mirror(gR1 R1^T - Q^T gQ)) R1^-T, where mirror reflects the upper triangle
    into the lower one, and gY = Q gR2 where m < n. gQ or gR may be None (no cotangent)."""
    k, n = Q.shape[-1], R.shape[-1]
    R1 = _leading(R, k)
    if n > k:  # dR2's -W R2 pairs gR2 with W as a cotangent Q R2 gR2^T of Q would (only W's skew part counts)
        if gR is None:
            gY = Q.new_zeros((*Q.shape[:-1], n - k))
        else:
            gR2 = _trailing(gR, k)
            gY = Q @ gR2
            through_w = Q @ (_trailing(R, k) @ gR2.mT)
            gQ = through_w if gQ is None else gQ + through_w
    M = torch.zeros_like(R1) if gR is None else _leading(gR, k) @ R1.mT
    if gQ is not None:
        M = M - Q.mT @ gQ
    B = Q @ (torch.triu(M) + torch.triu(M, 1).mT)
    if gQ is not None:
        B = B + gQ
    gX = torch.linalg.solve_triangular(R1.mT, B, upper=False, left=False)  # B R1^-T
    return gX if n == k else torch.cat([gX, gY], dim=-1)


# ---- Reflectors ----

class CompactWY:
    """Q = I - V T V^T for the first k = tau.shape[-1] reflectors stored in A, with what the derivatives reuse."""

    def __init__(self, A: torch.Tensor, tau: torch.Tensor):
        m, k = A.shape[-2], tau.shape[-1]
        self.k, self.tau = k, tau
        self.V = torch.tril(_leading(A, k), -1) + torch.eye(m, k, dtype=A.dtype, device=A.device)
        self.S = torch.triu(self.V.mT @ self.V, 1)
        self.eye = torch.eye(k, dtype=A.dtype, device=A.device)
        self.I_SD = self.eye + self.S * tau.unsqueeze(-2)  # I + S D: S's columns scaled by tau
        self.T = self._right_solve(torch.diag_embed(tau))

    def _right_solve(self, B):
        """B (I + S D)^-1."""
        return torch.linalg.solve_triangular(self.I_SD, B, upper=True, left=False, unitriangular=True)

    def tangent(self, dA, dtau):
        """dV and dT for tangents dA, dtau of the stored reflectors (either may be None: zero)."""
        V, T, tau = self.V, self.T, self.tau
        dV = torch.zeros_like(V) if dA is None else torch.tril(_leading(dA, self.k), -1)
        dS = torch.triu(dV.mT @ V + V.mT @ dV, 1)
        B = -(T @ dS) * tau.unsqueeze(-2)  # -T dS D
        if dtau is not None:
            B = B + (self.eye - T @ self.S) * dtau.unsqueeze(-2)  # (I - T S) dD
        return dV, self._right_solve(B)

    def times_q_tangent(self, dV, dT, VtC, dVtC, transpose):
        """dQ C (dQ^T C where transpose) from V^T C and dV^T C."""
        V, T = self.V, self.T
        if not transpose:
            return -(dV @ (T @ VtC) + V @ (dT @ VtC + T @ dVtC))
        return -(V @ (T.mT @ dVtC + dT.mT @ VtC) + dV @ (T.mT @ VtC))

    def cotangents(self, P, RtV, r_times, n):
        """(gA, gtau) of <P R^T, Q> (A with n columns), given P, R^T V and Y -> R Y."""
        V, T, tau = self.V, self.T, self.tau
        PtV = P.mT @ V
        gV = -(P @ (RtV @ T.mT) + r_times(PtV @ T))  # through V T V^T's outer factors
        gT = torch.triu(-(PtV.mT @ RtV))  # through T (upper triangular)
        Z = torch.linalg.solve_triangular(self.I_SD.mT, gT, upper=False, left=False, unitriangular=True)
        gtau = ((self.eye - T @ self.S) * Z).sum(-2)
        Y = torch.triu(-(T.mT @ Z) * tau.unsqueeze(-2), 1)  # through S = striu(V^T V)
        gV = gV + V @ (Y + Y.mT)
        return F.pad(torch.tril(gV, -1), (0, n - self.k)), gtau


def orgqr_jvp(A, tau, dA, dtau):
    """The tangent of Q's first n columns."""
    wy = CompactWY(A, tau)
    n = A.shape[-1]
    dV, dT = wy.tangent(dA, dtau)
    return column_major(wy.times_q_tangent(dV, dT, _top(wy.V, n).mT, _top(dV, n).mT, False))


def orgqr_vjp(A, tau, gQ):
    m, n = A.shape[-2:]
    wy = CompactWY(A, tau)
    return wy.cotangents(gQ, _top(wy.V, n), lambda Y: F.pad(Y, (0, 0, 0, m - n)), n)


def ormqr_jvp(A, tau, C, dA, dtau, dC, left, transpose, ormqr):
    """The tangent of Q C, Q^T C, C Q or C Q^T; ormqr is qr2_op.ormqr (applies Q, differentiable itself)."""
    out = None if dC is None else ormqr(A, tau, dC, left, transpose)
    if dA is not None or dtau is not None:  # through Q
        wy = CompactWY(A, tau)
        Cl = C if left else C.mT  # C Q~ = (Q~^T C^T)^T
        dV, dT = wy.tangent(dA, dtau)
        through_q = wy.times_q_tangent(dV, dT, wy.V.mT @ Cl, dV.mT @ Cl, transpose == left)
        through_q = through_q if left else through_q.mT
        out = through_q if out is None else out + through_q
    return column_major(out if out is not None else torch.zeros_like(C))


def ormqr_vjp(A, tau, C, g, left, transpose, ormqr, needs_reflectors=True, needs_c=True):
    """(gA, gtau, gC) of Q~ C (left) or C Q~ (right), Q~ = Q or Q^T; gA and gtau are None unless needs_reflectors, gC
    unless needs_c. ormqr is qr2_op.ormqr (differentiable itself, for higher derivatives)."""
    gC = ormqr(A, tau, g, left, not transpose) if needs_c else None
    if not needs_reflectors:
        return None, None, gC
    Cl, gl = (C, g) if left else (C.mT, g.mT)  # as Q~^T C^T with cotangent g^T
    if transpose == left:  # Q^T applied from the left: <g, Q^T C> = <C g^T, Q>
        P, R = Cl, gl
    else:  # <g, Q C> = <g C^T, Q>
        P, R = gl, Cl
    wy = CompactWY(A, tau)
    gA, gtau = wy.cotangents(P, R.mT @ wy.V, lambda Y: R @ Y, A.shape[-1])
    return gA, gtau, gC
