"""Quick per-shape timing of qr2 vs torch.geqrf on the GPU (development aid; the scoreboard is benchmark.py).

Times back-to-back calls with CUDA events (median over repeats, inputs rotated to defeat the L2), and the host
path floor: qr2 on an empty batch (dispatcher + C shim + output allocation, no launch).
"""
import argparse
import statistics

import torch

import qr2_op  # noqa: F401

SHAPES = [(20, 32), (40, 176), (40, 352), (640, 512), (60, 1024), (8, 2048), (2, 4096)]


def time_calls(fn, inputs, reps):
    times = []
    for r in range(reps):
        x = inputs[r % len(inputs)]
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(x)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--torch-reps", type=int, default=2)
    ap.add_argument("--shapes", default=None, help="batch:n or batch:m:n, comma-separated")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--route", default=None, help="force this route where it admits the shape")
    args = ap.parse_args()
    qr2_op._force_route(args.route)
    shapes = SHAPES if not args.shapes else [tuple(int(v) for v in s.split(":")) for s in args.shapes.split(",")]
    shapes = [(s[0], s[1], s[1]) if len(s) == 2 else s for s in shapes]

    empty = torch.empty(0, 32, 32, device="cuda")
    for _ in range(100):
        torch.ops.qr2.geqrf(empty)
    torch.cuda.synchronize()
    n_calls = 2000
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n_calls):
        torch.ops.qr2.geqrf(empty)
    end.record()
    end.synchronize()
    print(f"host path floor (empty batch, no launch): {start.elapsed_time(end) * 1e3 / n_calls:.2f} us/call")

    print(f"{'shape':>18} {'route':>14} {'qr2 us':>12} {'torch us':>12} {'speedup':>8}")
    for batch, m, n in shapes:
        inputs = [torch.randn(batch, m, n, device="cuda") for _ in range(3)]
        for x in inputs:
            torch.ops.qr2.geqrf(x)
        torch.cuda.synchronize()
        ours = time_calls(torch.ops.qr2.geqrf, inputs, args.reps)
        theirs = float("nan") if args.no_torch else time_calls(torch.geqrf, inputs, args.torch_reps)
        print(f"{batch:>5}x{m:>5}x{n:<6} {(args.route or qr2_op.route_for(m, n, batch)):>14} {ours:12.1f} "
              f"{theirs:12.1f} {theirs / ours:8.2f}", flush=True)


if __name__ == "__main__":
    main()
