"""Per-kernel GPU time of one qr2 call per shape (torch.profiler / CUPTI): where the time goes."""
import argparse
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

import qr2_op

SHAPES = [(20, 32), (40, 176), (40, 352), (640, 512), (60, 1024), (8, 2048), (2, 4096)]

ap = argparse.ArgumentParser()
ap.add_argument("--shapes", default=None, help="batch:n or batch:m:n, comma-separated")
ap.add_argument("--top", type=int, default=8)
ap.add_argument("--route", default=None, help="force this route where it can run")
args = ap.parse_args()
qr2_op._force_route(args.route)
shapes = SHAPES if not args.shapes else [tuple(int(v) for v in s.split(":")) for s in args.shapes.split(",")]

shapes = [(s[0], s[1], s[1]) if len(s) == 2 else s for s in shapes]
for batch, m, n in shapes:
    A = torch.randn(batch, m, n, device="cuda")
    torch.ops.qr2.geqrf(A)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        torch.ops.qr2.geqrf(A)
        torch.cuda.synchronize()
    per = defaultdict(lambda: [0, 0.0])
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            name = e.name.split("(")[0][:60]
            per[name][0] += 1
            per[name][1] += e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
    total = sum(t for _, t in per.values())
    print(f"\n== {batch}x{m}x{n} route={args.route or qr2_op.route_for(m, n, batch)} kernels={sum(c for c, _ in per.values())} "
          f"gpu_busy={total:.0f} us")
    for name, (count, t) in sorted(per.items(), key=lambda kv: -kv[1][1])[: args.top]:
        print(f"  {t:10.0f} us {100 * t / total:5.1f}%  x{count:<5d} {t / count:8.1f} us/launch  {name}")
