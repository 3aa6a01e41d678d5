#!/usr/bin/env bash
# Closed-division package benchmark (not a CI test: about 40 minutes with 2 threads): five runs
# of the real ResNet-50 mini to the MLPerf closed target (0.759) in one results package, then the
# official package checker (--rcp-bypass: the RCPs are for ImageNet) and result summarizer on it.
# Prints each run's status, accuracy per evaluation and time, the checker's verdict and the
# summarizer's olympic mean. CI runs five real runs in the open division (shorter runs) instead.
# Usage: bash benchmarks/harness/resnet50_closed_package.sh [threads=2] [keep_dir]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN="${RUN_BENCHMARK:-$ROOT/build/harness/run_benchmark}"
PY="$ROOT/.venv/bin/python"
THREADS="${1:-2}"
WORK="${2:-$(mktemp -d)}"
mkdir -p "$WORK"
# The CI closed run's settings (micro-batch 8, SGD 0.012 by linear scaling from the preset's 0.05
# per 32): 12,800 images an epoch, evaluation at epoch 2 (offset 2) and at the last of 4 epochs
# on 2,000 test images (less noise than CI's 1,000).
cat >"$WORK/config.json" <<'JSON'
{"micro_batch_size": 8, "model_bn_span": 8, "sgd_opt_base_learning_rate": 0.012,
 "mini_train_samples": 12800, "mini_eval_samples": 2000, "mini_target_accuracy": 0.759,
 "eval_offset": 2}
JSON
start=$(date +%s)
set +e
"$BIN" --benchmark resnet50 --division closed --scale mini --pod-size 1 --threads "$THREADS" \
  --runs 5 --seed 21 --max-epochs 4 --config "$WORK/config.json" --results-dir "$WORK/results"
rc=$?
set -e
end=$(date +%s)
echo "== accuracy per evaluation =="
for log in "$WORK"/results/*/results/*/resnet/result_*.txt; do
  acc=$(grep -o '"key": "eval_accuracy", "value": [0-9.]*, .*"epoch_num": [0-9]*' "$log" |
    sed -E 's/.*"value": ([0-9.]+).*"epoch_num": ([0-9]+)/e\2=\1/' | tr '\n' ' ')
  status=$(grep -o '"key": "run_stop".*"status": "[a-z]*"' "$log" | grep -o '[a-z]*"$' | tr -d '"')
  echo "$(basename "$log"): $status $acc"
done
echo "wall time: $((end - start)) s, run_benchmark exit code $rc"
org="$(find "$WORK/results" -mindepth 1 -maxdepth 1 -type d | head -1)"
cd "$WORK"
# The package checker exits 0 even on errors: its verdict line is the answer.
echo "== package_checker =="
"$PY" -m mlperf_logging.package_checker "$org" training 4.0.0 --rcp-bypass >/dev/null 2>&1 || true
grep -h "PACKAGE CHECKER\|ERROR" "$WORK/package_checker.log" | tail -5
"$PY" -m mlperf_logging.result_summarizer "$org" training 4.0.0 -csv "$WORK/summary.csv" \
  >/dev/null 2>&1 || true
echo "== result_summarizer (minutes) =="
cat "$WORK/summary.csv"
