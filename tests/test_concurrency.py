"""qr2 under load, on the GPU: host threads on their own streams with their own shapes, CUDA-graph captures from
several threads at once, a captured graph replayed while other threads call eagerly, and many calls that must leave
torch's allocator where it was. Every result is compared bit for bit with the same input factored alone (qr2 is
deterministic). tools/soak.py runs the same for longer."""
import threading
import time

import pytest
import torch

from conftest import requires_cuda

pytestmark = requires_cuda

# one shape per family: quad, warp, builder (cluster), registers, shared_memory, blocked (register and cluster panels),
# blocked in two halves on the calling thread's side stream (a batch the halves rule splits at any SM count)
_SMS = torch.cuda.get_device_properties(0).multi_processor_count if torch.cuda.is_available() else 132
SHAPES = [(20, 32, 32), (1000, 32, 32), (40, 176, 176), (30, 200, 48), (4, 2000, 6), (3, 700, 300),
          (2 * _SMS + 6, 300, 300)]
CAPTURED = [0, 1, 2, 3, 6]


def _reference(shapes, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    inputs = [torch.randn(*s, device="cuda", generator=g) for s in shapes]
    return inputs, [torch.ops.qr2.geqrf(A) for A in inputs]


def _same(out, ref):
    return torch.equal(out[0], ref[0]) and torch.equal(out[1], ref[1])


def _run_threads(target, count):
    errors = []

    def wrapped(i):
        try:
            target(i)
        except BaseException as e:  # noqa: BLE001 - reported below, with the thread that raised it
            errors.append(f"thread {i}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=wrapped, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert not errors, errors[:5]


def test_threads_on_their_own_streams_with_their_own_shapes(seconds=3.0):
    inputs, refs = _reference(SHAPES, 1)
    torch.cuda.synchronize()
    warm = threading.Barrier(9)  # eight workers and this thread
    go = threading.Barrier(9)
    calls = [0] * 8

    def work(i):
        stream = torch.cuda.Stream()
        order = [(i + k) % len(SHAPES) for k in range(len(SHAPES))]
        with torch.cuda.stream(stream):
            for j in order:  # torch keeps a cuBLAS handle per thread and a workspace per stream: made before the baseline
                torch.ops.qr2.geqrf(inputs[j])
            stream.synchronize()
            warm.wait()
            go.wait()
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                for j in order:
                    out = torch.ops.qr2.geqrf(inputs[j])
                    stream.synchronize()
                    assert _same(out, refs[j]), f"shape {SHAPES[j]} differs from the same input factored alone"
                    calls[i] += 1

    errors = []

    def wrapped(i):
        try:
            work(i)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(f"thread {i}: {type(e).__name__}: {e}")
            warm.abort()
            go.abort()

    threads = [threading.Thread(target=wrapped, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    try:
        warm.wait(timeout=120)
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        go.wait(timeout=120)
    except threading.BrokenBarrierError:
        before = None
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert not errors, errors[:5]
    torch.cuda.synchronize()
    assert min(calls) > 0
    assert torch.cuda.memory_allocated() == before


def test_captures_from_several_threads_at_once():
    """Five threads capture qr2 on their own streams at the same time (thread-local capture mode: no thread's
    capture may be invalidated by another's calls), then replay with new inputs."""
    inputs, refs = _reference([SHAPES[i] for i in CAPTURED], 2)
    torch.cuda.synchronize()
    barrier = threading.Barrier(len(CAPTURED))

    def work(i):
        A = torch.zeros_like(inputs[i])
        stream = torch.cuda.Stream()
        graph = torch.cuda.CUDAGraph()
        barrier.wait()
        with torch.cuda.stream(stream):
            graph.capture_begin(capture_error_mode="thread_local")
            try:
                out = torch.ops.qr2.geqrf(A)
            finally:
                graph.capture_end()
        barrier.wait()  # every capture has ended
        with torch.cuda.stream(stream):
            for _ in range(3):
                A.copy_(inputs[i])
                graph.replay()
                stream.synchronize()
                assert _same(out, refs[i]), f"replayed capture of {SHAPES[CAPTURED[i]]} differs"

    _run_threads(work, len(CAPTURED))


def test_a_graph_replayed_while_other_threads_call_eagerly(seconds=2.0):
    inputs, refs = _reference(SHAPES, 3)
    A = inputs[2].clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = torch.ops.qr2.geqrf(A)
    torch.cuda.synchronize()

    def work(i):
        end = time.monotonic() + seconds
        if i == 0:
            stream = torch.cuda.Stream()
            with torch.cuda.stream(stream):
                while time.monotonic() < end:
                    graph.replay()
                    stream.synchronize()
                    assert _same(out, refs[2]), "the replayed graph's output differs"
            return
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            while time.monotonic() < end:
                for j in range(len(SHAPES)):
                    res = torch.ops.qr2.geqrf(inputs[j])
                    stream.synchronize()
                    assert _same(res, refs[j]), f"eager {SHAPES[j]} differs beside the replays"

    _run_threads(work, 4)


@pytest.mark.parametrize("calls", [3000])
def test_many_calls_leave_the_allocator_where_it_was(calls):
    inputs, _ = _reference(SHAPES, 4)
    for A in inputs:  # first calls: cuBLAS workspaces, graph caches, kernel attributes
        torch.ops.qr2.geqrf(A)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    reserved = torch.cuda.memory_reserved()
    for k in range(calls):
        H, tau = torch.ops.qr2.geqrf(inputs[k % len(inputs)])
        del H, tau
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() == before
    assert torch.cuda.memory_reserved() <= reserved + 64 * 2**20  # the caching allocator settles, it does not grow
