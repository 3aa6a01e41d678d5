#!/usr/bin/env bash
# ResNet-50 f32 training step, ours (models_bench) vs PyTorch, by ONE thread's CPU time per step:
# on a loaded shared host the CPU time a process spends is far less inflated than its wall time
# (which counts the time other jobs hold the core), so the ratio means something where the
# two-thread img/s of compare_resnet50.sh does not. Ours: models_bench's cpu_time (mean over its
# timed steps, after 3 warm-up steps) with MODELS_BENCH_THREADS=1 OMP_NUM_THREADS=1
# OMP_WAIT_POLICY=passive; PyTorch: pytorch_resnet50_step.py --threads 1, mean_cpu_s
# (time.process_time around each step, same warm-up). Ratio = PyTorch / ours (> 1: ours faster),
# the median of the per-repetition ratios; each repetition runs ours then PyTorch per workload.
#   ISA=avx2 REPS=3 CONFIGS="224 8;32 32" bash benchmarks/models/compare_resnet50_cpu.sh [BUILD]
# ISA=avx2 (default) holds both sides to AVX2 exactly as compare_resnet50.sh does (oneDNN's
# ONEDNN_MAX_CPU_ISA, ATEN_CPU_CAPABILITY, OPENBLAS_CORETYPE; ours from build-avx2, built with
# -DIPU_MARCH=x86-64-v3); ISA=native uses the host's own (default build: build).
# PYTORCH_STEPS (default 3 at 224, 10 below) sets the PyTorch timed steps.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
ISA="${ISA:-avx2}"
case "$ISA" in
  native) BUILD="${1:-$ROOT/build}" ;;
  avx2)
    BUILD="${1:-$ROOT/build-avx2}"
    export ONEDNN_MAX_CPU_ISA=AVX2 DNNL_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 \
      OPENBLAS_CORETYPE=Haswell
    ;;
  *) echo "ISA=$ISA: expected 'avx2' or 'native'" >&2; exit 1 ;;
esac
MARCH="$(sed -n 's/^IPU_MARCH:[A-Z]*=//p' "$BUILD/CMakeCache.txt" 2>/dev/null)"
if [[ "$ISA" == avx2 && "$MARCH" != x86-64-v3 ]]; then
  echo "ISA=avx2 needs a build with -DIPU_MARCH=x86-64-v3; $BUILD has IPU_MARCH='${MARCH:-?}'" >&2
  exit 1
fi
BENCH="$BUILD/benchmarks/models/models_bench"
[[ -x "$BENCH" ]] || { echo "models_bench not found under $BUILD (ninja -C $BUILD models_bench)" >&2; exit 1; }
JEMALLOC=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2
[[ -f "$JEMALLOC" ]] || { echo "missing $JEMALLOC (apt-get install libjemalloc2)" >&2; exit 1; }
export MODELS_BENCH_THREADS=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
echo "ISA=$ISA, ours: $BENCH (IPU_MARCH=${MARCH:-?}), one thread each"

REPS="${REPS:-3}"
IFS=';' read -r -a CONFIGS <<<"${CONFIGS:-224 8;32 32}"
for ((r = 0; r < REPS; ++r)); do
  for cfg in "${CONFIGS[@]}"; do
    read -r hw b <<<"$cfg"
    steps="${PYTORCH_STEPS:-$( ((hw >= 224)) && echo 3 || echo 10)}"
    echo "== ${hw}x${hw} batch $b, rep $r (load $(cut -d' ' -f1 /proc/loadavg))"
    "$BENCH" --benchmark_filter="^BM_ResNet50TrainStep/hw:$hw/batch:$b/" \
      --benchmark_out="$TMP/ours_${hw}_${b}_$r.json" --benchmark_out_format=json >/dev/null 2>&1 ||
      echo "   ours failed (rc $?)"
    LD_PRELOAD="$JEMALLOC" MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1 \
      /usr/bin/python3 "$ROOT/benchmarks/models/pytorch_resnet50_step.py" --hw "$hw" --batch "$b" \
      --threads 1 --steps "$steps" >"$TMP/torch_${hw}_${b}_$r.json"
  done
done

/usr/bin/python3 - "$TMP" "$REPS" "${CONFIGS[@]}" <<'PY'
import json, statistics, sys
d, reps, configs = sys.argv[1], int(sys.argv[2]), [tuple(map(int, c.split())) for c in sys.argv[3:]]
def ours_ms(path):
    try:
        runs = json.load(open(path)).get("benchmarks", [])
        return runs[0]["cpu_time"] if runs else None  # the benchmark's unit: ms
    except (OSError, ValueError):
        return None
print("ResNet-50 f32 step, one thread's CPU time, ms per step (ratio = PyTorch / ours)")
for hw, b in configs:
    o = [ours_ms(f"{d}/ours_{hw}_{b}_{r}.json") for r in range(reps)]
    t = [1e3 * json.load(open(f"{d}/torch_{hw}_{b}_{r}.json"))["mean_cpu_s"] for r in range(reps)]
    ratios = [y / x for x, y in zip(o, t) if x]
    for r in range(reps):
        print(f"  {hw}x{hw} batch {b} rep {r}: ours {o[r] if o[r] else 0:9.1f}  PyTorch {t[r]:9.1f}"
              f"  ratio {(t[r] / o[r]) if o[r] else 0:6.3f}")
    print(f"{hw}x{hw} batch {b}: median ratio "
          f"{statistics.median(ratios) if ratios else float('nan'):.3f} over {len(ratios)} "
          f"repetition(s); ours median {statistics.median([x for x in o if x] or [0]):.1f} ms, "
          f"PyTorch median {statistics.median(t):.1f} ms")
PY
