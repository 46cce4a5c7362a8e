"""The timing helpers of the tools in tools/ (development aids; the scoreboard is benchmark.py), in one place.

* per_call_us: back-to-back calls between two CUDA events, per call, over several bursts (median by default), as
  the QR2 harness times calls: a kernel shorter than the host path shows the host path.
* graph_us: the same calls captured once in a CUDA graph and replayed: the kernels' time with the host path removed.
* wall_us: host wall time per call (the host's issue rate).
* clock_mhz: the SM clock now, from a fixed-cycle spin kernel.
* protocol_us: QR2's timed loop (L2 flush, events around one call per input), with its variants.
* kernel_times: per-kernel GPU time of one call, from torch.profiler (CUPTI).
* kernel_intervals, union_ns, covered_ns: one call's kernels on their streams as time intervals, and their overlap.
* forced_route, parse_shapes: what the timing tools share around the timed calls.

The L2 flush is benchmark.py's (clear_l2_cache), so the tools flush exactly as the scoreboard does. Importing this
module puts the repository root on sys.path: the tools then import benchmark, reference and qr2_op from the tree.
"""
import contextlib
import os
import statistics
import sys
import time
from collections import defaultdict

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmark import clear_l2_cache  # noqa: E402  (QR2's flush: 256 MiB written between timed repeats)

__all__ = ["ROOT", "clear_l2_cache", "clock_mhz", "covered_ns", "forced_route", "graph_us", "kernel_intervals",
           "kernel_times", "parse_shapes", "per_call_us", "protocol_us", "union_ns", "wall_us"]


def _events():
    return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)


def per_call_us(fn, inputs=None, *, calls=10, bursts=5, reduce=statistics.median, warmup=1):
    """Microseconds per call of `calls` back-to-back calls between two CUDA events, reduced over `bursts` bursts
    (median unless `reduce` says otherwise, e.g. min for the best burst). `inputs`: None calls fn(), a tensor calls
    fn(tensor), a list calls fn(inputs[b % len(inputs)]) in burst b (inputs rotated against the L2). `warmup`
    untimed calls come first. The timed loop calls fn directly: no wrapper adds host time to a call."""
    rotated = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    for w in range(warmup):
        if inputs is None:
            fn()
        else:
            fn(rotated[w % len(rotated)])
    times = []
    for b in range(bursts):
        x = rotated[b % len(rotated)]
        torch.cuda.synchronize()
        start, end = _events()
        start.record()
        if inputs is None:
            for _ in range(calls):
                fn()
        else:
            for _ in range(calls):
                fn(x)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / calls)
    return reduce(times)


def graph_us(fn, *, calls=20, bursts=30, reduce=statistics.median):
    """Microseconds per call of fn() with the host path removed: `calls` calls captured once in a CUDA graph (after
    one uncaptured call), the graph replayed `bursts` times between CUDA events, reduced over the replays."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        fn()
        torch.cuda.synchronize()
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(calls):
                fn()
    torch.cuda.synchronize()
    return per_call_us(graph.replay, calls=1, bursts=bursts, reduce=reduce, warmup=0) / calls


def wall_us(fn, calls=20000, warmup=500):
    """Host wall time per call of fn() (the issue rate: the GPU work queues behind), after `warmup` calls."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def clock_mhz(cycles=100_000):
    """The SM clock now: a fixed-cycle spin kernel timed by events (~50 us at 1980 MHz, so the events add little)."""
    start, end = _events()
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    return cycles / (start.elapsed_time(end) * 1e3)


def protocol_us(fn, inputs, keep, between=None, busy_before_flush=False, reps=40, host_ns=None):
    """QR2's timed loop (L2 flush, events around one call per input), `between(inputs, outputs)` run between repeats:
    (mean after 5 warm-up repeats, best, mean SM clock in MHz right after the calls). keep: the outputs stay alive
    until the next repeat's calls return, as QR2 keeps them. busy_before_flush: a spin kernel before the flush keeps
    the GPU awake and lets the calls queue behind it (device time at a warm clock). host_ns: a list per input, to
    which each call's host time is appended (outputs kept)."""
    outputs, times, clocks = None, [], []
    for _ in range(reps):
        torch.cuda.synchronize()
        if busy_before_flush:
            torch.cuda._sleep(2_000_000)
        clear_l2_cache()
        start, end = _events()
        start.record()
        if host_ns is not None:  # host time of each call, by its index in the repeat
            new = []
            for i, A in enumerate(inputs):
                t0 = time.perf_counter_ns()
                new.append(fn(A))
                host_ns[i].append(time.perf_counter_ns() - t0)
        elif keep:
            new = [fn(A) for A in inputs]
        else:
            for A in inputs:
                fn(A)
            new = None
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / len(inputs))
        clocks.append(clock_mhz())
        if between is not None:
            between(inputs, new)
        outputs = new  # noqa: F841 (kept alive until the next repeat's calls return, as QR2 does)
    return statistics.mean(times[5:]), min(times), statistics.mean(clocks[5:])


def kernel_times(fn):
    """Per-kernel GPU time of one fn() (after one untimed call), from torch.profiler: {kernel name: [launches, us]}."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    per = defaultdict(lambda: [0, 0.0])
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            name = _short_name(e.name)
            per[name][0] += 1
            per[name][1] += e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
    return dict(per)


def _short_name(name):
    return name.replace("(anonymous namespace)::", "").removeprefix("void ").split("(")[0][:60]


def kernel_intervals(fn):
    """The GPU activities (kernels, memsets, copies) of one fn() (after one untimed call), from torch.profiler:
    [(name, stream, start_ns, end_ns)] in start order."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    out = [(_short_name(e.name()), e.device_resource_id(), e.start_ns(), e.start_ns() + e.duration_ns())
           for e in prof.profiler.kineto_results.events() if e.device_type() == torch.autograd.DeviceType.CUDA]
    return sorted(out, key=lambda x: x[2])


def _merged(spans):
    merged = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged


def union_ns(spans):
    """Length of the union of [start, end) spans."""
    return sum(end - start for start, end in _merged(spans))


def covered_ns(spans, by):
    """How much of the union of `spans` also lies in the union of `by`."""
    cover, i, total = _merged(by), 0, 0
    for start, end in _merged(spans):
        while i < len(cover) and cover[i][1] <= start:
            i += 1
        j = i
        while j < len(cover) and cover[j][0] < end:
            total += min(end, cover[j][1]) - max(start, cover[j][0])
            j += 1
    return total


@contextlib.contextmanager
def forced_route(route):
    """Every qr2 call inside goes to `route` where its kernel holds the shape (None: the route table). Set once,
    outside the timed calls: the switch costs host time."""
    import qr2_op

    qr2_op._force_config(route)
    try:
        yield
    finally:
        qr2_op._force_config(None)


def parse_shapes(text, default=None, sep=":"):
    """'batch:n' or 'batch:m:n', comma-separated (None: `default`) -> [(batch, m, n), ...]."""
    if not text:
        shapes = list(default or [])
    else:
        shapes = [tuple(int(v) for v in s.split(sep)) for s in text.split(",") if s.strip()]
    out = []
    for s in shapes:
        if len(s) == 2:
            s = (s[0], s[1], s[1])
        if len(s) != 3:
            raise ValueError(f"a shape is batch{sep}n or batch{sep}m{sep}n, not {sep.join(map(str, s))}")
        out.append(tuple(s))
    return out
