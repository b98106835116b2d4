#!/usr/bin/env bash
# Runs every GPU test and benchmark of kcand on a machine with an NVIDIA GPU,
# from binaries built elsewhere by scripts/build-gpu.sh (carry
# bin/gpu.tar.xz). Each stage logs to $OUT (or ./out); a summary comes last.
#
#   scripts/gpu-check.sh [stage ...]      default: every stage but mps
#   stages: cuda cudabench kernels probe plugins tune host hotpath mps
#   (probe: the read-bandwidth ceiling at the kernel benchmark's shapes)
#
# The mps stage starts an NVIDIA MPS control daemon with a private pipe
# directory (only processes given that directory use it), measures the
# remote path under it, and stops it again.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
[ -f bin/gpu.tar.xz ] && tar -C bin -xJf bin/gpu.tar.xz
export LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export KCAND_CACHE=/tmp/kcand-plans.json XDG_CACHE_HOME=/tmp/kcand-xdg PYTHONUNBUFFERED=1
export KCAND_TEST_PLUGIN_DIR=$PWD/bin/gpu/plugins
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(cuda cudabench kernels probe plugins tune host hotpath)
summary=()

STAGE_TIMEOUT=${STAGE_TIMEOUT:-150}
run() { # name, command...  (each stage is killed after $STAGE_TIMEOUT s)
  local name=$1; shift
  local start=$SECONDS
  echo "=== $name: $*"
  timeout -k 5 "$STAGE_TIMEOUT" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  tail -n 30 "$OUT/$name.log"
  summary+=("$(printf '%-12s rc=%-3s %4ss  %s' "$name" "$rc" "$((SECONDS-start))" "$(grep -E '^(ok|FAIL|PASS)$|^--- FAIL|SUMMARY:' "$OUT/$name.log" | tail -n 1)")")
}

nvidia-smi --query-gpu=name,driver_version,memory.used,clocks.sm --format=csv,noheader | tee "$OUT/gpu.txt"
for s in "${stages[@]}"; do
  case $s in
    cuda)      run cuda bin/gpu/cuda.test -test.count=1 -test.v ;;
    cudabench) run cudabench bin/gpu/cudabench ;;
    kernels)   run kernels python3 scripts/affine_kernels.py ${KERNEL_ARGS:-}
               run wave python3 scripts/wave_kernel.py ;;
    probe)     run probe python3 scripts/bwprobe.py ;;
    plugins)   run plugin-qmm bin/gpu/qmm.test -test.count=1 -test.v
               run plugin-gemv bin/gpu/gemv.test -test.count=1 -test.v ;;
    tune)      # the default policy, as make run tunes (token buckets)
               run tune-first bin/gpu/kcand tune --device cuda
               run tune-cached bin/gpu/kcand tune --device cuda
               # again with the plan cache gone but the kernel cache warm:
               # what tuning costs once a plugin's variants are compiled
               rm -f "$KCAND_CACHE"
               run tune-warm bin/gpu/kcand tune --device cuda
               # the same without keeping a layer's sample weights between
               # its token counts, to compare
               rm -f "$KCAND_CACHE"
               run tune-nokeep bin/gpu/kcand tune --device cuda --keep-sample-mb 0
               # every count on its own, from an empty plan cache: the keys
               # that shared a bucket's measurement are measured, to compare
               rm -f "$KCAND_CACHE"
               run tune-all bin/gpu/kcand tune --device cuda --all ;;
    host)      run host bin/gpu/host.test -test.count=1 -test.v -test.run 'GPU' ;;
    hotpath)   run hotpath bin/gpu/hotpath --plugin-dir bin/gpu/plugins --device cuda ;;
    mps)
      export CUDA_MPS_PIPE_DIRECTORY=/tmp/kcand-mps CUDA_MPS_LOG_DIRECTORY=/tmp/kcand-mps-log
      mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
      if nvidia-cuda-mps-control -d; then
        run hotpath-mps bin/gpu/hotpath --plugin-dir bin/gpu/plugins --device cuda
        echo quit | nvidia-cuda-mps-control
      else
        summary+=("mps          could not start the MPS control daemon")
      fi
      unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY ;;
    *) echo "unknown stage $s"; exit 2 ;;
  esac
done
echo
echo "SUMMARY"
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
# Only a few files come back from the device: pack the logs into one.
tar -C "$OUT" -czf "$OUT/logs.tar.gz" --exclude logs.tar.gz $(cd "$OUT" && ls *.log 2>/dev/null) && rm -f "$OUT"/*.log
