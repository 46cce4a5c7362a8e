#!/usr/bin/env bash
# Times the builder kernel (cuda/whole/builder.cu) alone (tools/bench/block_qr_bench.cu) for the working tree and for
# any other copies of the file given as arguments, in one run, on one block and on clusters of two and three
# (development aid; GPU machine). Each binary runs twice; the summary gives each version's best time per shape and
# its ratio to v0's.
#   git show main:cuda/whole/builder.cu > tools/bench/baseline_builder.cuh   # here, before the GPU run
#   bash tools/block_qr_bench.sh tools/bench/baseline_builder.cuh            # there
# BQ_CLUSTERS (default "1 2 3") picks the cluster sizes.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
F=(-gencode arch=compute_90a,code=sm_90a -O3 -std=c++17 -Icuda -Ic_api)
files=(cuda/whole/builder.cu "$@")
clusters=(${BQ_CLUSTERS:-1 2 3})
for cl in "${clusters[@]}"; do
  for i in "${!files[@]}"; do
    nvcc "${F[@]}" -DBQ_CLUSTER="$cl" -DBQ_FILE="\"$(realpath "${files[$i]}")\"" -DTAG="\"v${i}_c$cl\"" \
      -o "/tmp/block_qr_bench_${i}_$cl" tools/bench/block_qr_bench.cu > "$OUT/bench_build_${i}_$cl.log" 2>&1 &
  done
done
wait
for i in "${!files[@]}"; do echo "v$i = ${files[$i]}"; done | tee "$OUT/bench.log"
for cl in "${clusters[@]}"; do
  for rep in 1 2; do
    for i in "${!files[@]}"; do timeout 60 "/tmp/block_qr_bench_${i}_$cl" 2>&1 | tee -a "$OUT/bench.log"; done
  done
done > /dev/null
python3 - "$OUT/bench.log" <<'PY'
import collections, re, sys
best = collections.defaultdict(lambda: float("inf"))
shapes = []
for line in open(sys.argv[1]):
    m = re.match(r"v(\d+)_c(\d)\s+(\d+)x\s*(\d+)x(\d+)\s+([\d.]+) us", line)
    if not m:
        continue
    v, c, shape = int(m[1]), m[2], f"{m[3]}x{m[4]}x{m[5]}"
    best[(c, shape, v)] = min(best[(c, shape, v)], float(m[6]))
    if (c, shape) not in shapes:
        shapes.append((c, shape))
versions = sorted({k[2] for k in best})
for c, shape in shapes:
    base = best[(c, shape, 0)]
    cells = "".join(f"  v{v} {best[(c, shape, v)]:9.2f} ({best[(c, shape, v)] / base:.3f})" for v in versions)
    print(f"cluster {c} {shape:>12}{cells}")
PY
