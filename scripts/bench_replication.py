#!/usr/bin/env python3
"""Host time per training step of run_benchmark's resnet50/mini/POD4 preset (4 replicas of the
real ResNet-50 mini) in one process against `mpirun -np 2` (2 replicas per process), interleaved
repetitions, medians. The time per step is read from each run's MLLOG: (epoch_stop - epoch_start)
over the steps of the epoch.

    scripts/bench_replication.py --binary build/harness/run_benchmark --reps 5

R = 1..16 in one process at a fixed micro-batch: build/benchmarks/backend/replication_bench.
"""
import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile

TRAIN_SAMPLES = 1024  # 32 steps of the global batch below
GLOBAL_BATCH = 32  # resnet50/mini/POD4: 4 replicas x micro-batch 8


def ms_per_step(log):
    start = stop = None
    for line in log.read_text().splitlines():
        rec = json.loads(line.split(":::MLLOG ", 1)[1])
        if rec["key"] == "epoch_start" and start is None:
            start = rec["time_ms"]
        if rec["key"] == "epoch_stop" and stop is None:
            stop = rec["time_ms"]
    return (stop - start) / (TRAIN_SAMPLES // GLOBAL_BATCH)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", default="build/harness/run_benchmark")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1, help="OpenMP threads per replica")
    args = ap.parse_args()
    mpirun = shutil.which("mpirun")
    if not mpirun:
        sys.exit("mpirun not found: run scripts/setup.sh (Debian openmpi-bin)")
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="bench_replication_"))
    cfg = tmp / "config.json"
    cfg.write_text(json.dumps({"mini_train_samples": TRAIN_SAMPLES, "mini_eval_samples": 32,
                               "mini_target_accuracy": 0.99, "eval_period": 1}))
    common = [str(pathlib.Path(args.binary).resolve()), "--threads",
              str(args.threads), "--division", "open", "--pod-size", "4", "--max-epochs", "1",
              "--config", str(cfg)]
    mpi = [mpirun, "--oversubscribe", "-np", "2"]
    if os.geteuid() == 0:
        mpi.insert(1, "--allow-run-as-root")
    env = dict(os.environ, OMPI_MCA_btl="self,vader", OMPI_MCA_rmaps_base_oversubscribe="1")
    times = {"1 process": [], "mpirun -np 2": []}
    for rep in range(args.reps):
        for name, prefix in (("1 process", []), ("mpirun -np 2", mpi)):
            out = tmp / f"{name.replace(' ', '_')}_{rep}"
            r = subprocess.run([*prefix, *common, "--results-dir", str(out)], env=env,
                               capture_output=True, text=True)
            if r.returncode not in (0, 2):
                sys.exit(f"{name} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
            times[name].append(ms_per_step(next(out.rglob("result_0.txt"))))
    med = {k: statistics.median(v) for k, v in times.items()}
    for k, v in times.items():
        print(f"{k:14s} median {med[k]:.2f} ms/step  (runs: {', '.join(f'{x:.2f}' for x in v)})")
    print(f"ratio mpirun -np 2 / 1 process: {med['mpirun -np 2'] / med['1 process']:.2f}")
    shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
