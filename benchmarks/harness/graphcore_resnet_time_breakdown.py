#!/usr/bin/env python3
"""Where the time of Graphcore's MLPerf Training v1.1 ResNet-50 runs goes, from their logs: the
steady-state epochs (median epoch time, the first excluded, times the epochs), the rest of the
training block (first epoch, checkpoints every 4 epochs, the last epoch's tail) and the
evaluation phase after it (Graphcore evaluates the saved checkpoints after training). A
comparison for the cost model's projection (docs/PERFORMANCE.md), never an input to it.

usage: graphcore_resnet_time_breakdown.py [SHARED_DIR]   (default: ../shared beside the repo)
"""
import json
import pathlib
import statistics
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
shared = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT.parent / "shared"
results = shared / "data" / "mlperf_training_v1.1" / "Graphcore" / "results"
if not results.is_dir():
    sys.exit(f"no Graphcore v1.1 results under {results}")


def events(path):
    for line in path.read_text().splitlines():
        if ":::MLLOG " in line:
            yield json.loads(line.split(":::MLLOG ", 1)[1])


print("pod  run  total_s  steady_epoch_s  epochs  steady_train_s  other_train_s  eval_phase_s"
      "  evals  first_eval_s  median_eval_s  median_gap_s")
for pod in (16, 64, 128, 256):
    for log in sorted((results / f"ipu-pod{pod}-TF1" / "resnet").glob("result_*.txt")):
        times = {}
        for e in events(log):
            times.setdefault(e["key"], []).append(e["time_ms"] / 1000)
        start, stop = times["run_start"][0], times["run_stop"][0]
        epochs = times["epoch_start"]
        steady = statistics.median(b - a for a, b in zip(epochs[1:], epochs[2:]))
        train = times["block_stop"][0] - start
        # The evaluation phase: one evaluation per saved checkpoint (eval_start to eval_stop)
        # and the gaps between them (restoring the next checkpoint).
        evals = [b - a for a, b in zip(times["eval_start"], times["eval_stop"])]
        gaps = [a - b for a, b in zip(times["eval_start"][1:], times["eval_stop"])]
        print(f"{pod:>3}  {log.stem[-1]:>3}  {stop - start:7.1f}  {steady:14.3f}  "
              f"{len(epochs):6d}  {steady * len(epochs):14.1f}  "
              f"{train - steady * len(epochs):13.1f}  {stop - start - train:12.1f}  "
              f"{len(evals):5d}  {evals[0]:12.2f}  {statistics.median(evals[1:]):13.3f}  "
              f"{statistics.median(gaps):12.3f}")
