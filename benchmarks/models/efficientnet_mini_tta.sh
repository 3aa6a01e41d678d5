#!/usr/bin/env bash
# EfficientNet-B4 mini learning curve (not a CI test): ours (run_benchmark, the closed mini recipe
# of docs/rules/efficientnet_b4.md, POD1: batch 16, LR 0.001) and PyTorch with the same recipe
# (benchmarks/models/pytorch_efficientnet_mini.py --mini-recipe), one after the other, each on
# IMAGES Fashion-MNIST training images an epoch for EPOCHS epochs, scored on the first
# EVAL_IMAGES test images after every epoch. Prints both curves (accuracy vs samples), the wall
# and CPU time of each. Ours runs in the open division only to evaluate every epoch (closed
# evaluates every 4): every hyperparameter is the closed mini preset's.
# Usage: bash benchmarks/models/efficientnet_mini_tta.sh [images=1024] [epochs=6] [threads=1]
#        EVAL_IMAGES=1000 SKIP_TORCH=1 SKIP_OURS=1 as needed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN="${RUN_BENCHMARK:-$ROOT/build/harness/run_benchmark}"
IMAGES="${1:-1024}"
EPOCHS="${2:-6}"
THREADS="${3:-1}"
EVAL_IMAGES="${EVAL_IMAGES:-1000}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
echo "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores;" \
  "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"

if [[ "${SKIP_OURS:-0}" != 1 ]]; then
  # The mini target is not set here: a run stops at the preset's target, the curve goes on.
  echo "{\"mini_train_samples\": $IMAGES, \"mini_eval_samples\": $EVAL_IMAGES," \
    "\"eval_period\": 1, \"mini_target_accuracy\": 0.99}" >"$WORK/config.json"
  set +e
  /usr/bin/time -f "ours: wall %e s, CPU %U s user + %S s system" \
    "$BIN" --benchmark efficientnet_b4 --division open --scale mini --pod-size 1 \
    --threads "$THREADS" --max-epochs "$EPOCHS" --runs 1 --config "$WORK/config.json" \
    --results-dir "$WORK/results" >"$WORK/ours.out" 2>&1
  rc=$?
  set -e
  log="$(find "$WORK/results" -name 'result_0.txt' | head -1)"
  [[ -n "$log" ]] || { cat "$WORK/ours.out"; exit 1; }
  echo "== ours (run_benchmark), accuracy on $EVAL_IMAGES test images (exit $rc) =="
  grep -o '"key": "eval_accuracy", "value": [0-9.]*, .*"epoch_num": [0-9]*' "$log" |
    sed -E 's/.*"value": ([0-9.]+).*"epoch_num": ([0-9]+)/\2 \1/' |
    awk -v n="$IMAGES" '{ printf "epoch %d (%d samples): accuracy %s\n", $1, $1 * n, $2 }'
  tail -n 1 "$WORK/ours.out"
fi

if [[ "${SKIP_TORCH:-0}" != 1 ]]; then
  echo "== PyTorch (torchvision efficientnet_b4, the same recipe) =="
  /usr/bin/time -f "PyTorch: wall %e s, CPU %U s user + %S s system" \
    /usr/bin/python3 "$ROOT/benchmarks/models/pytorch_efficientnet_mini.py" --mini-recipe \
    --batch 16 --lr 0.001 --images "$IMAGES" --epochs "$EPOCHS" --eval-images "$EVAL_IMAGES" \
    2>&1 | grep -v '^step '
fi
