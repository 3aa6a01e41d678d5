#!/usr/bin/env bash
# ResNet-50 f32 training step, ours (models_bench) vs PyTorch, by ONE thread's CPU time per step:
# on a loaded shared host the CPU time a process spends is far less inflated than its wall time
# (which counts the time other jobs hold the core), so the ratio means something where the
# two-thread img/s of compare_resnet50.sh does not. Ours: models_bench's cpu_time (mean over its
# timed steps, after 3 warm-up steps) with MODELS_BENCH_THREADS=1 OMP_NUM_THREADS=1
# OMP_WAIT_POLICY=passive; PyTorch: pytorch_resnet50_step.py --threads 1 --cpu-time (median of
# its timed steps' process CPU time, after 3 warm-up steps). Ratio = PyTorch / ours (> 1: ours
# faster), the median of the per-repetition ratios; each repetition runs ours (then BASELINE's)
# then PyTorch per workload.
#   ISA=avx2 REPS=3 CONFIGS="224 8;32 32" bash benchmarks/models/compare_resnet50_cpu.sh [BUILD]
# ISA=avx2 (default) holds both sides to AVX2 exactly as compare_resnet50.sh does (oneDNN's
# ONEDNN_MAX_CPU_ISA, ATEN_CPU_CAPABILITY, OPENBLAS_CORETYPE; ours from build-avx2, built with
# -DIPU_MARCH=x86-64-v3); ISA=native uses the host's own (default build: build).
# BASELINE=OTHER_BUILD also times OTHER_BUILD's models_bench (e.g. a build of an earlier commit)
# in every repetition, for a before / after of our side. PYTORCH_STEPS (default 3 at 224, 10
# below) sets PyTorch's timed steps.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
source "$ROOT/benchmarks/models/compare_common.sh"
ISA="${ISA:-avx2}"
compare_select_isa "${1:-}"
BENCH="$(compare_bench "$BUILD")" || exit 1
BASE_BENCH=""
[[ -n "${BASELINE:-}" ]] && { BASE_BENCH="$(compare_bench "$BASELINE")" || exit 1; }
export MODELS_BENCH_THREADS=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
compare_host 1
echo "ISA=$ISA, ours: $BENCH (IPU_MARCH=${MARCH:-?})${BASE_BENCH:+, before: $BASE_BENCH}"

REPS="${REPS:-3}"
IFS=';' read -r -a CONFIGS <<<"${CONFIGS:-224 8;32 32}"
run_ours() { # $1 = bench, $2 = out, $3 = hw, $4 = batch
  "$1" --benchmark_filter="^BM_ResNet50TrainStep/hw:$3/batch:$4/" --benchmark_out="$2" \
    --benchmark_out_format=json >/dev/null 2>&1 || echo "   $1 failed (rc $?)"
}
for ((r = 0; r < REPS; ++r)); do
  for cfg in "${CONFIGS[@]}"; do
    read -r hw b <<<"$cfg"
    steps="${PYTORCH_STEPS:-$( ((hw >= 224)) && echo 3 || echo 10)}"
    echo "== ${hw}x${hw} batch $b, rep $r (load $(cut -d' ' -f1 /proc/loadavg))"
    run_ours "$BENCH" "$COMPARE_TMP/ours_${hw}_${b}_$r.json" "$hw" "$b"
    [[ -n "$BASE_BENCH" ]] && run_ours "$BASE_BENCH" "$COMPARE_TMP/base_${hw}_${b}_$r.json" "$hw" "$b"
    peer /usr/bin/python3 "$ROOT/benchmarks/models/pytorch_resnet50_step.py" --hw "$hw" \
      --batch "$b" --threads 1 --cpu-time --steps "$steps" >"$COMPARE_TMP/torch_${hw}_${b}_$r.json"
  done
done

workloads=()
for cfg in "${CONFIGS[@]}"; do
  read -r hw b <<<"$cfg"
  workloads+=("${hw}_${b}=${hw}x${hw} batch $b")
done
/usr/bin/python3 "$ROOT/benchmarks/models/cpu_time_summary.py" "$COMPARE_TMP" "$REPS" \
  "ResNet-50 f32 step" "${workloads[@]}"
