#!/usr/bin/env bash
# Builds and runs tools/bench/host_path_bench.cu against the installed torch and qr2_op/libqr2.so (build qr2 first).
set -euo pipefail
TORCH_LIB=$(python3 -c "import os, torch; print(os.path.join(os.path.dirname(torch.__file__), 'lib'))")
OUTBIN=${TMPDIR:-/tmp}/host_path_bench
nvcc -std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a -Ic_api -Icuda tools/bench/host_path_bench.cu \
  -o "$OUTBIN" -Lqr2_op -lqr2 -L"$TORCH_LIB" -ltorch_cpu -ltorch_cuda -lc10 -lcuda \
  -Xlinker -rpath="$PWD/qr2_op" -Xlinker -rpath="$TORCH_LIB"
"$OUTBIN"
