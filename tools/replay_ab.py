"""Graph replay on and off (cuda/launch.cu), interleaved in one process: host time per call (5,000 calls), device
time per call (calls queued behind a busy GPU) and QR2's timed loop with its recheck, for the table's route and the
empty kernel (GPU machine)."""
import statistics
import sys

import torch

from timing import protocol_us, wall_us  # also puts the repository root on sys.path

import qr2_op
from reference import check_implementation

shape = tuple(int(v) for v in (sys.argv[1] if len(sys.argv) > 1 else "20,32,32").split(","))
inputs = [torch.randn(*shape, device="cuda") for _ in range(50)]
A = inputs[0]


def recheck(ins, outs):
    for X, out in zip(ins, outs):
        check_implementation(X, out)


rows = {}
for rnd in range(3):
    for route in (None, "empty_kernel"):
        qr2_op._force_config(route)
        for on in (True, False):
            qr2_op._set_launch_replay(on)
            tag = f"{'table' if route is None else 'empty'} replay={'on' if on else 'off'}"
            rows.setdefault(f"{tag}: host wall", []).append(wall_us(lambda: qr2_op.geqrf(A), calls=5000))
            busy = protocol_us(qr2_op.geqrf, inputs, True, None, busy_before_flush=True, reps=10)[0]
            rows.setdefault(f"{tag}: device per call (GPU busy first)", []).append(busy)
            loop = protocol_us(qr2_op.geqrf, inputs, True, recheck, reps=25)[0]
            rows.setdefault(f"{tag}: QR2 loop rechecked", []).append(loop)
qr2_op._force_config(None)
qr2_op._set_launch_replay(True)
print(f"shape {shape}, 3 interleaved rounds (median, then each round)")
for k, v in rows.items():
    print(f"{statistics.median(v):8.2f} us  {k}   " + " ".join(f"{x:.2f}" for x in v))
