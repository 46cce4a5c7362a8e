"""Quick per-shape timing of qr2 vs torch.geqrf on the GPU (development aid; the scoreboard is benchmark.py).

Times back-to-back calls with CUDA events (median over repeats, inputs rotated to defeat the L2), and the host
path floor: qr2 on an empty batch (dispatcher + C shim + output allocation, no launch).
"""
import argparse

import torch

from timing import parse_shapes, per_call_us  # also puts the repository root on sys.path

import qr2_op

SHAPES = [(20, 32), (40, 176), (40, 352), (640, 512), (60, 1024), (8, 2048), (2, 4096)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--torch-reps", type=int, default=2)
    ap.add_argument("--shapes", default=None, help="batch:n or batch:m:n, comma-separated")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--route", default=None, help="force this route where it admits the shape")
    args = ap.parse_args()
    qr2_op._force_config(args.route)
    shapes = parse_shapes(args.shapes, SHAPES)

    empty = torch.empty(0, 32, 32, device="cuda")
    for _ in range(100):
        torch.ops.qr2.geqrf(empty)
    torch.cuda.synchronize()
    floor = per_call_us(torch.ops.qr2.geqrf, empty, calls=2000, bursts=1, warmup=0)
    print(f"host path floor (empty batch, no launch): {floor:.2f} us/call")

    print(f"{'shape':>18} {'route':>14} {'qr2 us':>12} {'torch us':>12} {'speedup':>8}")
    for batch, m, n in shapes:
        inputs = [torch.randn(batch, m, n, device="cuda") for _ in range(3)]
        for x in inputs:
            torch.ops.qr2.geqrf(x)
        torch.cuda.synchronize()
        # one call per burst, the inputs rotated (against the L2), median over the bursts
        ours = per_call_us(torch.ops.qr2.geqrf, inputs, calls=1, bursts=args.reps, warmup=0)
        theirs = float("nan") if args.no_torch else per_call_us(torch.geqrf, inputs, calls=1,
                                                                bursts=args.torch_reps, warmup=0)
        print(f"{batch:>5}x{m:>5}x{n:<6} {(args.route or qr2_op.config_for(m, n, batch)):>14} {ours:12.1f} "
              f"{theirs:12.1f} {theirs / ours:8.2f}", flush=True)


if __name__ == "__main__":
    main()
