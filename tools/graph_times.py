"""Kernel time per call with the host path removed: CUDA-graph replay of back-to-back calls, the best of 30 replays
(development aid).

    python tools/graph_times.py --shapes 20:32:32,40:176:176 [--route registers]
"""
import argparse

import torch

from timing import graph_us, parse_shapes  # also puts the repository root on sys.path

import qr2_op


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", required=True, help="batch:m:n (or batch:n), comma-separated")
    ap.add_argument("--route", default=None)
    ap.add_argument("--tag", default="")
    args = ap.parse_args()
    qr2_op._force_config(args.route)
    op = torch.ops.qr2.geqrf.default
    for b, m, n in parse_shapes(args.shapes):
        A = torch.randn(b, m, n, device="cuda")
        route = args.route or qr2_op.config_for(m, n, b)
        us = graph_us(lambda: op(A), calls=20, bursts=30, reduce=min)
        print(f"{args.tag:>10} {b:5d}x{m:4d}x{n:<4d} {route:>28} {us:10.2f} us", flush=True)


if __name__ == "__main__":
    main()
