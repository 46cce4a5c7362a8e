"""Per-kernel GPU time of one qr2 call per shape (torch.profiler / CUPTI): where the time goes.

    python tools/profile_routes.py [--shapes 20:32,40:176:100] [--route registers] [--top 8] [--op orgqr]
"""
import argparse

import torch

from timing import kernel_times, parse_shapes  # also puts the repository root on sys.path

import qr2_op

SHAPES = [(20, 32), (40, 176), (40, 352), (640, 512), (60, 1024), (8, 2048), (2, 4096)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default=None, help="batch:n or batch:m:n, comma-separated")
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("--route", default=None, help="force this route where it can run")
    ap.add_argument("--op", default="geqrf", choices=("geqrf", "orgqr", "ormqr"),
                    help="orgqr, ormqr: of the reflectors of A (ormqr: Q^T C, C of 64 columns)")
    args = ap.parse_args()
    qr2_op._force_config(args.route)
    for batch, m, n in parse_shapes(args.shapes, SHAPES):
        A = torch.randn(batch, m, n, device="cuda")
        if args.op == "geqrf":
            per = kernel_times(lambda: torch.ops.qr2.geqrf(A))
        else:
            H, tau = torch.geqrf(A)
            C = torch.randn(batch, m, 64, device="cuda")
            per = kernel_times(lambda: torch.ops.qr2.orgqr(H, tau) if args.op == "orgqr"
                               else torch.ops.qr2.ormqr(H, tau, C, True, True))
        total = sum(t for _, t in per.values())
        print(f"\n== {args.op} {batch}x{m}x{n} route={args.route or qr2_op.config_for(m, n, batch)} "
              f"kernels={sum(c for c, _ in per.values())} kernel_time={total:.0f} us (summed over streams; a batch "
              f"in two halves overlaps two)")
        for name, (count, t) in sorted(per.items(), key=lambda kv: -kv[1][1])[: args.top]:
            print(f"  {t:10.0f} us {100 * t / total:5.1f}%  x{count:<5d} {t / count:8.1f} us/launch  {name}")


if __name__ == "__main__":
    main()
