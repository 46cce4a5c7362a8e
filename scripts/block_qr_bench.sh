#!/usr/bin/env bash
# Times block_qr.cu's kernel alone (cuda/bench/block_qr_bench.cu) for the working tree and for any other copies of
# the file given as arguments, in one run (development aid; device machine):
#   git show main:cuda/block_qr.cu > cuda/bench/baseline_block_qr.cuh   # here, before the device run
#   bash scripts/block_qr_bench.sh cuda/bench/baseline_block_qr.cuh       # there
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
F=(-gencode arch=compute_90a,code=sm_90a -O3 -std=c++17 -Icuda -Ic_api)
files=(cuda/block_qr.cu "$@")
for i in "${!files[@]}"; do
  nvcc "${F[@]}" -DBQ_FILE="\"$(realpath "${files[$i]}")\"" -DTAG="\"v$i\"" -o "/tmp/block_qr_bench_$i" \
    cuda/bench/block_qr_bench.cu > "$OUT/bench_build_$i.log" 2>&1 &
done
wait
for i in "${!files[@]}"; do
  echo "v$i = ${files[$i]}"
  timeout 60 "/tmp/block_qr_bench_$i" 2>&1 | tee "$OUT/bench_v$i.log"
done
