"""Small calls through every configuration and kernel, for compute-sanitizer (tools/sanitize.sh runs it under memcheck,
racecheck, synccheck and initcheck).

--only NAME keeps the calls whose configuration's name contains NAME; --zero-tails keeps the calls with exactly zero
trailing columns; --max-batch N cuts every batch to at most N matrices (racecheck's pace: a batch of 67 register
panels took it more than 300 s), which leaves out the kernel builds only large batches pick, and the halves call.
--no-cluster skips the calls whose routes launch thread-block clusters (`registers_cluster2`, `builder_cluster2`,
`builder_cluster3`, and the blocked routes with panels taller than 512 rows): racecheck fails on those here
("Internal Sanitizer Error: The Sanitizer failed to handle a hardware exception", CUDA 13.0 on the H200), while
memcheck and the tests pass."""
import sys

import torch

from timing import forced_route  # also puts the repository root on sys.path

import qr2_op

CASES = [(4, 32, 32), (2, 64, 64), (2, 128, 128), (2, 150, 150), (2, 176, 176), (2, 40, 120), (3, 100, 37),
         (2, 224, 200), (2, 256, 128), (2, 300, 300), (1, 200, 1100), (1, 1300, 1200), (1, 70000, 3)]

# forced routes: shapes the table sends elsewhere at these batch sizes
FORCED = [("quad", 700, 32, 32), ("quad", 3, 13, 7), ("quad", 3, 5, 30), ("quad", 3, 64, 64), ("quad", 3, 50, 40),
          ("quad", 3, 20, 64), ("warp", 4, 32, 32), ("warp", 2, 64, 64), ("warp", 3, 90, 20), ("warp", 300, 40, 40),
          ("builder", 2, 176, 176), ("builder", 2, 100, 60), ("builder", 2, 60, 130), ("builder", 2, 99, 131),
          ("builder_cluster2", 2, 176, 176), ("builder_cluster2", 2, 100, 176), ("builder_cluster2", 2, 176, 80),
          ("builder_cluster2", 2, 20, 170), ("registers_cluster2", 2, 64, 64), ("registers_cluster2", 2, 100, 70),
          ("builder_cluster3", 2, 256, 256), ("builder_cluster3", 2, 150, 200), ("builder_cluster3", 2, 256, 100),
          ("shared_memory", 2, 1000, 5), ("shared_memory", 3, 40, 8),
          ("blocked_nb64", 70, 300, 300), ("blocked_nb32", 67, 290, 200),  # register panels, 300 and 290 rows
          ("blocked_nb64", 140, 200, 200), ("blocked_nb64", 140, 198, 170),  # past a wave; rows not in fours
          ("blocked_nb32", 6, 1024, 1024), ("blocked_nb32", 4, 1030, 1030),  # updates split over rows
          ("blocked_nb32", 1, 9000, 40),  # the many-block tall panel
          ("blocked_cholqr_nb32", 2, 700, 700), ("blocked_cholqr_nb32", 40, 300, 300),  # CholeskyQR panels
          ("blocked_cholqr_nb32", 1, 2100, 300),  # 256-row blocks, 16-block clusters
          ("blocked_cholqr_nb32", 4, 100, 100),  # one block a panel (what racecheck can run, in time)
          ("blocked_cholqr_nb32", 2, 9000, 70),  # the grid CholeskyQR panel past a cluster's rows (no cluster)
          ("blocked_cholqr_nb32", 8, 9000, 40),  # parts walking two chunks (132 SMs: 33 parts, 36 chunks)
          ("blocked_nb64", 2, 1100, 200),  # merge_t in parts, 3xTF32
          ("blocked_nb32_lookahead", 2, 600, 600), ("blocked_nb64_lookahead", 2, 1100, 400),
          ("blocked_cholqr_nb32_lookahead", 2, 1100, 400)]

# exactly zero trailing columns (zero_tail_kernel, the panels and updates that skip them; the first update copies them
# from a row-major input): route, batch, m, n, how many zero columns. Small batches where racecheck runs them (a batch
# of 67 register panels took it more than 300 s).
ZERO_TAILS = [("blocked_nb64", 4, 300, 300, 100), ("blocked_nb32", 3, 290, 200, 33),
              ("blocked_nb32", 4, 1030, 1030, 200), ("blocked_nb32", 1, 9000, 40, 8),
              ("blocked_cholqr_nb32", 40, 300, 300, 64), ("blocked_nb32", 3, 200, 200, 200)]

# a batch that runs as two halves, the second on the side stream (c_api/blocked.c: each half holds 4 waves of 64-column
# strips). Skipped with --no-cluster too: racecheck would not finish it.
SMS = torch.cuda.get_device_properties(0).multi_processor_count
HALVES = [("blocked_nb32", 2 * SMS + 1, 160, 256, 40)]

CLUSTER_ROUTES = ("registers_cluster2", "builder_cluster2", "builder_cluster3")


def launches_clusters(route, batch, m, n):
    if route.startswith("blocked_"):  # by the rows of each 32-column panel; past 8192 rows, grid and tall kinds
        rows = [m - k for k in range(0, min(m, n), 32)]
        if route.startswith("blocked_cholqr"):  # one block only for at most 126 rows, or 128 past a wave
            return any(not (r <= 126 or (r <= 128 and batch >= 132)) and r <= 8192 for r in rows)
        return any(512 < r <= 8192 for r in rows)  # panel_cluster's clusters (register panels are one block)
    return route.startswith(CLUSTER_ROUTES)


only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else ""
calls = [(None, *c, 0) for c in CASES] + [(*f, 0) for f in FORCED] + ZERO_TAILS + HALVES
if "--zero-tails" in sys.argv:
    calls = ZERO_TAILS
max_batch = int(sys.argv[sys.argv.index("--max-batch") + 1]) if "--max-batch" in sys.argv else None
for call in calls:
    route, batch, m, n, zeros = call
    if call in HALVES and (max_batch is not None or "--no-cluster" in sys.argv):
        continue
    batch = batch if max_batch is None else min(batch, max_batch)
    picked = route or qr2_op.config_for(m, n, batch)
    if "--no-cluster" in sys.argv and launches_clusters(picked, batch, m, n):
        continue
    if only not in picked:
        continue
    if call in HALVES and not qr2_op._blocked_halves(m, n, batch, qr2_op.device_of()):
        print(f"{batch}x{m}x{n}: not split in halves on this device; skipped", flush=True)
        continue
    A = torch.randn(batch, m, n, device="cuda")
    A[..., :, n // 2] *= 1e-30  # a column for the FP64 path
    A[..., :, n - zeros:] = 0.0
    with forced_route(route):
        H, tau = torch.ops.qr2.geqrf(A)
    torch.cuda.synchronize()
    k = min(m, n)
    Q = torch.linalg.householder_product(H[..., :k], tau)
    err = (Q @ torch.triu(H)[..., :k, :] - A).abs().max().item()
    print(f"{batch}x{m}x{n} zeros={zeros} route={route or qr2_op.config_for(m, n)} max|QR-A|={err:.2e}", flush=True)

# orgqr and ormqr (updates with rows split over blocks, and in whole strips)
if only in "householder" and "--zero-tails" not in sys.argv:
    for batch, m, n in [(2, 1024, 300), (16, 200, 200)]:
        batch = batch if max_batch is None else min(batch, max_batch)
        H, tau = torch.geqrf(torch.randn(batch, m, n, device="cuda"))
        C = torch.randn(batch, m, 70, device="cuda")
        Q, X = qr2_op.orgqr(H, tau), qr2_op.ormqr(H, tau, C, True, False)
        torch.cuda.synchronize()
        err = (Q.mT @ Q - torch.eye(n, device="cuda")).abs().max().item()
        print(f"householder {batch}x{m}x{n} max|Q^T Q - I|={err:.2e} |QC|={X.norm().item():.3e}", flush=True)
