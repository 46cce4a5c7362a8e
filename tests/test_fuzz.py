"""Property-based fuzzing of torch.ops.qr2.geqrf on the GPU (hypothesis, derandomized, a bounded number of examples):
random batch shapes (0-3 batch dimensions), m and n from 0 to 600 plus a few large ones, layouts (transposed,
sliced, expanded, offset storage), QR2's profiles and inputs at the edges of FP32, the policy's configuration or a
forced one. Every example must pass QR2's gates in FP64 against the original input, leave the input unmodified,
repeat bit for bit on another stream, and keep a NaN or Inf in one matrix from changing any other matrix's bits."""
import math

import pytest
import torch

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import qr2_op  # noqa: E402
from conftest import requires_cuda  # noqa: E402
from reference import CASE_NAMES, check_implementation, generate_input  # noqa: E402

pytestmark = requires_cuda

MAX_ELEMENTS = 3_000_000  # per input, so that an example (four calls and an FP64 check) stays well under a second
FUZZ = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
LAYOUTS = ["contiguous", "transposed", "sliced", "expanded", "offset"]
VALUES = ["normal", "profile", "subnormal", "huge", "graded"]


@st.composite
def problems(draw):
    m = draw(st.one_of(st.integers(0, 600), st.integers(0, 600), st.sampled_from([1024, 2048, 5000])))
    n = draw(st.one_of(st.integers(0, 600), st.integers(0, 600), st.sampled_from([1024, 2048])))
    if m * n > MAX_ELEMENTS:
        n = MAX_ELEMENTS // m
    room = max(1, MAX_ELEMENTS // max(1, m * n))
    ndims = draw(st.integers(0, 3))
    batch = []
    for _ in range(ndims):
        cap = max(1, min(700, room) // max(1, math.prod(batch)))
        empty = draw(st.integers(0, 9)) == 0  # an empty batch dimension, now and then
        batch.append(0 if empty else draw(st.integers(1, min(cap, 12) if ndims > 1 else cap)))
    return {
        "batch": tuple(batch), "m": m, "n": n,
        "layout": draw(st.sampled_from(LAYOUTS)),
        "values": draw(st.sampled_from(VALUES)),
        "forced": draw(st.booleans()),
        "pick": draw(st.integers(0, 1000)),
        "seed": draw(st.integers(0, 2**31 - 1)),
        "poison": draw(st.sampled_from([None, float("nan"), float("inf"), -float("inf")])),
    }


def _values(p, gen):
    shape = (*p["batch"], p["m"], p["n"])
    kind = p["values"]
    if kind == "profile" and p["m"] == p["n"] and p["m"] > 0 and math.prod(p["batch"]) > 0:
        case = CASE_NAMES[p["seed"] % len(CASE_NAMES)]
        A = generate_input(batch=math.prod(p["batch"]), n=p["n"], cond=p["seed"] % 3, seed=p["seed"], case=case)
        return A.cpu().double().reshape(shape)
    A = torch.randn(shape, dtype=torch.float64, generator=gen)
    if kind == "subnormal":  # about half the entries subnormal, some the smallest subnormal or exactly zero
        mask = torch.rand(shape, generator=gen) < 0.5
        A = torch.where(mask, A * 2.0 ** -135, A)
        A = torch.where(torch.rand(shape, generator=gen) < 0.05, torch.full_like(A, 2.0 ** -149), A)
        A = torch.where(torch.rand(shape, generator=gen) < 0.05, torch.zeros_like(A), A)
    elif kind == "huge":
        A *= 2.0 ** 120 / max(1, max(p["m"], p["n"])) ** 0.5
    elif kind == "graded" and p["m"] > 0:
        A *= torch.pow(2.0, torch.linspace(60, -150, p["m"], dtype=torch.float64))[:, None]
    return A


def _layout(A, layout):
    """A tensor equal to A (on the GPU, FP32) stored as `layout` says."""
    A = A.float().cuda()
    if layout == "transposed":
        return A.mT.contiguous().mT
    if layout == "sliced":
        big = torch.zeros(*A.shape[:-2], A.shape[-2] + 2, A.shape[-1] + 3, device="cuda")
        big[..., 1:-1, 2:-1] = A
        return big[..., 1:-1, 2:-1]
    if layout == "expanded" and A.dim() > 2 and A.shape[0] > 1:
        return A[:1].expand(A.shape)  # every matrix of the first batch dimension the same storage
    if layout == "offset":
        flat = torch.empty(A.numel() + 7, device="cuda")
        flat[7:] = A.reshape(-1)
        return flat[7:].view(A.shape)
    return A


def _config(p, m, n, batch):
    if not p["forced"]:
        return None
    names = [name for name, _, _ in qr2_op.configs() if qr2_op._can_run(name, m, n, qr2_op.device_of())]
    return names[p["pick"] % len(names)] if names else None


def _factor(A, config, stream=None):
    qr2_op._force_config(config)
    try:
        with torch.cuda.stream(stream or torch.cuda.current_stream()):
            out = torch.ops.qr2.geqrf(A)
        torch.cuda.synchronize()
        return out
    finally:
        qr2_op._force_config(None)


@FUZZ
@given(problems())
def test_fuzz(p):
    gen = torch.Generator().manual_seed(p["seed"])
    A64 = _values(p, gen)
    A = _layout(A64, p["layout"])
    m, n, batch = p["m"], p["n"], math.prod(p["batch"])
    config = _config(p, m, n, batch)
    before = A.clone()
    H, tau = _factor(A, config)
    assert torch.equal(A, before), "the input was modified"
    assert H.shape == A.shape and tau.shape == (*p["batch"], min(m, n))
    if A.numel() == 0:
        return
    ok, msg = check_implementation(A, (H, tau))
    assert ok, f"{p} config={config}: {msg}"
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    H2, tau2 = _factor(A, config, side)
    assert torch.equal(H, H2) and torch.equal(tau, tau2), "not repeatable bit for bit on another stream"

    if p["poison"] is not None and batch > 1 and p["layout"] != "expanded":
        # one poisoned matrix: every other matrix's bits are those of the clean batch's, on the same configuration
        bad = A.clone().reshape(batch, m, n)
        k = p["seed"] % batch
        bad[k, p["seed"] % m, p["seed"] % n] = p["poison"]
        clean = A.reshape(batch, m, n).contiguous()
        forced = config or qr2_op.config_for(m, n, batch, qr2_op.device_of())
        Hb, taub = _factor(bad, forced)
        Hc, tauc = _factor(clean, forced)
        keep = [i for i in range(batch) if i != k]
        assert torch.equal(Hb[keep], Hc[keep]) and torch.equal(taub[keep], tauc[keep]), (
            f"a {p['poison']} in matrix {k} changed another matrix ({forced})")
