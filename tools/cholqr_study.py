"""Guarded CholeskyQR2 panels with Householder reconstruction, on every QR2 profile (development aid, CPU)

Blocked QR in PyTorch on the CPU, FP32 throughout, 32-column panels. Each panel P of each matrix:
  1. columns scaled to unit norm (D), G = Ps^T Ps, R1 = chol(G), Q1 = Ps R1^-1, and once more (CholeskyQR2):
     R2 = chol(Q1^T Q1), Q = Q1 R2^-1, R = R2 R1 D^-1;
  2. Householder reconstruction (LAPACK sorhr_col): the unpivoted LU of E - Q S, with the signs S picked as the
     elimination goes (pivots 1 + |q_ii|), gives V (unit lower trapezoidal), T = U' V1^-T, tau = diag(T) and the
     Householder R = S R: the (H, tau) geqrf would store, plus the V and T the update needs;
  3. the guard: a zero column, a column whose tail is already exactly zero (LAPACK's tau = 0, which the
     reconstruction cannot give), a Cholesky breakdown, a diagonal of R1 spanning more than a factor `--ratio`, or a
     first pass further than 0.5 from orthogonal (||Q1^T Q1 - I||_F; CholeskyQR2 needs cond(Ps) below about
     eps^-1/2) sends that matrix's panel to Householder (LAPACK) instead.
The trailing update is C -= V (T^T (V^T C)) in FP32. Reports, per profile, the panels that fell back and QR2's
scaled residuals, against the margin of the large-matrix work (factor <= 10, orthogonality <= 50).

    python tools/cholqr_study.py [--n 2048,4096] [--conds 0,4,8] [--batch 1] [--ratio 1e-3] [--out FILE]
"""
import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from precision_study import larft, residuals  # noqa: E402
from reference import CASE_NAMES, generate_input  # noqa: E402


def cholesky_qr2(P, ratio, drift=0.5):
    """(Q, R, ok) for panels P (batch, m, w) in FP32; ok[b] false where the guard rejects matrix b's panel."""
    norms = P.double().norm(dim=-2)  # FP64 norms: no overflow or underflow for any FP32 column
    ok = (norms > 0).all(-1) & torch.isfinite(norms).all(-1)
    # a column whose tail is already exactly zero keeps LAPACK's tau = 0 only through a Householder panel: the
    # reconstruction always reflects (tau = 2 there)
    tails = torch.tril(P, -1).abs().amax(-2)
    ok &= (tails > 0).all(-1)
    d = torch.where(norms > 0, norms, torch.ones_like(norms)).float()
    Ps = P / d[:, None, :]
    R1, info = torch.linalg.cholesky_ex(Ps.mT @ Ps, upper=True)
    diag = R1.diagonal(dim1=-2, dim2=-1).abs()
    ok &= (info == 0) & (diag.amin(-1) > ratio * diag.amax(-1))
    R1 = torch.where(ok[:, None, None], R1, torch.eye(P.shape[-1]).expand_as(R1))
    Q1 = torch.linalg.solve_triangular(R1, Ps, upper=True, left=False)
    G2 = Q1.mT @ Q1
    R2, info2 = torch.linalg.cholesky_ex(G2, upper=True)
    # the second pass restores orthogonality only from a first pass within `drift` of it (||Q1^T Q1 - I||_F): the
    # diagonal ratio alone let an ill-conditioned triangular panel through with ||Q^T Q - I|| = 0.57
    ok &= (info2 == 0) & ((G2 - torch.eye(P.shape[-1])).norm(dim=(-2, -1)) < drift)
    R2 = torch.where(ok[:, None, None], R2, torch.eye(P.shape[-1]).expand_as(R2))
    Q = torch.linalg.solve_triangular(R2, Q1, upper=True, left=False)
    R = (R2 @ R1) * d[:, None, :]
    return Q, R, ok


def reconstruct(Q):
    """Householder vectors from orthonormal columns (LAPACK sorhr_col): V, T, tau and the signs S."""
    batch, m, w = Q.shape
    A = Q.clone()
    s = torch.empty(batch, w)
    for i in range(w):  # unpivoted LU of E - Q S, the signs picked so that every pivot is 1 + |q_ii|
        qii = A[:, i, i]
        s[:, i] = torch.where(qii >= 0, -1.0, 1.0)
        A[:, i, i] = qii - s[:, i]  # (E - Q S) scaled by -s: pivot -s_i (1 - q_ii s_i) = q_ii - s_i
        A[:, i + 1:, i] /= A[:, i, i, None]
        A[:, i + 1:, i + 1:] -= A[:, i + 1:, i, None] * A[:, i, None, i + 1:]
    # A = L U with L unit lower trapezoidal (V) and U upper: Q - S_E = V U, so E - Q S = V (-U S)
    V = torch.tril(A, -1) + torch.eye(m, w)
    U = torch.triu(A[:, :w, :])
    Up = -U * s[:, None, :]  # -U S (S on the right: columns)
    T = torch.linalg.solve_triangular(V[:, :w, :].mT, Up, upper=True, left=False)  # T V1^T = U'
    return V, T, T.diagonal(dim1=-2, dim2=-1).clone(), s


def blocked_qr(A, ratio, nb=32):
    H = A.clone()
    batch, m, n = H.shape
    kmin = min(m, n)
    tau = torch.zeros(batch, kmin)
    fallbacks = 0
    for k in range(0, kmin, nb):
        w = min(nb, kmin - k)
        P = H[:, k:, k:k + w]
        Q, R, ok = cholesky_qr2(P, ratio)
        V, T, t, s = reconstruct(Q)
        Rh = s[:, :, None] * R  # the Householder R: rows signed as geqrf's
        panel = torch.tril(V, -1)
        panel[:, :w, :] += torch.triu(Rh)
        if not bool(ok.all()):  # the guard's rejects: Householder panels
            bad = (~ok).nonzero().flatten()
            fallbacks += len(bad)
            Hg, tg = torch.geqrf(P[bad])
            panel[bad] = Hg
            t[bad] = tg
            Vg = torch.tril(Hg, -1) + torch.eye(m - k, w)
            V[bad] = Vg
            T[bad] = larft(Vg, tg)
        H[:, k:, k:k + w] = panel
        tau[:, k:k + w] = t
        if k + w < n:
            C = H[:, k:, k + w:]
            H[:, k:, k + w:] = C - V @ (T.mT @ (V.mT @ C))
    return H, tau, fallbacks


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", default="2048,4096")
    ap.add_argument("--conds", default="0,4,8")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--ratio", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--out")
    args = ap.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    lines = [f"# {' '.join(sys.argv)} ({time.strftime('%Y-%m-%d')}, CPU, torch {torch.__version__})",
             f"{'n':>5} {'profile':>14} {'cond':>4} {'panels':>7} {'fell back':>9} {'factor':>9} {'orth':>8}  gates"]
    print("\n".join(lines), flush=True)
    worst = {}
    for n in map(int, args.n.split(",")):
        for case in CASE_NAMES:
            for cond in map(int, args.conds.split(",")):
                A = generate_input(batch=args.batch, n=n, cond=cond, seed=args.seed + cond, case=case, device="cpu")
                H, tau, fell = blocked_qr(A, args.ratio)
                ok, f, o, _ = residuals(A, (H, tau))
                panels = args.batch * ((n + 31) // 32)
                line = (f"{n:5d} {case:>14} {cond:4d} {panels:7d} {fell:9d} {f:9.3g} {o:8.3g}  "
                        f"{'pass' if ok else 'FAIL'}")
                print(line, flush=True)
                lines.append(line)
                wf, wo = worst.get(n, (0.0, 0.0))
                worst[n] = (max(wf, f), max(wo, o))
    lines.append("")
    for n, (f, o) in worst.items():
        verdict = "within" if f <= 10 and o <= 50 else "OUTSIDE"
        lines.append(f"n={n}: worst scaled factor {f:.3g}, orthogonality {o:.3g}: {verdict} the margin (10 / 50)")
    print("\n".join(lines[-len(worst):]))
    if args.out:
        with open(args.out, "w") as fh:
            fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
