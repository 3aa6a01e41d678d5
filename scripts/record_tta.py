#!/usr/bin/python3
"""Summarises time-to-accuracy runs (an MLPerf result package) into tta.json.

    record_tta.py RESULTS_DIR [RESULTS_DIR ...] -o OUT/tta.json [--label mini]

Each run becomes one record named "<benchmark>/<system>[/<label>]" (plus "#<i>" when a
system has several runs) with status, converged, time_to_train_s, final_quality,
epochs_to_converge, samples_to_converge and modeled_time_to_train_s, so that
bench_regression.py can compare it against benchmarks/baseline/tta.json.
Exit status 1 when no run could be read (the file is still written, with the errors).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mlperf_results as mr  # noqa: E402


def records(dirs, label=None):
    runs, errors = [], []
    for d in dirs:
        pkg = mr.load_package(d)
        errors += [str(i) for i in pkg.issues if i.severity == "error"]
        groups = mr.group_runs(pkg.runs)
        for (org, system, bench), rs in sorted(groups.items()):
            for r in rs:
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


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dirs", nargs="+", metavar="RESULTS_DIR")
    ap.add_argument("-o", "--out", required=True, help="tta.json to write")
    ap.add_argument("--label", help="suffix for the record names (e.g. the scale)")
    args = ap.parse_args(argv)
    runs, errors = records(args.dirs, args.label)
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
