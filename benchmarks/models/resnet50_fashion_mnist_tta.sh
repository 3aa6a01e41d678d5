#!/usr/bin/env bash
# Mini convergence benchmark (not a CI test): the full ResNet-50 architecture trained on the real
# Fashion-MNIST (60,000 images an epoch, all 10,000 test images evaluated after every epoch)
# through the backend, until top-1 >= 0.90 or the epoch budget is spent. Prints the accuracy per
# epoch, the wall time and the epochs. The learning rate decays (poly power 2) to its end value
# over the epoch budget, so a shorter budget is a complete schedule, not a truncated one.
# Train-time augmentation: FLIP=1 flips images at random, PADDING=p translates them by up to p
# pixels. Off by default: in a 5-epoch budget both lowered the accuracy (docs/ARCHITECTURE.md).
# LR=x overrides the preset's SGD base learning rate; WEIGHT_DECAY=x the weight decay, 5e-4 here
# by default (an open-division change: with it the preset's 8-epoch schedule reached 0.90; the
# preset's closed-division 1e-4 was only tried in shorter schedules, best 0.8921).
# SEED=s sets run_benchmark's seed (default 1).
# Usage: bash benchmarks/models/resnet50_fashion_mnist_tta.sh [max_epochs=8] [threads=2]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN="${RUN_BENCHMARK:-$ROOT/build/harness/run_benchmark}"
MAX_EPOCHS="${1:-8}"
THREADS="${2:-2}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
cat >"$WORK/config.json" <<JSON
{"mini_train_samples": 0, "mini_eval_samples": 0, "mini_target_accuracy": 0.90,
 "eval_period": 1, "sgd_opt_learning_rate_decay_steps": $MAX_EPOCHS,
 "mini_augment_flip": $([[ "${FLIP:-0}" == 1 ]] && echo true || echo false),
 "mini_augment_padding": ${PADDING:-0}, "sgd_opt_weight_decay": ${WEIGHT_DECAY:-0.0005}${LR:+, \"sgd_opt_base_learning_rate\": $LR}}
JSON
start=$(date +%s)
set +e
"$BIN" --benchmark resnet50 --division open --scale mini --pod-size 1 --threads "$THREADS" \
  --max-epochs "$MAX_EPOCHS" --seed "${SEED:-1}" --config "$WORK/config.json" \
  --results-dir "$WORK/results"
rc=$?
set -e
end=$(date +%s)
log="$(find "$WORK/results" -name 'result_0.txt' | head -1)"
echo "== accuracy per epoch (10,000 test images) =="
grep -o '"key": "eval_accuracy", "value": [0-9.]*, .*"epoch_num": [0-9]*' "$log" |
  sed -E 's/.*"value": ([0-9.]+).*"epoch_num": ([0-9]+)/epoch \2: \1/'
echo "wall time: $((end - start)) s, exit code $rc (0: reached 0.90)"
exit "$rc"
