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

workloads=()
for cfg in "${CONFIGS[@]}"; do
  read -r hw b bf <<<"$cfg"
  workloads+=("${hw}_${b}_${bf}=${hw}x${hw} batch $b $( ((bf)) && echo bf16 || echo f32)")
done
/usr/bin/python3 "$ROOT/benchmarks/models/cpu_time_summary.py" "$COMPARE_TMP" "$REPS" \
  "EfficientNet-B4 step" "${workloads[@]}"
