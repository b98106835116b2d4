#!/usr/bin/env bash
# Runs every GPU test and benchmark of kcand on a machine with an NVIDIA GPU,
# from binaries built elsewhere by scripts/build-gpu.sh (carry bin/). Each
# stage logs to $OUT (or ./out) and the summary table comes last.
#
#   scripts/gpu-check.sh [stage ...]     default: every stage
#   stages: cuda cudabench kernels plugins tune hotpath faults
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export KCAND_CACHE=$OUT/plans.json XDG_CACHE_HOME=$OUT/xdg PYTHONUNBUFFERED=1
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(cuda cudabench kernels plugins tune hotpath faults)
summary=()

run() { # name, command...
  local name=$1; shift
  local start=$SECONDS
  echo "=== $name: $*"
  "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  tail -n 40 "$OUT/$name.log"
  summary+=("$(printf '%-10s rc=%-3s %4ss  %s' "$name" "$rc" "$((SECONDS-start))" "$(grep -E '^(ok|FAIL|PASS)|SUMMARY' "$OUT/$name.log" | tail -n 1)")")
}

[ -f bin/gpu.tar.xz ] && tar -C bin -xJf bin/gpu.tar.xz
nvidia-smi --query-gpu=name,driver_version,memory.used,clocks.sm --format=csv,noheader | tee "$OUT/gpu.txt"
for s in "${stages[@]}"; do
  case $s in
    cuda)      run cuda bin/gpu/cuda.test -test.count=1 -test.v ;;
    cudabench) run cudabench bin/gpu/cudabench ;;
    kernels)   run kernels python3 scripts/affine_kernels.py ;;
    plugins)   run plugin-qmm bin/gpu/qmm.test -test.count=1 -test.v
               run plugin-gemv bin/gpu/gemv.test -test.count=1 -test.v ;;
    tune)      run tune1 bin/gpu/kcand tune --device cuda --all
               run tune2 bin/gpu/kcand tune --device cuda ;;
    hotpath)   [ -x bin/gpu/hotpath ] && run hotpath bin/gpu/hotpath ;;
    faults)    run host bin/gpu/host.test -test.count=1 -test.v -test.run 'GPU' ;;
    *) echo "unknown stage $s"; exit 2 ;;
  esac
done
echo
echo "SUMMARY"
printf '%s\n' "${summary[@]}"
