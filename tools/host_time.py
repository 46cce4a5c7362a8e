"""Host time per call of torch.ops.qr2.geqrf on small shapes, for A/B runs of two builds (run on a GPU machine).

Run it from the root of the tree under test (it imports that tree's qr2_op and nothing else of it), one process per
sample, alternating the builds, pinned to one core so that both see the same host:

    cd TREE && taskset -c 3 python3 /path/to/tools/host_time.py 20:32,640:32

Per shape it prints the host time per call (perf_counter around bursts of 200 calls that return before their
kernels finish, so the GPU never holds the host back; median and minimum of 25 bursts) and the GPU time per call
(CUDA events around the same bursts, median), in microseconds.
"""
import os
import statistics
import sys
import time

sys.path.insert(0, os.getcwd())

import torch  # noqa: E402

import qr2_op  # noqa: E402,F401  (registers torch.ops.qr2)

CALLS, BURSTS = 200, 25


def measure(batch, n):
    A = torch.randn(batch, n, n, device="cuda")
    op = torch.ops.qr2.geqrf
    for _ in range(CALLS):  # warm: allocator blocks, graph-replay slots, the first launches
        op(A)
    torch.cuda.synchronize()
    host, gpu = [], []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(BURSTS):
        start.record()
        t0 = time.perf_counter()
        for _ in range(CALLS):
            op(A)
        t1 = time.perf_counter()
        end.record()
        end.synchronize()
        host.append((t1 - t0) / CALLS * 1e6)
        gpu.append(start.elapsed_time(end) / CALLS * 1e3)
    return statistics.median(host), min(host), statistics.median(gpu)


def main():
    shapes = sys.argv[1] if len(sys.argv) > 1 else "1:8,20:32,40:40,40:64,640:32,40:176"
    for item in shapes.split(","):
        batch, n = (int(v) for v in item.split(":"))
        h_med, h_min, g_med = measure(batch, n)
        print(f"{batch}x{n}  host median {h_med:7.2f} min {h_min:7.2f}  gpu median {g_med:7.2f}")


if __name__ == "__main__":
    main()
