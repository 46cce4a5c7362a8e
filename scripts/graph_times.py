"""Kernel time per call with the host path removed: CUDA-graph replay of back-to-back calls (development aid).

    python scripts/graph_times.py --shapes 20:32:32,40:176:176 [--route registers]
"""
import argparse

import torch

import qr2_op


def graph_us(fn, calls=20, reps=30):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            for _ in range(calls):
                fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        best = min(best, a.elapsed_time(b) * 1e3 / calls)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", required=True, help="batch:m:n, comma-separated")
    ap.add_argument("--route", default=None)
    ap.add_argument("--tag", default="")
    args = ap.parse_args()
    qr2_op._force_route(args.route)
    op = torch.ops.qr2.geqrf.default
    for spec in args.shapes.split(","):
        b, m, n = (int(v) for v in spec.split(":"))
        A = torch.randn(b, m, n, device="cuda")
        route = args.route or qr2_op.route_for(m, n, b)
        print(f"{args.tag:>10} {b:5d}x{m:4d}x{n:<4d} {route:>28} {graph_us(lambda: op(A)):10.2f} us", flush=True)


if __name__ == "__main__":
    main()
