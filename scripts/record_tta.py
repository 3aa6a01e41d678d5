#!/usr/bin/python3
"""Summarises time-to-accuracy runs (an MLPerf result package) into tta.json.

    record_tta.py [RESULTS_DIR ...] [--train-log LOG [--train-target 0.85]] -o OUT/tta.json
                  [--label mini]

Each run of a result package (run_benchmark's RESULTS_DIR) becomes one record named "<benchmark>/<system>[/<label>]" (plus "#<i>" when a
system has several runs) with status, converged, time_to_train_s, final_quality,
epochs_to_converge, samples_to_converge and modeled_time_to_train_s, so that
bench_regression.py can compare it against benchmarks/baseline/tta.json.
--train-log reads the stdout of harness/train_small_cnn (lines "epoch N: ... test accuracy A
... S s" and "trained N epochs in S s") as the record "small_cnn/fashion_mnist[/<label>]":
time to train = the training seconds it prints, final quality = the last test accuracy,
converged = that accuracy >= --train-target.
Exit status 1 when no run could be read (the file is still written, with the errors).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mlperf_results as mr  # noqa: E402


def rejudge(run, target):
    """Judges a run against TARGET instead of the benchmark's full-size target (our mini
    runs do not log quality_target): converged and epochs/samples to converge change."""
    reached = next((p for p in run.eval_curve if p.accuracy >= target), None)
    run.quality_target = target
    run.converged = (run.status == "success" and run.time_to_train_min is not None
                     and reached is not None)
    run.epochs_to_converge = reached.epoch if run.converged else None
    run.samples_to_converge = reached.samples if run.converged else None


def records(dirs, label=None, quality_target=None):
    runs, errors = [], []
    for d in dirs:
        pkg = mr.load_package(d)
        errors += [str(i) for i in pkg.issues if i.severity == "error"]
        groups = mr.group_runs(pkg.runs)
        for (org, system, bench), rs in sorted(groups.items()):
            for r in rs:
                if quality_target is not None:
                    rejudge(r, quality_target)
                name = f"{bench}/{system}" + (f"/{label}" if label else "")
                if len(rs) > 1:
                    name += f"#{r.run_index}"
                sec = lambda m: None if m is None else m * 60.0  # noqa: E731
                runs.append({
                    "name": name, "org": org, "system": system, "benchmark": bench,
                    "file": os.path.relpath(r.path, d), "status": r.status,
                    "converged": r.converged, "time_to_train_s": sec(r.time_to_train_min),
                    "modeled_time_to_train_s": sec(r.modeled_time_to_train_min),
                    "final_quality": r.final_quality, "quality_target": r.quality_target,
                    "epochs_to_converge": r.epochs_to_converge,
                    "samples_to_converge": r.samples_to_converge,
                    "global_batch_size": r.global_batch_size,
                    "issues": [str(i) for i in r.issues]})
                errors += [str(i) for i in r.issues if i.severity == "error"]
    return runs, errors


EPOCH_LINE = re.compile(r"^epoch (\d+): loss (\S+)\s+test accuracy ([0-9.]+)\s+([0-9.]+) s")
TRAINED_LINE = re.compile(r"^trained (\d+) epochs in ([0-9.]+) s")


def train_log_record(path, target, label=None):
    """One record from train_small_cnn's stdout, or (None, error)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError as exc:
        return None, f"{path}: cannot read the train_small_cnn log: {exc}"
    curve, trained = [], None
    for line in lines:
        m = EPOCH_LINE.match(line)
        if m:
            curve.append({"epoch": int(m.group(1)), "loss": float(m.group(2)),
                          "accuracy": float(m.group(3)), "seconds": float(m.group(4))})
        m = TRAINED_LINE.match(line)
        if m:
            trained = float(m.group(2))
    if not curve:
        return None, (f"{path}: no 'epoch N: loss L  test accuracy A  S s' line: not a "
                      f"train_small_cnn log, or the run died before its first epoch")
    diverged = any("diverged" in line for line in lines)
    final = curve[-1]["accuracy"]
    converged = trained is not None and not diverged and final >= target
    reached = [c["epoch"] for c in curve if c["accuracy"] >= target]
    name = "small_cnn/fashion_mnist" + (f"/{label}" if label else "")
    status = "success" if converged else ("diverged" if diverged else
                                          "aborted" if trained is None else "below_target")
    return {"name": name, "benchmark": "small_cnn", "file": os.path.basename(path),
            "status": status, "converged": converged,
            "time_to_train_s": trained if trained is not None
            else sum(c["seconds"] for c in curve),
            "modeled_time_to_train_s": None, "final_quality": final, "quality_target": target,
            "epochs_to_converge": reached[0] if reached else None, "eval_curve": curve,
            "issues": []}, None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dirs", nargs="*", metavar="RESULTS_DIR")
    ap.add_argument("--quality-target", type=float,
                    help="judge the RESULTS_DIR runs against this eval_accuracy (the mini "
                         "run's mini_target_accuracy) instead of the full-size target")
    ap.add_argument("--train-log", action="append", default=[],
                    help="stdout of harness/train_small_cnn (repeatable)")
    ap.add_argument("--train-target", type=float, default=0.85,
                    help="test accuracy the --train-log runs must reach (0.85)")
    ap.add_argument("-o", "--out", required=True, help="tta.json to write")
    ap.add_argument("--label", help="suffix for the record names (e.g. the scale)")
    args = ap.parse_args(argv)
    if not args.dirs and not args.train_log:
        ap.error("give at least one RESULTS_DIR or --train-log")
    runs, errors = records(args.dirs, args.label, args.quality_target)
    for log in args.train_log:
        rec, err = train_log_record(log, args.train_target, args.label)
        if rec:
            runs.append(rec)
        else:
            errors.append(err)
    doc = {"kind": "time_to_accuracy", "runs": runs, "errors": errors}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump(doc, fh, indent=1)
    for r in runs:
        t = "n/a" if r["time_to_train_s"] is None else f"{r['time_to_train_s']:.1f} s"
        print(f"tta: {r['name']}: {r['status']}, converged={r['converged']}, time to train {t}, "
              f"final quality {r['final_quality']}")
    for e in errors:
        print(f"tta: {e}", file=sys.stderr)
    return 0 if runs else 1


if __name__ == "__main__":
    sys.exit(main())
