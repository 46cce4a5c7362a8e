set -u -o pipefail
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
python3 -m pip install -e . --no-build-isolation > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
timeout 200 python3 benchmark.py --mode leaderboard --compare --max-repeats 5 --torch-max-repeats 2 --json-out $OUT/leaderboard.json 2>&1 | tee $OUT/leaderboard.log | tail -20
timeout 60 python3 benchmark.py --mode test 2>&1 | tee $OUT/test_mode.log | tail -2
timeout 200 python3 -m pytest tests -q -p no:cacheprovider 2>&1 | tee $OUT/pytest.log | tail -2
timeout 60 python3 scripts/host_path.py --shapes "20,32,32;40,176,176;1000,64,64" --json-out $OUT/host_path.json 2>&1 | tee $OUT/host_path.log | tail -12
timeout 60 compute-sanitizer --tool memcheck python3 scripts/sanitize_smoke.py > $OUT/memcheck.log 2>&1; tail -2 $OUT/memcheck.log
timeout 60 compute-sanitizer --tool racecheck --kernel-name regex:warp_qr python3 scripts/sanitize_smoke.py > $OUT/racecheck.log 2>&1; tail -2 $OUT/racecheck.log
