#!/usr/bin/env bash
# EfficientNet-B4 training step, ours (models_bench BM_EfficientNetB4TrainStep) vs PyTorch
# (pytorch_efficientnet_step.py), by ONE thread's CPU time per step, as compare_resnet50_cpu.sh
# does for ResNet-50: on a loaded shared host the CPU time a process spends is far less
# inflated than its wall time, so the ratio means something where the two-thread img/s of
# compare_efficientnet.sh does not. Ours: models_bench's cpu_time (after 3 warm-up steps) with
# MODELS_BENCH_THREADS=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive; PyTorch: --threads 1
# --cpu-time (median of its timed steps' process CPU time after 3 warm-up steps). Ratio =
# PyTorch / ours (> 1: ours faster), the median of the per-repetition ratios; each repetition
# runs ours (then BASELINE's) then PyTorch per workload.
#   REPS=3 CONFIGS="380 8 0;32 32 0;380 8 1;32 32 1" \
#     bash benchmarks/models/compare_efficientnet_cpu.sh [BUILD]
# CONFIGS: "hw batch bf16" triples (bf16 1: our bf16 policy against PyTorch's bf16 autocast).
# ISA=native (default: the host's own) or avx2, as compare_resnet50_cpu.sh. BASELINE=OTHER_BUILD
# also times OTHER_BUILD's models_bench in every repetition (a before / after of our side; it
# must honour MODELS_BENCH_THREADS). PYTORCH_STEPS (default 2 at 380, 10 below) sets PyTorch's
# timed steps.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
source "$ROOT/benchmarks/models/compare_common.sh"
ISA="${ISA:-native}"
compare_select_isa "${1:-}"
BENCH="$(compare_bench "$BUILD")" || exit 1
BASE_BENCH=""
[[ -n "${BASELINE:-}" ]] && { BASE_BENCH="$(compare_bench "$BASELINE")" || exit 1; }
export MODELS_BENCH_THREADS=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
compare_host 1
echo "ISA=$ISA, ours: $BENCH (IPU_MARCH=${MARCH:-?})${BASE_BENCH:+, before: $BASE_BENCH}"

REPS="${REPS:-3}"
IFS=';' read -r -a CONFIGS <<<"${CONFIGS:-380 8 0;32 32 0;380 8 1;32 32 1}"
run_ours() { # $1 = bench, $2 = out, $3 = hw, $4 = batch, $5 = bf16
  "$1" --benchmark_filter="^BM_EfficientNetB4TrainStep/hw:$3/batch:$4/bf16:$5/" \
    --benchmark_out="$2" --benchmark_out_format=json >/dev/null 2>&1 || echo "   $1 failed (rc $?)"
}
for ((r = 0; r < REPS; ++r)); do
  for cfg in "${CONFIGS[@]}"; do
    read -r hw b bf <<<"$cfg"
    steps="${PYTORCH_STEPS:-$( ((hw >= 224)) && echo 2 || echo 10)}"
    echo "== ${hw}x${hw} batch $b $( ((bf)) && echo bf16 || echo f32), rep $r (load $(cut -d' ' -f1 /proc/loadavg))"
    run_ours "$BENCH" "$COMPARE_TMP/ours_${hw}_${b}_${bf}_$r.json" "$hw" "$b" "$bf"
    [[ -n "$BASE_BENCH" ]] &&
      run_ours "$BASE_BENCH" "$COMPARE_TMP/base_${hw}_${b}_${bf}_$r.json" "$hw" "$b" "$bf"
    peer /usr/bin/python3 "$ROOT/benchmarks/models/pytorch_efficientnet_step.py" --hw "$hw" \
      --batch "$b" --threads 1 --cpu-time --steps "$steps" $( ((bf)) && echo --bf16) \
      >"$COMPARE_TMP/torch_${hw}_${b}_${bf}_$r.json" || echo "   pytorch failed"
  done
done

/usr/bin/python3 - "$COMPARE_TMP" "$REPS" "${CONFIGS[@]}" <<'PY'
import json, statistics, sys
d, reps, configs = sys.argv[1], int(sys.argv[2]), [tuple(map(int, c.split())) for c in sys.argv[3:]]
def ours_ms(path):
    try:
        runs = json.load(open(path)).get("benchmarks", [])
        return runs[0]["cpu_time"] if runs else None  # the benchmark's unit: ms
    except (OSError, ValueError):
        return None
def torch_ms(path):
    try:
        t = json.load(open(path))
        assert t["clock"] == "process_cpu"
        return 1e3 * t["median_s"]
    except (OSError, ValueError, KeyError):
        return None
med = lambda xs: statistics.median(xs) if xs else float("nan")
print("EfficientNet-B4 step, one thread's CPU time, ms per step (ratio = PyTorch / ours)")
for hw, b, bf in configs:
    key = f"{hw}_{b}_{bf}"
    o = [ours_ms(f"{d}/ours_{key}_{r}.json") for r in range(reps)]
    base = [ours_ms(f"{d}/base_{key}_{r}.json") for r in range(reps)]
    t = [torch_ms(f"{d}/torch_{key}_{r}.json") for r in range(reps)]
    ratios = [y / x for x, y in zip(o, t) if x and y]
    before = [y / x for x, y in zip(base, t) if x and y]
    name = f"{hw}x{hw} batch {b} {'bf16' if bf else 'f32'}"
    for r in range(reps):
        line = f"  {name} rep {r}: ours {o[r] or 0:9.1f}  PyTorch {t[r] or 0:9.1f}"
        if base[r]:
            line += f"  before {base[r]:9.1f}"
        print(line)
    print(f"{name}: ratio {med(ratios):.3f} (median of {len(ratios)}); ours "
          f"{med([x for x in o if x]):.1f} ms, PyTorch {med([x for x in t if x]):.1f} ms"
          + (f"; before: ratio {med(before):.3f}, {med([x for x in base if x]):.1f} ms"
             if before else ""))
PY
