set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
{ time python3 -m pip install -e . --no-build-isolation; } > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
grep real $OUT/build.log
timeout 150 python3 -m pytest tests/test_register_qr.py tests/test_warp_qr.py -q -x --timeout 120 -p no:cacheprovider 2>&1 | tee $OUT/pytest.log | tail -15
timeout 100 python3 benchmark.py --mode benchmark --max-repeats 5 --case 20,32,1,dense,43214 --case 40,176,1,dense,423011 --case 40,352,1,dense,123456 2>&1 | tee $OUT/bench.log | tail -12
timeout 150 python3 scripts/small_sweep.py --n 32:224:48 --batches 1,20,40,640 --no-torch --json-out $OUT/small.json 2>&1 | tee $OUT/small.log
