"""Time per call of the small-matrix routes against the general route and torch.geqrf (development aid; the
scoreboard is benchmark.py). Calls are timed as the QR2 harness times them: back-to-back calls between two
CUDA events, divided by the number of calls (median of several bursts), so a kernel shorter than the host
path shows the host path. The `empty_kernel` pseudo-route gives the floor of a call.

    python tools/small_sweep.py --json-out sweep.json [--n 8:256:8] [--batches 1,20,40,640]

The large-matrix sweep of the blocked configurations (n 288-1536, each point a few calls):

    python tools/small_sweep.py --n 288:1536:32 --batches 1,8,40,640 --calls 2 --bursts 3 \
        --routes blocked_nb32,blocked_nb64,blocked_cholqr_nb32 --json-out large.json
"""
import argparse
import json

import torch

from timing import forced_route as forced, per_call_us  # also puts the repository root on sys.path

import qr2_op


def holds(route, n):
    """Whether `route`'s kernel can hold n x n (a forced route that cannot falls back to the table)."""
    return qr2_op._can_run(route, n, n) if not route.startswith("blocked") else True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", default="8:256:8", help="start:stop:step")
    ap.add_argument("--batches", default="1,20,40,640")
    ap.add_argument("--routes", default="quad,warp,builder,registers,registers_cluster2,blocked_nb32")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--calls", type=int, default=10, help="back-to-back calls per timed burst")
    ap.add_argument("--bursts", type=int, default=5, help="timed bursts per point (median)")
    ap.add_argument("--json-out")
    args = ap.parse_args()
    lo, hi, step = (int(v) for v in args.n.split(":"))
    routes = args.routes.split(",")
    x = torch.randn(20, 32, 32, device="cuda")
    op = qr2_op.geqrf  # what users and the benchmark call
    with forced("empty_kernel"):
        floor = {"empty_kernel": per_call_us(op, x, calls=200)}
        with torch.inference_mode():
            floor["empty_kernel_inference_mode"] = per_call_us(op, x, calls=200)
    print(f"floor of a call (empty kernel, same path): {floor['empty_kernel']:.2f} us "
          f"({floor['empty_kernel_inference_mode']:.2f} us in inference_mode)", flush=True)
    rows = []
    print(f"{'batch':>5} {'n':>4} {'table':>18} " + " ".join(f"{r:>18}" for r in routes) + f" {'torch':>10}")
    for batch in (int(b) for b in args.batches.split(",")):
        for n in range(lo, hi + 1, step):
            A = torch.randn(batch, n, n, device="cuda")
            row = {"batch": batch, "n": n, "table": qr2_op.config_for(n, n, batch), "us": {}}
            for r in routes:
                runs = holds(r, n)
                with forced(r):
                    row["us"][r] = per_call_us(op, A, calls=args.calls, bursts=args.bursts) if runs else None
            row["us"]["table"] = per_call_us(op, A, calls=args.calls, bursts=args.bursts)
            if not args.no_torch:
                row["us"]["torch"] = per_call_us(torch.geqrf, A, calls=1, bursts=1 if batch * n > 20000 else 3)
            rows.append(row)
            cells = " ".join(f"{row['us'][r]:18.1f}" if row["us"][r] else f"{'-':>18}" for r in routes)
            print(f"{batch:5d} {n:4d} {row['table']:>18} {cells} {row['us'].get('torch', float('nan')):10.1f}",
                  flush=True)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"floor_us": floor, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
