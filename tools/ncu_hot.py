"""Summarise an Nsight Compute source page (ncu -i R --page source --csv --print-source sass): the SASS
instructions with the most warp stall samples, each with its top stall reasons (development aid).

    python tools/ncu_hot.py page.csv [--top 60]
"""
import argparse
import csv


def num(s):
    try:
        return float(s.replace(",", ""))
    except ValueError:
        return 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=60)
    args = ap.parse_args()
    with open(args.csv, newline="") as f:
        rows = [r for r in csv.reader(f)]
    start = next(i for i, r in enumerate(rows) if any("Source" == c or "Address" in c for c in r))
    head, body = rows[start], [r for r in rows[start + 1:] if len(r) == len(rows[start])]
    col = {h: i for i, h in enumerate(head)}
    cands = [h for h in head if "Sampling" in h and "All" in h] or [h for h in head if "Sampling" in h]
    if not cands:
        print(head, body[:5], sep="\n")
        return
    samples = cands[0]
    stalls = [h for h in head if h.startswith("stall_") or (h.startswith("Warp Stall Sampling") and h != samples
                                                           and "Not-issued" not in h and "All" not in h)]
    execd = next((h for h in head if h.startswith("Instructions Executed")), None)
    total = sum(num(r[col[samples]]) for r in body) or 1.0
    print(f"columns: {head}")
    print(f"total samples {total:.0f}; instructions executed {sum(num(r[col[execd]]) for r in body) if execd else '?'}")
    ranked = sorted(body, key=lambda r: -num(r[col[samples]]))
    for r in ranked[: args.top]:
        reasons = sorted(((num(r[col[h]]), h) for h in stalls), reverse=True)[:3]
        why = ", ".join(f"{h.replace('stall_', '')}={v:.0f}" for v, h in reasons if v > 0)
        addr = r[col["Address"]] if "Address" in col else ""
        print(f"{num(r[col[samples]]) / total * 100:5.1f}% {addr:>6} exec={r[col[execd]] if execd else '':>8} "
              f"{r[col.get('Source', 0)][:70]:<70} {why}")


if __name__ == "__main__":
    main()
