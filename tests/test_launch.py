"""cuda/launch.cu: single-kernel routes replay a cached one-node CUDA graph, its arguments set anew for every
call, once a configuration (kernel, grid, block, stream, device) has been launched before on the same host thread."""
import subprocess
import sys
import threading

import pytest
import torch

import qr2_op
from conftest import ROOT, requires_cuda
from reference import check_implementation

pytestmark = requires_cuda


def factor(A):
    return torch.ops.qr2.geqrf(A)


def counts():
    """(launches replayed, graphs instantiated, replays through the driver's entry points) so far, all threads."""
    return qr2_op._launch_counts()


def plain(inputs):
    """The oracle: every input factored by plain launches (replay off), one at a time."""
    qr2_op._set_launch_replay(False)
    try:
        out = [factor(A) for A in inputs]
        torch.cuda.synchronize()
    finally:
        qr2_op._set_launch_replay(True)
    return out


def same(got, expected):
    return torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])


@pytest.mark.parametrize("shape", [(20, 32, 32), (700, 24, 20), (3, 5, 5)], ids=lambda s: "x".join(map(str, s)))
def test_every_call_of_a_replayed_configuration_factors_its_own_input(shape):
    """Calls queued behind a busy GPU with different inputs: each graph launch must keep the arguments it was given,
    whatever the later calls set."""
    inputs = [torch.randn(*shape, device="cuda") for _ in range(6)]
    expected = plain(inputs)
    before = counts()
    torch.cuda._sleep(2_000_000)  # ~1 ms: every launch below is still queued when the next one sets its arguments
    got = [factor(A) for _ in range(4) for A in inputs]
    torch.cuda.synchronize()
    assert counts()[0] - before[0] >= len(got) - 2, (before, counts())  # at worst one plain launch, one instantiation
    for i, out in enumerate(got):
        assert same(out, expected[i % len(inputs)]), i
    ok, msg = check_implementation(inputs[-1], got[-1])
    assert ok, msg


def test_replays_set_arguments_and_launch_through_the_driver():
    """The driver's cuGraphExecKernelNodeSetParams and cuGraphLaunch, not their runtime wrappers (~0.15 us dearer per
    launch): CUDA 13's runtime hands out their entry points."""
    A = torch.randn(20, 32, 32, device="cuda")
    factor(A)
    factor(A)  # the configuration is known and instantiated by now
    before = counts()
    for _ in range(5):
        factor(A)
    torch.cuda.synchronize()
    after = counts()
    assert after[0] - before[0] == 5 and after[2] - before[2] == 5, (before, after)


def test_streams_get_their_own_graphs_and_keep_their_order():
    a, b = torch.cuda.Stream(), torch.cuda.Stream()
    inputs = [torch.randn(20, 32, 32, device="cuda") for _ in range(4)]
    expected = plain(inputs)
    for s in (a, b):
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            torch.cuda._sleep(2_000_000)
    before = counts()
    got = []
    for _ in range(3):
        for i, A in enumerate(inputs):
            with torch.cuda.stream(a if i % 2 else b):
                got.append((i, factor(A)))
                # a copy queued behind the call on its stream: it must see this call's H, written before it
                got.append((i, tuple(x.clone() for x in got[-1][1])))
    torch.cuda.synchronize()
    assert counts()[0] - before[0] >= 12 - 4  # each stream: at worst one plain launch and one instantiation
    for i, out in got:
        assert same(out, expected[i]), i


def test_threads_keep_their_own_graphs():
    inputs = [torch.randn(20, 32, 32, device="cuda") for _ in range(8)]
    expected = plain(inputs)
    results, errors = {}, []

    def worker(k):
        try:
            s = torch.cuda.Stream()
            with torch.cuda.stream(s):
                results[k] = [factor(inputs[(k + i) % 8]) for i in range(40)]
            s.synchronize()
        except Exception as exc:  # reported below, in the test's thread
            errors.append(exc)

    before = counts()
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert counts()[0] - before[0] >= 4 * 38
    for k, outs in results.items():
        for i, out in enumerate(outs):
            assert same(out, expected[(k + i) % 8]), (k, i)


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
        assert same((H, tau), fresh)


def capture_while_another_thread_churns():
    """Run by the test below in a process of its own: a capture that fails can leave torch's allocator mid-capture."""
    inputs = [torch.randn(b, 16, 16, device="cuda") for b in range(1, 41)]  # more configurations than 32 slots

    def churn():  # each configuration three times in a row: a plain launch, an instantiation, a replay with new
        for A in inputs:  # arguments; from the 33rd configuration on, each evicts (destroys) an earlier graph
            for _ in range(3):
                factor(A)

    churn()  # on this thread: the caching allocator now holds every block the worker's calls will need
    torch.cuda.synchronize()
    A = torch.randn(20, 32, 32, device="cuda")
    started, finished, errors = threading.Event(), threading.Event(), []

    def worker():
        try:
            started.wait(60)
            churn()  # its own cache: 40 instantiations, 8 evictions
        except Exception as exc:
            errors.append(exc)
        finally:
            finished.set()

    t = threading.Thread(target=worker)
    t.start()
    before = counts()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    g = torch.cuda.CUDAGraph()
    with torch.cuda.stream(side):
        g.capture_begin(capture_error_mode="global")  # torch.cuda.graph would also empty the allocator's cache
        H, tau = factor(A)
        started.set()
        finished.wait(60)
        g.capture_end()  # raises if the capture was invalidated
    t.join()
    torch.cuda.synchronize()
    assert not errors, errors
    assert counts()[1] - before[1] >= 40  # the worker's graphs were made (and replayed) during the capture
    g.replay()
    torch.cuda.synchronize()
    assert same((H, tau), factor(A))


def test_a_capture_in_one_thread_survives_graphs_made_and_destroyed_in_another():
    """torch captures in global mode by default: then any thread's potentially unsafe CUDA call invalidates the
    capture. A thread instantiating, replaying and evicting qr2's graphs meanwhile must not."""
    code = ("import sys; sys.path.insert(0, 'tests')\n"
            "import test_launch\n"
            "test_launch.capture_while_another_thread_churns()\n")
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]


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
    for _ in range(3):  # and these calls do go through the launcher: one configuration repeated is replayed
        factor(inputs[80])
    assert counts()[0] - before[0] >= 1 and counts()[1] - before[1] == 1


def test_the_empty_kernel_floor_takes_the_same_launch_path():
    A = torch.randn(20, 32, 32, device="cuda")
    qr2_op._force_config("empty_kernel")
    try:
        before = counts()
        for _ in range(5):
            factor(A)
        torch.cuda.synchronize()
        assert counts()[0] - before[0] >= 3
    finally:
        qr2_op._force_config(None)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_each_device_gets_its_own_graph():
    inputs = [torch.randn(20, 32, 32, device=f"cuda:{d}") for d in (0, 1)]
    expected = plain(inputs)
    before = counts()
    for _ in range(3):
        got = [factor(A) for A in inputs]
        for out, exp in zip(got, expected):
            assert same(out, exp)
    assert counts()[0] - before[0] >= 2
