#!/usr/bin/env bash
# ResNet-50 training step, ours (models_bench, fused engine) vs PyTorch on the same machine in
# the same command, 2 threads each: batch 32 at 224x224, batch 8 at 224x224, batch 32 at 32x32.
# Prints img/s of both and the ratio (ours / PyTorch).
#   benchmarks/models/compare_resnet50.sh [BUILD_DIR]    (default: build)
# Peer configuration per /work/shared/docs/PEER.md: Debian python3-torch, jemalloc preloaded,
# channels_last, 2 threads, warm-up 3, median of 10.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD="${1:-$ROOT/build}"
BENCH="$BUILD/benchmarks/models/models_bench"
[[ -x "$BENCH" ]] || BENCH="$(find "$BUILD" -name models_bench -type f -perm -u+x | head -1)"
[[ -x "$BENCH" ]] || { echo "models_bench not found under $BUILD" >&2; exit 1; }
JEMALLOC=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2
[[ -f "$JEMALLOC" ]] || { echo "missing $JEMALLOC (apt-get install libjemalloc2)" >&2; exit 1; }
export OMP_NUM_THREADS=2
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

for cfg in "224 32" "224 8" "32 32"; do
  read -r hw b <<<"$cfg"
  echo "== ours: ${hw}x${hw} batch $b"
  "$BENCH" --benchmark_filter="hw:$hw/batch:$b/" --benchmark_out="$TMP/ours_${hw}_$b.json" \
    --benchmark_out_format=json >/dev/null || echo "   ours failed (rc $?; out of memory?)"
  echo "== pytorch: ${hw}x${hw} batch $b"
  LD_PRELOAD="$JEMALLOC" MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1 \
    /usr/bin/python3 "$ROOT/benchmarks/models/pytorch_resnet50_step.py" --hw "$hw" --batch "$b" \
    | tee "$TMP/torch_${hw}_$b.json"
done

/usr/bin/python3 - "$TMP" <<'PY'
import json, os, sys
d = sys.argv[1]
print(f"{'workload':30s} {'ours img/s':>11s} {'ours GFLOP/s':>13s} {'pytorch img/s':>14s} "
      f"{'ratio':>7s}")
for hw, b in ((224, 32), (224, 8), (32, 32)):
    t = json.load(open(f"{d}/torch_{hw}_{b}.json"))["images_per_s"]
    o = g = None
    path = f"{d}/ours_{hw}_{b}.json"
    try:  # a run killed for memory leaves a truncated file
        runs = json.load(open(path)).get("benchmarks", [])
        if runs:
            o, g = runs[0]["images/s"], runs[0]["GFLOP/s"]
    except (OSError, ValueError):
        pass
    name = f"ResNet-50 {hw}x{hw} batch {b}"
    if o is None:
        print(f"{name:30s} {'failed':>11s} {'-':>13s} {t:14.2f} {'-':>7s}")
    else:
        print(f"{name:30s} {o:11.2f} {g:13.1f} {t:14.2f} {o / t:7.3f}")
PY
