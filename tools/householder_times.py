"""Per-shape timing of qr2.orgqr, qr2.ormqr and qr2_op.qr, alone and with their backward (orgqr_grad, ormqr_grad,
qr_grad: the call and every argument's gradient), against torch's operators on the GPU (development aid).

Reflectors from torch.geqrf of a normal batch; each call timed alone (CUDA events, median over repeats, inputs
rotated against the L2). torch's operators loop cuSOLVER over the batch and take long: --torch-reps caps them.
"""
import argparse

import torch

from timing import parse_shapes, per_call_us  # also puts the repository root on sys.path

import qr2_op

SHAPES = [(640, 512, 512), (60, 1024, 1024), (8, 2048, 2048), (40, 352, 352), (2, 4096, 4096)]


def _gradient(op, args, cotangents):
    """op(*args) and the gradients of <cotangents, op(*args)> with respect to every argument."""
    args = [a.detach().requires_grad_() for a in args]
    return torch.autograd.grad(op(*args), args, cotangents)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--torch-reps", type=int, default=1)
    ap.add_argument("--shapes", default=None, help="batch:n or batch:m:n, comma-separated")
    ap.add_argument("--ops", default="orgqr,ormqr,qr", help="also orgqr_grad, ormqr_grad, qr_grad")
    ap.add_argument("--no-torch", action="store_true")
    args = ap.parse_args()
    ops = args.ops.split(",")
    print(f"{'op':>10} {'shape':>18} {'qr2 us':>12} {'torch us':>12} {'speedup':>8}")
    for batch, m, n in parse_shapes(args.shapes, SHAPES):
        inputs = []
        for _ in range(2):
            A = torch.randn(batch, m, n, device="cuda")
            H, tau = torch.geqrf(A)
            k = min(m, n)
            qr_cotangents = (torch.randn(batch, m, k, device="cuda"), torch.randn(batch, k, n, device="cuda"))
            inputs.append((A, H, tau, torch.randn(batch, m, 64, device="cuda"), qr_cotangents,
                           torch.randn(batch, m, n, device="cuda"), torch.randn(batch, m, 64, device="cuda")))
        calls = {
            "orgqr": (lambda x: qr2_op.orgqr(x[1], x[2]), lambda x: torch.linalg.householder_product(x[1], x[2])),
            "ormqr": (lambda x: qr2_op.ormqr(x[1], x[2], x[3], True, True),
                      lambda x: torch.ormqr(x[1], x[2], x[3], True, True)),
            "qr": (lambda x: qr2_op.qr(x[0]), lambda x: torch.linalg.qr(x[0])),
            "orgqr_grad": (lambda x: _gradient(qr2_op.orgqr, x[1:3], x[5]),
                           lambda x: _gradient(torch.linalg.householder_product, x[1:3], x[5])),
            "ormqr_grad": (lambda x: _gradient(lambda *a: qr2_op.ormqr(*a, True, True), x[1:4], x[6]),
                           lambda x: _gradient(lambda *a: torch.ormqr(*a, True, True), x[1:4], x[6])),
            "qr_grad": (lambda x: _gradient(qr2_op.qr, x[:1], x[4]), lambda x: _gradient(torch.linalg.qr, x[:1], x[4])),
        }
        for op in ops:
            ours_fn, theirs_fn = calls[op]
            ours = per_call_us(ours_fn, inputs, calls=1, bursts=args.reps, warmup=1)
            theirs = float("nan") if args.no_torch else per_call_us(theirs_fn, inputs, calls=1,
                                                                    bursts=args.torch_reps, warmup=0)
            print(f"{op:>10} {batch:>5}x{m:>5}x{n:<6} {ours:12.1f} {theirs:12.1f} {theirs / ours:8.2f}", flush=True)


if __name__ == "__main__":
    main()
