"""Host-path cost per call: where the microseconds of a small call go (run on a GPU machine).

Prints wall time per call (host issue rate, 20k calls) of the op and of reference points, then the GPU time
per call as the benchmark measures it (CUDA events around 50 back-to-back calls) and the kernel alone
(the same 50 calls replayed from a CUDA graph), and QR2's timed loop several ways, for the empty kernel and the table's
route: outputs dropped at once, outputs kept as QR2 keeps them (the previous repeat's alive during the next), kept with
QR2's recheck between repeats, kept with an idle sleep as long as the recheck, and the last two with the GPU kept busy
before the L2 flush; each with the SM clock read right after the calls. (The GPU slows down while it idles between
repeats: the recheck's cost to the next repeat is its idle time, not its work.)"""
import argparse
import json
import statistics
import time

import torch

from timing import graph_us, per_call_us, protocol_us, wall_us  # also puts the repository root on sys.path

import qr2_op
from reference import check_implementation


def protocol_rows(tag, inputs, rows, outputs_valid=True):
    """QR2's loop with outputs dropped, kept, kept and rechecked, and kept with an idle sleep as long as the recheck;
    the last two also with the GPU kept busy before the flush. outputs_valid=False (the empty kernel): the recheck
    runs for its time only."""

    def recheck(inputs, outputs):
        ok = [check_implementation(A, out)[0] for A, out in zip(inputs, outputs)]
        assert all(ok) or not outputs_valid, "an output failed QR2's checker"

    recheck(inputs, [qr2_op.geqrf(A) for A in inputs])  # once untimed: a first check sets up CUDA libraries
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    recheck(inputs, [qr2_op.geqrf(A) for A in inputs])
    torch.cuda.synchronize()
    idle_s = time.perf_counter() - t0

    def idle(_inputs, _outputs):
        time.sleep(idle_s)

    for label, keep, between, busy in (("outputs dropped", False, None, False), ("outputs kept", True, None, False),
                                       ("outputs kept, rechecked", True, recheck, False),
                                       (f"outputs kept, idle {idle_s * 1e3:.0f} ms", True, idle, False),
                                       ("outputs kept, rechecked, GPU busy before the flush", True, recheck, True),
                                       ("outputs kept, idle, GPU busy before the flush", True, idle, True)):
        mean, best, clock = protocol_us(qr2_op.geqrf, inputs, keep, between, busy)
        rows[f"{tag}: QR2 loop, {label} (mean)"] = mean
        rows[f"{tag}: QR2 loop, {label} (best)"] = best
        rows[f"{tag}: QR2 loop, {label} (SM MHz after the calls)"] = clock
    # torch's own ops in the same loop, same recheck between repeats (of qr2's outputs): what any op costs here
    ref = [qr2_op.geqrf(A) for A in inputs]
    for label, peer in (("torch.neg (one output)", torch.neg),
                        ("torch.aminmax(dim=-1) (two outputs, one kernel)", lambda A: torch.aminmax(A, dim=-1))):
        mean, best, _ = protocol_us(peer, inputs, True, lambda i, _o: recheck(i, ref), False)
        rows[f"{tag}: QR2 loop, rechecked, {label} (mean)"] = mean
        rows[f"{tag}: QR2 loop, rechecked, {label} (best)"] = best
    call_index_rows(tag, inputs, rows)


def call_index_rows(tag, inputs, rows):
    """Where the host time of a rechecked repeat goes: its first calls (cold after the recheck) against the rest, for
    qr2 (launches replayed from graphs, and plain) and for torch's own ops, with the same recheck between repeats."""
    ref = [qr2_op.geqrf(A) for A in inputs]

    def recheck(i, _o):
        check = [check_implementation(A, out)[0] for A, out in zip(i, ref)]
        assert len(check) == len(i)

    sizes = tuple(inputs[0].shape)
    strides = (sizes[-1] * sizes[-2], 1, sizes[-2])

    def two_empty(A):
        return (torch.empty_strided(sizes, strides, device=A.device), torch.empty(sizes[:-1], device=A.device))

    for label, fn, replay in (("qr2_op.geqrf", qr2_op.geqrf, True), ("qr2_op.geqrf, plain launches", qr2_op.geqrf, False),
                              ("torch.neg", torch.neg, True), ("two torch.empty_strided", two_empty, True),
                              ("torch.aminmax(dim=-1)", lambda A: torch.aminmax(A, dim=-1), True)):
        qr2_op._set_launch_replay(replay)
        host_ns = [[] for _ in inputs]
        mean, _, _ = protocol_us(fn, inputs, True, recheck, host_ns=host_ns)
        qr2_op._set_launch_replay(True)
        rows[f"{tag}: QR2 loop, rechecked, {label}: GPU time per call (mean)"] = mean
        per_index = [statistics.mean(t[5:]) / 1e3 for t in host_ns]
        rows[f"{tag}: QR2 loop, rechecked, {label}: host time of call 0"] = per_index[0]
        rows[f"{tag}: QR2 loop, rechecked, {label}: host time of calls 1-4 (mean)"] = statistics.mean(per_index[1:5])
        rows[f"{tag}: QR2 loop, rechecked, {label}: host time of calls 5-{len(inputs) - 1} (mean)"] = \
            statistics.mean(per_index[5:])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", default="20,32,32",
                   help="batch,m,n;... (QR2's loop rechecks 50 outputs a repeat: keep them small)")
    p.add_argument("--json-out")
    p.add_argument("--call-times-only", action="store_true",
                   help="only the host time of each call of QR2's rechecked loop, qr2 against torch's ops")
    args = p.parse_args()
    op = torch.ops.qr2.geqrf.default
    rows = {}
    dev = torch.device("cuda")
    x = torch.randn(20, 32, 32, device=dev)
    e0 = torch.empty(0, 32, 32, device=dev)
    rows["python loop (lambda: None)"] = wall_us(lambda: None)
    rows["torch.empty_strided 20x32x32"] = wall_us(lambda: torch.empty_strided((20, 32, 32), (1024, 1, 32), device=dev))
    rows["torch.neg 20x32x32 (alloc + launch)"] = wall_us(lambda: torch.neg(x))
    rows["op empty batch"] = wall_us(lambda: op(e0))
    rows["qr2_op.geqrf empty batch"] = wall_us(lambda: qr2_op.geqrf(e0))
    with torch.inference_mode():
        rows["op empty batch, inference_mode"] = wall_us(lambda: op(e0))
    for spec in args.shapes.split(";"):
        b, m, n = (int(v) for v in spec.split(","))
        A = torch.randn(b, m, n, device=dev)
        tag = f"b{b} {m}x{n}"
        if args.call_times_only:
            call_index_rows(tag, [torch.randn(b, m, n, device=dev) for _ in range(50)], rows)
            continue
        for route in ("empty_kernel", None):
            qr2_op._force_config(route)
            name = f"{tag} {route or 'table route'}"
            rows[f"{name}: wall"] = wall_us(lambda: op(A), calls=5000)
            rows[f"{name}: wall, qr2_op.geqrf"] = wall_us(lambda: qr2_op.geqrf(A), calls=5000)
            impl = torch.ops.qr2._geqrf_impl.default
            rows[f"{name}: wall, _geqrf_impl.default"] = wall_us(lambda: impl(A), calls=5000)
            rows[f"{name}: wall, _geqrf_impl.default._op"] = wall_us(lambda: impl._op(A), calls=5000)
            with torch.inference_mode():
                rows[f"{name}: wall, inference_mode"] = wall_us(lambda: op(A), calls=5000)
            # 50 back-to-back calls between CUDA events, and the same 50 replayed from a graph: best of 200 bursts
            rows[f"{name}: events"] = per_call_us(lambda: qr2_op.geqrf(A), calls=50, bursts=200, reduce=min, warmup=0)
            rows[f"{name}: graph replay (device only)"] = graph_us(lambda: op(A), calls=50, bursts=200, reduce=min)
        inputs = [torch.randn(b, m, n, device=dev) for _ in range(50)]
        for route in ("empty_kernel", None):
            qr2_op._force_config(route)
            protocol_rows(f"{tag} {route or 'table route'}", inputs, rows, outputs_valid=route is None)
        qr2_op._force_config(None)
    for k, v in rows.items():
        print(f"{v:9.2f} {'MHz' if 'MHz' in k else 'us '}  {k}")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
