#!/usr/bin/python3
"""Runs datasets_bench (a plain timing program that prints JSON) behind the Google Benchmark
command line, so that nightly.sh can treat it like every other *_bench suite.

    datasets_gbench.py DATASETS_BENCH [--benchmark_list_tests] [--benchmark_filter=REGEX]
                       [--benchmark_repetitions=N] [--benchmark_out=FILE] [--images 200]
                       [--benchmark_out_format=json] [--benchmark_min_time=...]

Benchmarks: DatasetsDecode/<train|eval>/<reduced|full> (one thread, decode + augment of
--images synthetic photo-like JPEGs made by benchmarks/datasets/make_jpegs.py). Each of
datasets_bench's repeats becomes one Google Benchmark repetition whose real_time is the time
per image (so that a slower pipeline is a larger time, as everywhere else in the baseline).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAKE_JPEGS = os.path.join(REPO, "benchmarks", "datasets", "make_jpegs.py")
# (transform, reduced decode) pairs; name = DatasetsDecode/<transform>/<reduced|full>
CASES = [("train", True), ("eval", True), ("train", False)]


def case_name(transform, reduced):
    return f"DatasetsDecode/{transform}/{'reduced' if reduced else 'full'}"


def gbench_entries(name, doc, repetitions):
    """Google Benchmark 'iteration' entries (one per repeat) from datasets_bench's JSON."""
    rates = doc.get("runs")
    if not isinstance(rates, list) or not rates or not all(
            isinstance(r, (int, float)) and r > 0 for r in rates):
        raise ValueError(f"{name}: datasets_bench printed no positive 'runs' rates: {doc!r}")
    out = []
    for i, rate in enumerate(rates):
        ns_per_image = 1e9 / float(rate)
        out.append({"name": name, "run_name": name, "run_type": "iteration",
                    "repetitions": repetitions, "repetition_index": i, "threads": 1,
                    "iterations": int(doc.get("images", 0)), "real_time": ns_per_image,
                    "cpu_time": ns_per_image, "time_unit": "ns",
                    "items_per_second": float(rate)})
    return out


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bench", help="the datasets_bench executable")
    ap.add_argument("--benchmark_list_tests", nargs="?", const="true", default="false")
    ap.add_argument("--benchmark_filter", default=".")
    ap.add_argument("--benchmark_repetitions", type=int, default=1)
    ap.add_argument("--benchmark_out")
    ap.add_argument("--benchmark_out_format", default="json", choices=["json"])
    ap.add_argument("--benchmark_min_time", help="accepted and ignored (repeats are whole passes)")
    ap.add_argument("--images", type=int, default=200, help="synthetic JPEGs to decode (200)")
    return ap.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    selected = [c for c in CASES if re.search(args.benchmark_filter, case_name(*c))]
    if args.benchmark_list_tests in ("true", "1"):
        for c in selected:
            print(case_name(*c))
        return 0
    if not os.access(args.bench, os.X_OK):
        print(f"error: {args.bench}: not an executable (build the datasets_bench target)",
              file=sys.stderr)
        return 2
    if args.benchmark_repetitions < 1:
        print("error: --benchmark_repetitions must be >= 1", file=sys.stderr)
        return 2
    entries = []
    with tempfile.TemporaryDirectory(prefix="datasets_gbench_") as jpegs:
        subprocess.run([sys.executable, MAKE_JPEGS, jpegs, str(args.images)], check=True)
        for transform, reduced in selected:
            name = case_name(transform, reduced)
            cmd = [args.bench, "--dir", jpegs, "--repeats", str(args.benchmark_repetitions),
                   "--transform", transform, "--reduced", "1" if reduced else "0"]
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode != 0:
                print(f"error: {name}: {' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()}",
                      file=sys.stderr)
                return 1
            try:
                doc = json.loads(p.stdout)
                entries += gbench_entries(name, doc, args.benchmark_repetitions)
            except ValueError as exc:
                print(f"error: {name}: cannot read datasets_bench output: {exc}", file=sys.stderr)
                return 1
            med = doc.get("median_images_per_s")
            print(f"{name}: median {med} images/s over {args.benchmark_repetitions} repeats")
    report = {"context": {"date": datetime.datetime.now().astimezone().isoformat(),
                          "executable": args.bench, "adapter": os.path.basename(__file__),
                          "images": args.images},
              "benchmarks": entries}
    if args.benchmark_out:
        with open(args.benchmark_out, "w") as fh:
            json.dump(report, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
