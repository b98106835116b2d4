#!/usr/bin/env bash
# Builds what the GPU machine runs (it has no Go toolchain) and packs it into
# bin/gpu.tar.xz, which the device call carries and scripts/gpu-check.sh
# unpacks: the CLI and plugins, test binaries of the packages with GPU tests,
# and the benchmark programs. Binaries are stripped and compressed to fit
# the transfer limit.
#
#   scripts/build-gpu.sh [part ...]    parts: cli tests bench (default: all)
set -euo pipefail
cd "$(dirname "$0")/.."
export CGO_ENABLED=1 GOARCH=amd64
parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=(cli tests bench)
rm -rf bin/gpu bin/gpu.tar.xz
mkdir -p bin/gpu
strip=(-ldflags "-s -w")
for part in "${parts[@]}"; do
  case $part in
    cli)
      go build "${strip[@]}" -o bin/gpu/kcand ./cmd/kcand
      mkdir -p bin/gpu/plugins
      for p in qmm gemv mxfp4 fp8tc; do go build "${strip[@]}" -o "bin/gpu/plugins/$p" "./plugins/$p"; done
      (cd bin/gpu/plugins && sha256sum qmm gemv mxfp4 fp8tc > SHA256SUMS) ;;
    tests)
      for pkg in cuda plugins/qmm plugins/gemv host; do
        go test -c "${strip[@]}" -o "bin/gpu/$(basename "$pkg").test" "./$pkg"
      done ;;
    cudatest) go test -c "${strip[@]}" -o bin/gpu/cuda.test ./cuda ;;
    bench)
      for b in bench/*/; do
        [ -f "$b/main.go" ] && go build "${strip[@]}" -o "bin/gpu/$(basename "$b")" "./$b"
      done ;;
    *) echo "unknown part $part"; exit 2 ;;
  esac
done
tar -C bin -cJf bin/gpu.tar.xz gpu
ls -la bin/gpu bin/gpu.tar.xz
