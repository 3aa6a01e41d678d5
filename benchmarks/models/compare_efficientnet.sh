#!/usr/bin/env bash
# EfficientNet-B4 training step, ours (models_bench BM_EfficientNetB4TrainStep, fused engine) vs
# PyTorch (torchvision efficientnet_b4, benchmarks/models/pytorch_efficientnet_step.py) on the
# same machine in the same command, 2 threads each, interleaved: batch 8 at 380x380 and batch 32
# at 32x32, f32 and bf16 (ours: bf16 policy; PyTorch: bf16 autocast).
#   benchmarks/models/compare_efficientnet.sh [BUILD_DIR]   (default: build)
#     REPS=n        interleaved repetitions (default 3); the ratio is the median of the
#                   per-repetition ratios
#     CONFIGS="380 8 0;32 32 0;380 8 1;32 32 1"   "hw batch bf16" triples to run
#     TORCH_STEPS=n timed PyTorch steps per repetition (default 5; 3 warm-up)
# Peer configuration per ../shared/docs/PEER.md (the team docs beside the checkout): Debian
# python3-torch, jemalloc preloaded, channels_last, 2 threads. Prints the host's ISA and load.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
source "$ROOT/benchmarks/models/compare_common.sh"
BENCH="$(compare_bench "${1:-$ROOT/build}")" || exit 1
export OMP_NUM_THREADS=2
REPS="${REPS:-3}"
TORCH_STEPS="${TORCH_STEPS:-5}"
IFS=';' read -r -a CONFIGS <<<"${CONFIGS:-380 8 0;32 32 0;380 8 1;32 32 1}"
TMP="$COMPARE_TMP"
compare_host "$OMP_NUM_THREADS"
for ((r = 0; r < REPS; ++r)); do
  for cfg in "${CONFIGS[@]}"; do
    read -r hw b bf <<<"$cfg"
    echo "== ours: ${hw}x${hw} batch $b $( ((bf)) && echo bf16 || echo f32), rep $r"
    "$BENCH" --benchmark_filter="^BM_EfficientNetB4TrainStep/hw:$hw/batch:$b/bf16:$bf/" \
      --benchmark_min_time=1 --benchmark_out="$TMP/ours_${hw}_${b}_${bf}_$r.json" \
      --benchmark_out_format=json >/dev/null || echo "   ours failed (rc $?; out of memory?)"
    echo "== pytorch: ${hw}x${hw} batch $b $( ((bf)) && echo 'bf16 autocast' || echo fp32), rep $r"
    peer /usr/bin/python3 "$ROOT/benchmarks/models/pytorch_efficientnet_step.py" --hw "$hw" \
      --batch "$b" --steps "$TORCH_STEPS" $( ((bf)) && echo --bf16) >"$TMP/torch_${hw}_${b}_${bf}_$r.json" ||
      echo "   pytorch failed"
  done
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"

/usr/bin/python3 - "$TMP" "$REPS" "${CONFIGS[@]}" <<'PY'
import json, statistics, sys
d, reps, configs = sys.argv[1], int(sys.argv[2]), [tuple(map(int, c.split())) for c in sys.argv[3:]]
def ours(path):
    try:  # a run killed for memory leaves a truncated file
        runs = json.load(open(path)).get("benchmarks", [])
        return runs[0] if runs else None
    except (OSError, ValueError):
        return None
def torch(path):
    try:
        return json.load(open(path))
    except (OSError, ValueError):
        return None
med = lambda xs: statistics.median(xs) if xs else None
f = lambda v, w=10, p=2: format(v, f"{w}.{p}f") if v is not None else format("-", f">{w}")
print(f"{'EfficientNet-B4 step':30s} {'ours img/s':>10s} {'GFLOP/s':>8s} {'peak GB':>8s} "
      f"{'torch img/s':>11s} {'peak GB':>8s} {'ratio':>7s}   (medians of {reps} interleaved "
      "repetitions; ratio = median of per-repetition ours/torch)")
for hw, b, bf in configs:
    o = [ours(f"{d}/ours_{hw}_{b}_{bf}_{r}.json") for r in range(reps)]
    t = [torch(f"{d}/torch_{hw}_{b}_{bf}_{r}.json") for r in range(reps)]
    ratios = [x["images/s"] / y["images_per_s"] for x, y in zip(o, t) if x and y]
    oi = [x["images/s"] for x in o if x]
    ti = [y["images_per_s"] for y in t if y]
    name = f"{hw}x{hw} batch {b} {'bf16' if bf else 'f32'}"
    print(f"{name:30s} {f(med(oi))} {f(med([x['GFLOP/s'] for x in o if x]), 8, 1)} "
          f"{f(max([x['peak_rss_GB'] for x in o if x], default=None), 8)} {f(med(ti), 11)} "
          f"{f(max([y['peak_rss_gb'] for y in t if y], default=None), 8)} {f(med(ratios), 7, 3)}")
    print("  per repetition (ours vs torch img/s): " + ", ".join(
        f"{x['images/s']:.2f} vs {y['images_per_s']:.2f}" if x and y else "failed"
        for x, y in zip(o, t)))
PY
