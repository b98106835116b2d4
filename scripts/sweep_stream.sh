#!/usr/bin/env bash
# Development helper: affine_stream correctness, then a config sweep at the
# DESIGN.md shapes, best configs per case last. Run on the GPU machine.
#   scripts/sweep_stream.sh [tokens] [shapes]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
export XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/kcand-xdg} PYTHONUNBUFFERED=1
timeout 120 python3 scripts/affine_kernels.py --kernel stream --only correctness > "$OUT/corr.log" 2>&1
echo "correctness rc=$?: $(tail -n 2 "$OUT/corr.log" | head -n 1)"; grep -E "FAIL|rror" "$OUT/corr.log" | head -5
timeout 400 python3 scripts/affine_kernels.py --kernel stream ${EXTRA_KERNELS:-} --only bench --sweep --stream-sweep \
  --tokens "${1:-1,16}" --shapes "${2:-4096x14336,14336x4096,8192x28672,28672x8192}" > "$OUT/bench.log" 2>&1
echo "bench rc=$?"; grep -iE "error" "$OUT/bench.log" | head -5
python3 - "$OUT/bench.log" <<'PY'
import sys
allr = {}
for l in open(sys.argv[1]):
    if '|' not in l or 'torch' in l:
        continue
    head, rest = l.split('|', 1)
    h, f = head.split(), rest.split()
    key = f"{h[0]} t{h[1]} torch {h[2]}us"
    allr.setdefault(key, []).append((float(f[1]), f[0], f[2], f[3], l.rstrip().split('  ')[-1]))
for k, v in allr.items():
    v.sort()
    print(k)
    for us, kind, sp, bw, cfg in v[:4]:
        print(f"   {us:7.1f}us {sp}x {bw}TB/s {kind:7s} {cfg}")
PY
