"""Host-path cost per call (no kernel launched): where the microseconds of a small call go."""
import time

import torch

import qr2_op  # noqa: F401


def per_call(fn, calls=5000):
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


empty = torch.empty(0, 32, 32, device="cuda")
small = torch.randn(20, 32, 32, device="cuda")
op = torch.ops.qr2.geqrf.default
rows = [
    ("torch.empty_like (baseline alloc)", lambda: torch.empty_like(small)),
    ("qr2 empty batch (autograd key: python kernel)", lambda: op(empty)),
    ("qr2 b20 n32 (launch included)", lambda: op(small)),
]
with torch.inference_mode():
    rows += [("qr2 empty batch, inference_mode (no autograd)", lambda: op(empty)),
             ("qr2 b20 n32, inference_mode", lambda: op(small))]
    for name, fn in rows[-2:]:
        print(f"{per_call(fn):8.2f} us  {name}")
for name, fn in rows[:3]:
    print(f"{per_call(fn):8.2f} us  {name}")
