#!/usr/bin/env bash
# One device run for block_columns_cluster3: build, placement times (kernels alone) against the routes it may replace,
# the small-matrix sweep past n 176, the full test suite. Logs under $OUT (<= 8 files).
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
{ time QR2_CUDA_ARCHS=90a python3 -m pip install -e . --no-build-isolation; } > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
grep real "$OUT/build.log"
shapes=1:256:64,40:256:64,1:256:128,40:256:128,40:256:176,40:200:96,40:256:48,132:256:128,640:256:128,640:256:64
shapes=$shapes,640:200:176,2000:256:256,2000:184:184,1000:200:200,40:176:176
for r in block_columns_cluster3 registers_cluster2 registers registers_many_small blocked_nb32 block_columns_cluster2; do
  timeout 50 python3 scripts/graph_times.py --shapes "$shapes" --route $r 2>&1 | tee -a "$OUT/graph.log"
done
timeout 120 python3 scripts/small_sweep.py --n 184:256:8 --batches 1,20,40,640 --routes block_columns_cluster3,registers_cluster2,blocked_nb32 \
  --json-out "$OUT/small_sweep.json" > "$OUT/small_sweep.log" 2>&1; tail -40 "$OUT/small_sweep.log"
timeout 270 python3 -m pytest tests -q -p no:cacheprovider 2>&1 | tee "$OUT/pytest.log" | tail -3
