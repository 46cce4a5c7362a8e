"""Per-shape timing of qr2.orgqr, qr2.ormqr and qr2_op.qr (alone, and with its backward: qr_grad) against torch's
operators on the GPU (development aid).

Reflectors from torch.geqrf of a normal batch; each call timed alone (CUDA events, median over repeats, inputs
rotated against the L2). torch's operators loop cuSOLVER over the batch and take long: --torch-reps caps them.
"""
import argparse

import torch

from timing import parse_shapes, per_call_us  # also puts the repository root on sys.path

import qr2_op

SHAPES = [(640, 512, 512), (60, 1024, 1024), (8, 2048, 2048), (40, 352, 352), (2, 4096, 4096)]


def _gradient(qr, x):
    """A's gradient of <gQ, Q> + <gR, R>: the decomposition and its backward."""
    A = x[0].detach().requires_grad_()
    return torch.autograd.grad(qr(A), A, x[4])[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--torch-reps", type=int, default=1)
    ap.add_argument("--shapes", default=None, help="batch:n or batch:m:n, comma-separated")
    ap.add_argument("--ops", default="orgqr,ormqr,qr,qr_grad")
    ap.add_argument("--no-torch", action="store_true")
    args = ap.parse_args()
    ops = args.ops.split(",")
    print(f"{'op':>6} {'shape':>18} {'qr2 us':>12} {'torch us':>12} {'speedup':>8}")
    for batch, m, n in parse_shapes(args.shapes, SHAPES):
        inputs = []
        for _ in range(2):
            A = torch.randn(batch, m, n, device="cuda")
            H, tau = torch.geqrf(A)
            k = min(m, n)
            cotangents = (torch.randn(batch, m, k, device="cuda"), torch.randn(batch, k, n, device="cuda"))
            inputs.append((A, H, tau, torch.randn(batch, m, 64, device="cuda"), cotangents))
        calls = {
            "orgqr": (lambda x: qr2_op.orgqr(x[1], x[2]), lambda x: torch.linalg.householder_product(x[1], x[2])),
            "ormqr": (lambda x: qr2_op.ormqr(x[1], x[2], x[3], True, True),
                      lambda x: torch.ormqr(x[1], x[2], x[3], True, True)),
            "qr": (lambda x: qr2_op.qr(x[0]), lambda x: torch.linalg.qr(x[0])),
            "qr_grad": (lambda x: _gradient(qr2_op.qr, x), lambda x: _gradient(torch.linalg.qr, x)),
        }
        for op in ops:
            ours_fn, theirs_fn = calls[op]
            ours = per_call_us(ours_fn, inputs, calls=1, bursts=args.reps, warmup=1)
            theirs = float("nan") if args.no_torch else per_call_us(theirs_fn, inputs, calls=1,
                                                                    bursts=args.torch_reps, warmup=0)
            print(f"{op:>6} {batch:>5}x{m:>5}x{n:<6} {ours:12.1f} {theirs:12.1f} {theirs / ours:8.2f}", flush=True)


if __name__ == "__main__":
    main()
