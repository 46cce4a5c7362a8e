"""Configurations forced on QR2 inputs, side by side (development aid; the scoreboard is benchmark.py): per case and
configuration, the median per-call time and QR2's check of the output. Where `quick_times.py` uses randn inputs,
this takes QR2's profiles (rank-deficient, mixed, ...), whose panels a CholeskyQR guard may send elsewhere.

    python tools/route_cases.py --routes policy,blocked_nb32 --cases 60:1024:2:nearrank,8:2048:1:dense [--rounds 2]

With several rounds the configurations alternate per case, in reverse order every other round (an A/B that a drift of
the GPU's clocks during the run does not favour); the first round checks each output and prints QR2's scaled
residuals.
"""
import argparse

import torch

from timing import forced_route, per_call_us  # also puts the repository root on sys.path

import qr2_op  # noqa: F401  (registers torch.ops.qr2)
from reference import check_implementation, generate_input


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--routes", required=True, help="configurations, comma-separated ('policy': the policy's pick)")
    ap.add_argument("--cases", required=True, help="batch:n:cond:profile, comma-separated")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    routes = args.routes.split(",")
    for rnd in range(args.rounds):
        for case in args.cases.split(","):
            batch, n, cond, profile = case.split(":")
            A = generate_input(int(batch), int(n), int(cond), args.seed, profile)
            for route in routes if rnd % 2 == 0 else routes[::-1]:
                with forced_route(None if route == "policy" else route):
                    if rnd == 0:  # the same bits every round: checked once
                        ok, message = check_implementation(A, torch.ops.qr2.geqrf(A))
                    us = per_call_us(torch.ops.qr2.geqrf, A, calls=1, bursts=args.reps, warmup=1 if rnd else 0)
                scaled = " ".join(w for w in message.replace(";", "").split() if w.startswith("scaled"))
                verdict = "-" if rnd else f"ok {scaled}" if ok else f"FAIL {message[:80]}"
                print(f"r{rnd} {batch}x{n} {profile:<13} {route:<26} {us:10.1f} us  {verdict}", flush=True)


if __name__ == "__main__":
    main()
