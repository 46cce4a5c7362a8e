"""One qr2 call's GPU work on its streams (torch.profiler / CUPTI): per stream its busy time, the union over the
streams, the call's span and the gaps in it, and for each kernel how much of its time ran beside another stream's work
(for a batch in two halves: how much of one half's panels the other half's updates hide).

    python tools/timeline.py [--shapes 640:512,60:1024] [--route blocked_nb32] [--top 8] [--window 36]

--window N also prints N consecutive activities from the middle of the call (stream, start and end from the call's
start, duration, name): which stream waits on which, step by step (how lookahead's two streams were read).
"""
import argparse
from collections import defaultdict

import torch

from timing import covered_ns, kernel_intervals, parse_shapes, union_ns  # also puts the repository root on sys.path

import qr2_op

SHAPES = [(640, 512), (60, 1024)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default=None, help="batch:n or batch:m:n, comma-separated")
    ap.add_argument("--route", default=None, help="force this route where it can run")
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("--window", type=int, default=0, help="consecutive activities to list from the call's middle")
    args = ap.parse_args()
    qr2_op._force_config(args.route)
    for batch, m, n in parse_shapes(args.shapes, SHAPES):
        A = torch.randn(batch, m, n, device="cuda")
        spans = kernel_intervals(lambda: torch.ops.qr2.geqrf(A))
        start, end = min(s for _, _, s, _ in spans), max(e for _, _, _, e in spans)
        busy = union_ns([(s, e) for _, _, s, e in spans])
        print(f"\n== {batch}x{m}x{n} route={args.route or qr2_op.config_for(m, n, batch)} "
              f"halves={qr2_op._blocked_halves(m, n, batch, qr2_op.device_of())}: span {(end - start) / 1e3:.0f} us, "
              f"some kernel running {busy / 1e3:.0f} us, none {(end - start - busy) / 1e3:.0f} us")
        streams = sorted({st for _, st, _, _ in spans})
        for st in streams:
            mine = [(s, e) for _, k, s, e in spans if k == st]
            print(f"  stream {st}: {len(mine)} activities, busy {union_ns(mine) / 1e3:.0f} us")
        # per kernel name: its time, and how much of it other streams' work ran beside
        per = defaultdict(lambda: [0, 0, 0])
        for st in streams:
            others = [(s, e) for _, k, s, e in spans if k != st]
            for name, k, s, e in spans:
                if k == st:
                    per[name][0] += 1
                    per[name][1] += e - s
                    per[name][2] += covered_ns([(s, e)], others)
        print(f"  {'us':>9s} {'beside':>7s}  launches  kernel")
        for name, (count, ns, beside) in sorted(per.items(), key=lambda kv: -kv[1][1])[: args.top]:
            print(f"  {ns / 1e3:9.0f} {100 * beside / ns if ns else 0:6.1f}%  x{count:<7d} {name}")
        if args.window:
            mid = max(0, (len(spans) - args.window) // 2)
            print(f"  {'stream':>8s} {'start us':>10s} {'end us':>10s} {'us':>7s}  kernel")
            for name, st, s, e in spans[mid:mid + args.window]:
                print(f"  {st:>8} {(s - start) / 1e3:10.1f} {(e - start) / 1e3:10.1f} {(e - s) / 1e3:7.1f}  {name}")
    qr2_op._force_config(None)


if __name__ == "__main__":
    main()
