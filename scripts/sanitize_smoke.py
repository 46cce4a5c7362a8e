"""Small calls through every route and kernel, for compute-sanitizer (memcheck, racecheck, synccheck)."""
import torch

import qr2_op  # noqa: F401

CASES = [(4, 32, 32), (2, 176, 176), (2, 40, 120), (3, 100, 37), (2, 224, 200), (2, 256, 128), (2, 300, 300), (1, 200, 1100), (1, 1300, 1200), (1, 70000, 3)]

for batch, m, n in CASES:
    A = torch.randn(batch, m, n, device="cuda")
    H, tau = torch.ops.qr2.geqrf(A)
    torch.cuda.synchronize()
    k = min(m, n)
    Q = torch.linalg.householder_product(H[..., :k], tau)
    err = (Q @ torch.triu(H)[..., :k, :] - A).abs().max().item()
    print(f"{batch}x{m}x{n} route={qr2_op.route_for(m, n)} max|QR-A|={err:.2e}", flush=True)
