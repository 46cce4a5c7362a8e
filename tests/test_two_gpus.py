"""Two GPUs of one host: inputs on the device that is not current (both ways), concurrent calls on both, a captured
graph on each. Every result must equal, bit for bit, the same input factored with its own device current (the same
GPU model on both: the kernels are deterministic). Skipped with fewer than two GPUs."""
import threading

import pytest
import torch

import qr2_op

pytestmark = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                                reason="needs two CUDA GPUs")

# quad, builder (2-block cluster), registers, blocked with cluster panels
SHAPES = [(20, 32, 32), (40, 176, 176), (30, 200, 48), (2, 700, 300)]


def _alone(A):
    """A factored with A's own device current."""
    with torch.cuda.device(A.device):
        out = torch.ops.qr2.geqrf(A)
        torch.cuda.synchronize()
    return out


@pytest.mark.parametrize("current,data", [(0, 1), (1, 0)])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_input_on_the_other_device(current, data, shape):
    A = torch.randn(*shape, device=f"cuda:{data}")
    expected = _alone(A)
    with torch.cuda.device(current):
        H, tau = torch.ops.qr2.geqrf(A)
        H2, tau2 = qr2_op.geqrf(A)
        assert torch.cuda.current_device() == current  # the call left the current device alone
    torch.cuda.synchronize(data)
    assert H.device == A.device and tau.device == A.device
    for got in ((H, tau), (H2, tau2)):
        assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])


def test_concurrent_calls_on_both_devices():
    inputs = {d: [torch.randn(*s, device=f"cuda:{d}") for s in SHAPES] for d in (0, 1)}
    expected = {d: [_alone(A) for A in inputs[d]] for d in (0, 1)}
    errors = []

    def work(d, k):
        try:
            with torch.cuda.device(d):
                stream = torch.cuda.Stream()
                with torch.cuda.stream(stream):
                    for _ in range(20):
                        for A, ref in zip(inputs[d], expected[d]):
                            H, tau = torch.ops.qr2.geqrf(A)
                            stream.synchronize()
                            assert torch.equal(H, ref[0]) and torch.equal(tau, ref[1]), f"cuda:{d} {tuple(A.shape)}"
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(f"cuda:{d} thread {k}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=work, args=(d, k)) for d in (0, 1) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads) and not errors, errors[:4]


@pytest.mark.parametrize("shape", [SHAPES[0], SHAPES[3]], ids=str)
def test_a_captured_graph_on_each_device(shape):
    graphs = []
    for d in (0, 1):
        with torch.cuda.device(d):
            A = torch.zeros(*shape, device=f"cuda:{d}")
            torch.ops.qr2.geqrf(A)  # first calls outside the capture
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                out = torch.ops.qr2.geqrf(A)
            graphs.append((d, A, g, out))
    for d, A, g, out in graphs:
        fresh = torch.randn(*shape, device=f"cuda:{d}")
        A.copy_(fresh)
        with torch.cuda.device(d):
            g.replay()
            torch.cuda.synchronize()
        expected = _alone(fresh)
        assert torch.equal(out[0], expected[0]) and torch.equal(out[1], expected[1]), f"cuda:{d}"
