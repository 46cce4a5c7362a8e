"""Checks shared by the tests that force one configuration (test_registers.py, test_warp.py, test_blocked.py): each test file
forces its configuration and calls these with shapes its kernel holds."""
import math
import re
import subprocess
import sys

import torch

from conftest import ROOT
from reference import check_implementation


def factor(A):
    return torch.ops.qr2.geqrf(A)


def check(A, out=None):
    ok, msg = check_implementation(A, factor(A) if out is None else out)
    assert ok, msg


def first_call_of_a_process(route, shape):
    """Factors and checks `shape` with `route` forced as the first call of a fresh process: what a kernel's first
    launch sets up (its shared-memory limit) persists in a process, so earlier calls could hide a launch that fails."""
    code = ("import torch, qr2_op\n"
            "from reference import check_implementation\n"
            f"qr2_op._force_config({route!r})\n"
            f"A = torch.randn(*{tuple(shape)!r}, device='cuda')\n"
            "ok, msg = check_implementation(A, torch.ops.qr2.geqrf(A))\n"
            "assert ok, msg\n")
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]


def lapack_conventions_match_torch(n, device="cuda"):
    A = (torch.randn(4, n, n, device=device, dtype=torch.float64) + n ** 0.5 * torch.eye(n, device=device,
                                                                                          dtype=torch.float64)).float()
    H, tau = factor(A)
    Hr, taur = torch.geqrf(A)
    torch.testing.assert_close(H, Hr, rtol=2e-3, atol=2e-3)  # the factorisation is unique: all of H agrees
    torch.testing.assert_close(tau, taur, rtol=2e-3, atol=2e-3)
    assert torch.all(tau[:, -1] == 0)


def zero_and_triangular_inputs(m, n, zero_cols, device="cuda"):
    H, tau = factor(torch.zeros(3, 40, 40, device=device))
    assert torch.all(H == 0) and torch.all(tau == 0)
    A = torch.randn(3, m, n, device=device)
    A[:, :, zero_cols] = 0
    H, tau = factor(A)
    assert torch.all(tau[:, zero_cols] == 0)
    check(A, (H, tau))
    U = torch.triu(torch.randn(3, n, n, device=device)) + 3 * torch.eye(n, device=device)
    H, tau = factor(U)
    assert torch.all(tau == 0) and torch.equal(H, U)  # nothing to annihilate: H is U, bit for bit


def tiny_and_huge_values(n, scale, device="cuda"):
    # a power of two near `scale`, and A's entries multiples of 2^-23: A * scale is then exactly A's digits, subnormals
    # included down to scale 2^-126, so the comparison below sees the kernels and not the input's rounding (with 1e-30
    # itself, 1 of 320,000 entries of a 400 x 400 R once moved by 1.1e-4; at 2^-126 with A's digits cut by subnormal
    # rounding, the builder's test failed once in many runs)
    scale = 2.0 ** round(math.log2(scale))
    A = torch.round(torch.randn(2, n, n, device=device) * 2.0**23) * 2.0**-23
    assert torch.equal(A * scale / scale, A)
    H, tau = factor(A * scale)
    Href, tauref = factor(A)
    assert torch.isfinite(H).all() and torch.isfinite(tau).all()
    # power-of-two scaling inside the kernels: R scales with A, the reflectors and tau do not move
    torch.testing.assert_close(torch.triu(H) / scale, torch.triu(Href), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(torch.tril(H, -1), torch.tril(Href, -1), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(tau, tauref, rtol=1e-4, atol=1e-4)


def nan_and_inf_stay_in_their_matrix(batch, n, bad, device="cuda"):
    A = torch.randn(batch, n, n, device=device)
    A[1, 9, 4] = bad
    H, tau = factor(A)
    keep = [i for i in range(batch) if i != 1]
    ok, msg = check_implementation(A[keep].contiguous(), (H[keep].contiguous(), tau[keep].contiguous()))
    assert ok, msg


def one_kernel_per_call(shape, kernel):
    A = torch.randn(*shape, device="cuda")
    factor(A)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        factor(A)
        torch.cuda.synchronize()
    kernels = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    assert len(kernels) == 1 and re.search(kernel, kernels[0]), kernels


def side_stream_and_cuda_graph(shape):
    A = torch.randn(*shape, device="cuda")
    expected = factor(A)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        got = factor(A)
    torch.cuda.current_stream().wait_stream(side)
    assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        captured = factor(A)
    A.copy_(torch.randn_like(A))
    g.replay()
    torch.cuda.synchronize()
    fresh = factor(A)
    assert torch.equal(captured[0], fresh[0]) and torch.equal(captured[1], fresh[1])


def repeatable_bit_for_bit(shape, device="cuda"):
    A = torch.randn(*shape, device=device)
    H0, tau0 = factor(A)
    for _ in range(10):
        H, tau = factor(A)
        assert torch.equal(H, H0) and torch.equal(tau, tau0)
