"""Which arithmetic can the blocked route's trailing update use and keep QR2's margin? (development aid, CPU)

Blocked Householder QR in PyTorch on the CPU: 32-column panels factored by LAPACK in FP32, the trailing update
C -= V (T^T (V^T C)) with its three products in an emulated arithmetic, then QR2's checker in FP64. Tensor-core
products are emulated by rounding the operands (to TF32: 10 explicit mantissa bits; to BF16: 7) and multiplying in
FP32, where the product of two such operands is exact and only the sums round, as on the tensor cores:
  fp32       every product in FP32 (today's route)
  tf32       operands rounded to TF32 once
  3xtf32     a = hi + lo (both TF32): hi.hi + hi.lo + lo.hi
  bf16x3     a = a0 + a1 + a2 (BF16): the six products of order <= 2
  fp16x3     rows of the left operand and columns of the right one scaled by powers of two to a largest entry in
             [2^14, 2^15), then a = hi + lo (both FP16, subnormals kept): hi.hi + hi.lo + lo.hi (FP16 tensor cores
             run twice TF32's rate)
  fp16x3_bound  fp16x3 with scales known before the update reads C: V's entries at a fixed 2^14 (|v| <= 1), C's columns
             by the bound every entry of a trailing column obeys, the 2-norm of the input's column (orthogonal
             updates keep the column's norm), with a 2^-10 margin; W's columns measured (W stays in one block)
  tf32_vw    only the largest product, V W, in TF32; the other two in FP32

    python tools/precision_study.py [--n 512,1024] [--conds 0,4,8] [--batch 2] [--modes ...] [--out FILE]

Reports the worst scaled factor and orthogonality residual over every QR2 profile, against the margin the
large-matrix work must keep (factor <= 10, orthogonality <= 50: half of QR2's gates).
"""
import argparse
import os
import re
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from reference import CASE_NAMES, check_implementation, generate_input  # noqa: E402


def round_mantissa(x, bits):
    """x (FP32) rounded to nearest, ties to even, keeping `bits` explicit mantissa bits (TF32: 10, BF16: 7)."""
    drop = 23 - bits
    i = x.contiguous().view(torch.int32)
    half = 1 << (drop - 1)
    lsb = (i >> drop) & 1
    r = ((i + half - 1 + lsb) >> drop) << drop
    return r.view(torch.float32)


def split(x, bits, terms):
    parts, rest = [], x
    for _ in range(terms):
        p = round_mantissa(rest, bits)
        parts.append(p)
        rest = rest - p
    return parts


def pow2_scale(amax):
    """The power of two that takes amax into [2^14, 2^15) (1 where amax is zero)."""
    e = torch.frexp(torch.where(amax > 0, amax, torch.ones_like(amax))).exponent  # amax in [2^(e-1), 2^e)
    return torch.ldexp(torch.ones_like(amax), (15 - e).to(torch.int32)).to(amax.dtype)


def split_fp16(x):
    """x (FP32) = hi + lo + (what FP16 cannot hold), hi and lo FP16 values (as FP32), rounded to nearest."""
    hi = x.half().float()
    return hi, (x - hi).half().float()


def product(a, b, mode):
    if mode == "fp32":
        return a @ b
    if mode == "tf32":
        return round_mantissa(a, 10) @ round_mantissa(b, 10)
    if mode == "3xtf32":
        ah, al = split(a, 10, 2)
        bh, bl = split(b, 10, 2)
        return (al @ bh + ah @ bl) + ah @ bh
    if mode == "fp16x3":
        sa = pow2_scale(a.abs().amax(-1, keepdim=True))  # per row of a
        sb = pow2_scale(b.abs().amax(-2, keepdim=True))  # per column of b
        ah, al = split_fp16(a * sa)
        bh, bl = split_fp16(b * sb)
        return ((al @ bh + ah @ bl) + ah @ bh) / sa / sb
    if mode == "bf16x3":
        a0, a1, a2 = split(a, 7, 3)
        b0, b1, b2 = split(b, 7, 3)
        return ((a0 @ b2 + a1 @ b1 + a2 @ b0) + (a0 @ b1 + a1 @ b0)) + a0 @ b0
    raise ValueError(mode)


def fp16x3_scaled(a, b, sa, sb):
    """a b in fp16x3 with the given power-of-two scales of a's rows (sa) and b's columns (sb)."""
    ah, al = split_fp16(a * sa)
    bh, bl = split_fp16(b * sb)
    return ((al @ bh + ah @ bl) + ah @ bh) / sa / sb


def larft(V, tau):
    """T (FP32, from FP64) with H_0 ... H_{w-1} = I - V T V^T."""
    V, tau = V.double(), tau.double()
    w = V.shape[-1]
    T = torch.zeros(*V.shape[:-2], w, w, dtype=torch.float64)
    for j in range(w):
        T[..., j, j] = tau[..., j]
        if j:
            T[..., :j, j] = -tau[..., j, None] * (T[..., :j, :j] @ (V[..., :, :j].mT @ V[..., :, j:j + 1]))[..., 0]
    return T.float()


def blocked_qr(A, mode, nb=32):
    """(H, tau) of A (batch, n, n) FP32: LAPACK panels, the update's products in `mode`."""
    H = A.clone()
    batch, m, n = H.shape
    tau = torch.zeros(batch, min(m, n))
    bound = A.double().norm(dim=-2).float() * (1 + 2.0 ** -10)  # (batch, n): |entry| of any trailing column
    for k in range(0, min(m, n), nb):
        w = min(nb, min(m, n) - k)
        Hp, tp = torch.geqrf(H[:, k:, k:k + w])
        H[:, k:, k:k + w] = Hp
        tau[:, k:k + w] = tp
        if k + w >= n:
            continue
        V = torch.tril(Hp, -1) + torch.eye(m - k, w)
        T = larft(V, tp)
        C = H[:, k:, k + w:]
        if mode == "fp16x3_bound":
            W = fp16x3_scaled(V.mT, C, 2.0 ** 14, pow2_scale(bound[:, None, k + w:]))
            W = product(T.mT.contiguous(), W, "fp16x3")
            H[:, k:, k + w:] = C - fp16x3_scaled(V, W, 2.0 ** 14, pow2_scale(W.abs().amax(-2, keepdim=True)))
            continue
        first, last = ("fp32", "tf32") if mode == "tf32_vw" else (mode, mode)
        W = product(V.mT.contiguous(), C.contiguous(), first)
        W = product(T.mT.contiguous(), W, first)
        H[:, k:, k + w:] = C - product(V, W, last)
    return H, tau


def residuals(A, out):
    """QR2's checker verdict, and its two scaled residuals (worst matrix), computed as it computes them, also when a
    gate fails (where the checker stops at the first)."""
    ok, msg = check_implementation(A, out)
    H, tau = out
    n = max(A.shape[-2:])
    eps = 2.0 ** -23
    Q = torch.linalg.householder_product(H, tau).double()
    R = torch.triu(H).double()
    A64 = A.double()
    a1 = A64.abs().sum(-2).amax(-1)
    f = ((R - Q.mT @ A64).abs().sum(-2).amax(-1) / (n * eps * a1)).max().item()
    o = ((Q.mT @ Q - torch.eye(Q.shape[-1], dtype=torch.float64)).abs().sum(-2).amax(-1) / (n * eps)).max().item()
    return ok, f, o, msg


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", default="512,1024")
    ap.add_argument("--conds", default="0,4,8")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--modes", default="fp32,tf32,3xtf32,bf16x3,tf32_vw")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--out")
    args = ap.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    modes = args.modes.split(",")
    lines = [f"# {' '.join(sys.argv)} ({time.strftime('%Y-%m-%d')}, CPU, torch {torch.__version__})",
             f"{'n':>5} {'profile':>14} {'cond':>4} " + " ".join(f"{m:>17}" for m in modes)]
    print(lines[0], flush=True)
    print(lines[1], flush=True)
    worst = {(n, m): (0.0, 0.0) for n in map(int, args.n.split(",")) for m in modes}
    for n in map(int, args.n.split(",")):
        for case in CASE_NAMES:
            for cond in map(int, args.conds.split(",")):
                A = generate_input(batch=args.batch, n=n, cond=cond, seed=args.seed + cond, case=case, device="cpu")
                cells = []
                for mode in modes:
                    ok, f, o, msg = residuals(A, blocked_qr(A, mode))
                    wf, wo = worst[(n, mode)]
                    worst[(n, mode)] = (max(wf, f), max(wo, o))
                    cells.append(f"{f:7.3g}/{o:7.3g}{' ' if ok else '!'}")
                line = f"{n:5d} {case:>14} {cond:4d} " + " ".join(f"{c:>17}" for c in cells)
                print(line, flush=True)
                lines.append(line)
    lines.append("")
    lines.append("! marks a case QR2's checker fails (factor <= 20, orthogonality <= 100)")
    lines.append("worst scaled factor / orthogonality residual per mode (margin: factor <= 10, orthogonality <= 50)")
    for (n, mode), (f, o) in worst.items():
        verdict = "within the margin" if f <= 10 and o <= 50 else "OUTSIDE the margin"
        lines.append(f"  n={n:5d} {mode:>8}: {f:8.3g} / {o:8.3g}  {verdict}")
    print("\n".join(lines[-len(worst) - 1:]))
    if args.out:
        with open(args.out, "w") as fh:
            fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
