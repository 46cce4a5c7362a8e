#!/usr/bin/env bash
# compute-sanitizer over every kernel configuration (tools/sanitize_smoke.py): memcheck, racecheck, synccheck and
# initcheck, one summary line each; logs in $OUT (default ./out). TOOLS picks the tools (default all four), ONLY
# keeps the configurations whose name contains it (sanitize_smoke.py --only), ZERO_TAILS=1 only the calls with
# exactly zero trailing columns (--zero-tails), MAX_BATCH=N cuts every batch to N matrices (--max-batch, for
# racecheck's pace), TOOL_TIMEOUT bounds each tool's run in seconds (default 600), so that a part of the sweep fits a
# short GPU run. racecheck and synccheck skip the cluster kernels (--no-cluster): on the H200 with CUDA 13.0 the tool
# fails on them ("Internal Sanitizer Error: The Sanitizer failed to handle a hardware exception"); memcheck and
# initcheck run them.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
cd "$(dirname "$0")/.."
run() {  # name, compute-sanitizer options..., then the smoke script's options after --
    local name=$1; shift
    local tool=() smoke=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do tool+=("$1"); shift; done
    [ $# -gt 0 ] && shift && smoke=("$@")
    [ -n "${ONLY:-}" ] && smoke+=(--only "$ONLY")
    [ -n "${ZERO_TAILS:-}" ] && smoke+=(--zero-tails)
    [ -n "${MAX_BATCH:-}" ] && smoke+=(--max-batch "$MAX_BATCH")
    case " ${TOOLS:-memcheck initcheck synccheck racecheck} " in *" $name "*) ;; *) return 0 ;; esac
    timeout "${TOOL_TIMEOUT:-600}" compute-sanitizer "${tool[@]}" python3 tools/sanitize_smoke.py "${smoke[@]}" > "$OUT/sanitize_$name.log" 2>&1
    echo "$name: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|Internal Sanitizer Error' "$OUT/sanitize_$name.log" | tail -1)"
}
run memcheck --tool memcheck
run initcheck --tool initcheck
run synccheck --tool synccheck -- --no-cluster
run racecheck --tool racecheck --racecheck-report all -- --no-cluster
