#!/usr/bin/env bash
# One GPU-machine validation run: build for every target, the whole test suite, the QR2 leaderboard against
# torch.geqrf, the QR2 tests, orgqr/ormqr/qr against torch, a shape sweep, and a sanitizer pass. Logs and JSON go to
# $OUT.
# PART=1 runs the build, tests and leaderboard, PART=2 the build, sweeps (square, rectangular, small), sanitizers
# and host-path probe (PART=2 can outgrow one 10-minute device command: run its lines separately then); unset
# runs both.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
{ time python3 -m pip install -e . --no-build-isolation; } > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
grep real "$OUT/build.log"
if [ "${PART:-1}" = 1 ]; then
OUT="$OUT" bash tools/gpu_suite.sh 2>&1 | tee "$OUT/pytest.log" | tail -8
timeout 300 python3 benchmark.py --mode leaderboard --compare --max-repeats "${LB_REPEATS:-5}" --torch-max-repeats 2 \
  --json-out "$OUT/leaderboard.json" 2>&1 | tee "$OUT/leaderboard.log" | tail -24
timeout 120 python3 benchmark.py --mode test 2>&1 | tee "$OUT/test_mode.log" | tail -3
# orgqr, ormqr and qr2_op.qr against torch's operators
timeout 150 python3 tools/householder_times.py --reps 5 2>&1 | tee "$OUT/householder.log" | tail -16
fi
if [ "${PART:-2}" = 2 ]; then
sweep=()
for bn in 1:64 8:64 64:64 1:128 64:128 1:256 64:256 1:384 1:512 8:512 64:512 1:768 1:1024 8:1024 1:2048 8:2048; do
  sweep+=(--case "${bn%%:*},${bn##*:},1,dense,7")
done
timeout 200 python3 benchmark.py --mode benchmark --compare --max-repeats 3 --torch-max-repeats 1 "${sweep[@]}" \
  --json-out "$OUT/sweep.json" 2>&1 | tee "$OUT/sweep.log" | tail -22
# rectangular and very tall shapes against torch.geqrf (the README's rectangular table)
timeout 200 python3 tools/quick_times.py --reps 10 --torch-reps 3 --shapes \
  1:4096:64,1:4096:256,1:256:4096,1:64:4096,1:100000:32,1:32:100000,1:2048:512,1:512:2048,8:4096:128,1:1000:300,\
1:300:1000,100:1000:100,1:1500:1500,1:3001:3001,4:600:600,2:8192:1024,4:50000:64,2:16384:1024,1:20000:200 \
  > "$OUT/rectangular.log" 2>&1; tail -20 "$OUT/rectangular.log"
timeout 200 python3 tools/small_sweep.py --n 8:256:8 --batches 1,20,40,640 --json-out "$OUT/small_sweep.json" \
  > "$OUT/small_sweep.log" 2>&1; head -3 "$OUT/small_sweep.log"
timeout 60 python3 tools/graph_times.py --shapes 20:32:32,40:176:176,640:32:32,40:64:64,40:128:128,40:256:256,1:176:176 \
  > "$OUT/graph_times.log" 2>&1; cat "$OUT/graph_times.log"
timeout 90 compute-sanitizer --tool memcheck python3 tools/sanitize_smoke.py > "$OUT/memcheck.log" 2>&1; tail -2 "$OUT/memcheck.log"
timeout 90 compute-sanitizer --tool synccheck --kernel-name kns=quad_kernel python3 tools/sanitize_smoke.py --no-cluster \
  > "$OUT/synccheck.log" 2>&1; tail -2 "$OUT/synccheck.log"
for k in quad_kernel warp_kernel builder_kernel registers_kernel; do
  timeout 150 compute-sanitizer --tool racecheck --kernel-name kns=$k python3 tools/sanitize_smoke.py --no-cluster \
    > "$OUT/racecheck_$k.log" 2>&1
  tail -2 "$OUT/racecheck_$k.log"
done
timeout 150 python3 tools/host_path.py --json-out "$OUT/host_path.json" > "$OUT/host_path.log" 2>&1; grep "table route: graph" "$OUT/host_path.log"
timeout 120 python3 tools/recheck_stress.py > "$OUT/recheck_stress.log" 2>&1; tail -1 "$OUT/recheck_stress.log"
timeout 200 python3 tools/replay_ab.py > "$OUT/replay_ab.log" 2>&1; cat "$OUT/replay_ab.log"
fi
