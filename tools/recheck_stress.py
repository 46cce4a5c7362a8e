"""QR2's timed loop with the recheck, many repeats: every output checked, any failure diagnosed (development aid).

    python tools/recheck_stress.py [SETS,REPEATS,BATCH,M,N ...]     (default 6,60,20,32,32)

Each set draws 50 fresh random inputs, runs 20 unchecked repeats, then REPEATS repeats of 50 calls (L2 flush, outputs
of the previous repeat kept alive, a clock probe after the calls), checking every output against QR2's gates. A failing
output is compared with a fresh call on the same input (same bits: a wrong but deterministic result; different: a
race) and the input checked unchanged; the first failure is saved to $OUT/recheck_fail.pt.
"""
import os
import sys
import time

import torch

from timing import clear_l2_cache, clock_mhz  # also puts the repository root on sys.path

import qr2_op
from reference import check_implementation


def diagnose(rep, i, msg, A, A0, out):
    H, tau = out
    H2, tau2 = qr2_op.geqrf(A0)
    bad = (H.view(torch.int32) != H2.view(torch.int32)).nonzero()  # bits: NaN differs from anything
    tau_bits = int((tau.view(torch.int32) != tau2.view(torch.int32)).sum())
    print(f"repeat {rep} input {i}: {msg}; differs from a fresh call in {bad.shape[0]} entries of H (first "
          f"{bad[:8].tolist()}) and {tau_bits} of tau; input unchanged: {torch.equal(A, A0)}; the fresh call "
          f"passes: {check_implementation(A0, (H2, tau2))[0]}", flush=True)
    return {"A": A.cpu(), "H": H.cpu(), "tau": tau.cpu(), "H2": H2.cpu(), "tau2": tau2.cpu()}


SAVED = []  # the first failure of the whole run is saved


def one_set(repeats, b, m, n):
    inputs = [torch.randn(b, m, n, device="cuda") for _ in range(50)]
    originals = [A.clone() for A in inputs]
    outputs, failures, t0 = None, 0, time.time()
    for _ in range(20):
        torch.cuda.synchronize()
        outputs = [qr2_op.geqrf(A) for A in inputs]
    for rep in range(repeats):
        torch.cuda.synchronize()
        clear_l2_cache()
        new = [qr2_op.geqrf(A) for A in inputs]
        torch.cuda.synchronize()
        clock_mhz(20_000)  # a clock probe after the calls, as tools/host_path.py reads it
        for i, (A0, out) in enumerate(zip(originals, new)):
            ok, msg = check_implementation(A0, out)  # against the original, as QR2 checks
            if not ok:
                failures += 1
                saved = diagnose(rep, i, msg, inputs[i], A0, out)
                if not SAVED:
                    SAVED.append(saved)
                    torch.save(saved, os.path.join(os.environ.get("OUT", "."), "recheck_fail.pt"))
        outputs = new  # noqa: F841 (alive until the next repeat's calls return, as QR2 keeps them)
    print(f"{b}x{m}x{n} ({qr2_op.config_for(m, n, b)}): {repeats} repeats x 50 outputs checked, {failures} failures, "
          f"{time.time() - t0:.1f} s", flush=True)
    return failures


def main():
    total = 0
    for spec in sys.argv[1:] or ["6,60,20,32,32"]:
        sets, repeats, b, m, n = (int(v) for v in spec.split(","))
        for _ in range(sets):
            total += one_set(repeats, b, m, n)
    sys.exit(1 if total else 0)


if __name__ == "__main__":
    main()
