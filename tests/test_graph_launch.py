"""cuda/graph_launch.cu: single-kernel routes replay a cached one-node CUDA graph, its arguments set anew for every
call, once a configuration (kernel, grid, block, stream, device) has been launched before."""
import pytest
import torch

import qr2_op
from conftest import requires_cuda
from reference import check_implementation

pytestmark = requires_cuda


def factor(A):
    return torch.ops.qr2.geqrf(A)


def counts():
    return qr2_op._launch_counts()


@pytest.mark.parametrize("shape", [(20, 32, 32), (700, 24, 20), (3, 5, 5)], ids=lambda s: "x".join(map(str, s)))
def test_every_call_of_a_replayed_configuration_factors_its_own_input(shape):
    """Calls queued back to back with different inputs (no synchronisation between them): the replayed graph must
    use each call's pointers, never an earlier call's."""
    inputs = [torch.randn(*shape, device="cuda") for _ in range(6)]
    expected = []
    for A in inputs:  # one at a time, synchronised: the reference results
        expected.append(factor(A))
        torch.cuda.synchronize()
    before = counts()
    got = [factor(A) for _ in range(4) for A in inputs]
    torch.cuda.synchronize()
    replayed = counts()[0] - before[0]
    assert replayed >= len(got) - 2, (before, counts())  # at worst one plain launch and one instantiation
    for i, (H, tau) in enumerate(got):
        He, taue = expected[i % len(inputs)]
        assert torch.equal(H, He) and torch.equal(tau, taue), i
    ok, msg = check_implementation(inputs[-1], got[-1])
    assert ok, msg


def test_streams_get_their_own_graphs_and_keep_their_order():
    a, b = torch.cuda.Stream(), torch.cuda.Stream()
    inputs = [torch.randn(20, 32, 32, device="cuda") for _ in range(4)]
    expected = [factor(A) for A in inputs]
    torch.cuda.synchronize()
    for s in (a, b):
        s.wait_stream(torch.cuda.current_stream())
    got = []
    for _ in range(3):
        for i, A in enumerate(inputs):
            with torch.cuda.stream(a if i % 2 else b):
                got.append((i, factor(A)))
    torch.cuda.synchronize()
    for i, (H, tau) in got:
        assert torch.equal(H, expected[i][0]) and torch.equal(tau, expected[i][1]), i


def test_a_captured_call_is_a_plain_kernel_node():
    A = torch.randn(20, 32, 32, device="cuda")
    for _ in range(3):  # the configuration is replayed by now
        factor(A)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    before = counts()
    with torch.cuda.graph(g):
        H, tau = factor(A)
    assert counts() == before  # no replay and no instantiation inside a capture
    for _ in range(3):
        A.copy_(torch.randn_like(A))
        g.replay()
        fresh = factor(A)  # eager calls of the same configuration between replays replay qr2's own graph
        torch.cuda.synchronize()
        assert torch.equal(H, fresh[0]) and torch.equal(tau, fresh[1])


def test_cycling_through_more_configurations_than_the_cache_holds_never_instantiates():
    """Instantiating costs tens of microseconds: a configuration seen once is only remembered, so a caller cycling
    through many more configurations than the cache's 32 slots always gets plain launches."""
    batches = list(range(1, 81))
    inputs = {b: torch.randn(b, 16, 16, device="cuda") for b in batches}
    for b in batches:  # first round: every configuration seen (those of earlier tests are pushed out)
        factor(inputs[b])
    before = counts()
    outs = [(b, factor(inputs[b])) for b in batches]
    torch.cuda.synchronize()
    assert counts() == before
    for b, out in outs[::9]:
        ok, msg = check_implementation(inputs[b], out)
        assert ok, msg


def test_the_empty_kernel_floor_takes_the_same_launch_path():
    A = torch.randn(20, 32, 32, device="cuda")
    qr2_op._force_route("empty_kernel")
    try:
        before = counts()
        for _ in range(5):
            factor(A)
        torch.cuda.synchronize()
        assert counts()[0] - before[0] >= 3
    finally:
        qr2_op._force_route(None)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_each_device_gets_its_own_graph():
    inputs = [torch.randn(20, 32, 32, device=f"cuda:{d}") for d in (0, 1)]
    expected = [factor(A) for A in inputs]
    for _ in range(3):
        got = [factor(A) for A in inputs]
        for (H, tau), (He, taue) in zip(got, expected):
            assert torch.equal(H, He) and torch.equal(tau, taue)
