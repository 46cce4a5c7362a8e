#!/usr/bin/env bash
# The whole test suite on a GPU machine in four pytest processes side by side, sharing the GPU (H200: about 4.5
# minutes, against more than one 10-minute device command in one process). One log per shard in $OUT (default
# ./out), then each shard's summary line and the total. Shards are whole files, grouped by their measured times; a
# test file not named below joins the third (shortest) shard.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
cd "$(dirname "$0")/.."
shards=(
  "test_policy test_compile test_reference test_c_api test_torch_abi test_readme test_repository"
  "test_builder test_registers test_quad test_warp test_launch"
  "test_blocked test_blocked_kernels test_extreme_values test_two_gpus"
  "test_linalg test_geqrf_op test_householder test_cuda_geqrf test_benchmark test_concurrency test_distributed test_fuzz"
)
named=" ${shards[*]} "
for f in tests/test_*.py; do
  name=$(basename "$f" .py)
  case "$named" in *" $name "*) ;; *) shards[2]+=" $name" ;; esac
done
start=$(date +%s)
# ONLY: the shards to run (e.g. "0 1"; default all), so that a suite can be split over commands: four shards side by
# side once held all of an H200's memory between them (two processes, 137 GiB) and the rest failed out of memory.
for i in ${ONLY:-"${!shards[@]}"}; do
  files=()
  for name in ${shards[$i]}; do files+=("tests/$name.py"); done
  (timeout "${SHARD_TIMEOUT:-560}" python3 -m pytest "${files[@]}" -q -rfE -p no:cacheprovider > "$OUT/suite_$i.log" 2>&1
   echo "shard $i: exit $? after $(( $(date +%s) - start )) s" >> "$OUT/suite_$i.log") &
done
wait
python3 - "$OUT" "${#shards[@]}" <<'PY'
import os
import re
import sys

out, count = sys.argv[1], int(sys.argv[2])
total = {}
for i in range(count):
    if not os.path.exists(f"{out}/suite_{i}.log"):  # not among ONLY
        continue
    lines = open(f"{out}/suite_{i}.log").read().splitlines()
    summary = next((l for l in reversed(lines) if re.search(r"\d+ (passed|failed|skipped|errors?)\b", l)),
                   "no summary line")
    print(f"shard {i}: {summary.strip('= ')} | {lines[-1] if lines else ''}")
    for line in lines:
        if line.startswith(("FAILED ", "ERROR ")):
            print("  " + line)
    for number, kind in re.findall(r"(\d+) (passed|failed|skipped|errors?)\b", summary):
        kind = "errors" if kind.startswith("error") else kind
        total[kind] = total.get(kind, 0) + int(number)
print("suite: " + ", ".join(f"{total.get(k, 0)} {k}" for k in ("passed", "failed", "errors", "skipped")))
PY
