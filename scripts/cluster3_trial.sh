#!/usr/bin/env bash
# One device run for the branch wip/block-cluster3: build, block_qr's tests, kernel times of the 3- and 4-block
# clusters against registers_cluster2 (CUDA-graph replay), memcheck on the new routes. Logs under $OUT (<= 8 files).
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
{ time QR2_CUDA_ARCHS=90a python3 -m pip install -e . --no-build-isolation; } > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
grep real "$OUT/build.log"
shapes=1:256:256,20:256:256,33:256:256,40:256:256,44:256:256,66:256:256,40:184:184,40:208:208,40:232:232,20:192:192,1:192:192,40:256:128,640:256:256
for r in block_columns_cluster3 block_columns_cluster4 registers_cluster2 blocked_nb32; do
  timeout 60 python3 scripts/graph_times.py --shapes "$shapes" --route $r 2>&1 | tee -a "$OUT/graph.log"
done
timeout 240 python3 -m pytest tests/test_block_qr.py -q -x -p no:cacheprovider 2>&1 | tee "$OUT/pytest_block_qr.log" | tail -4
timeout 120 compute-sanitizer --tool memcheck --kernel-name kns=block_qr python3 scripts/sanitize_smoke.py \
  > "$OUT/memcheck.log" 2>&1; tail -1 "$OUT/memcheck.log"
