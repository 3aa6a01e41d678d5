#!/usr/bin/python3
"""Compares Google Benchmark JSON results (and time-to-accuracy records) against a baseline.

    bench_regression.py OLD NEW [--alpha 0.05] [--threshold 0.05] [--metric real_time]
                        [--json-out FILE] [--fail-on-missing]

OLD and NEW are each a Google Benchmark JSON file (written with
--benchmark_repetitions=N --benchmark_format=json or --benchmark_out) or a folder of them
(e.g. benchmarks/baseline/ and a nightly output folder).  A file named tta.json in a
folder holds time-to-accuracy records (see record_tta.py) and is compared separately.

Per benchmark the per-repetition "iteration" entries are compared (aggregates such as
_mean/_median are ignored) with a one-sided Mann-Whitney U test (H1: new slower than
old).  A benchmark is a REGRESSION when p < alpha AND the median slowed down by more than
threshold (relative).  A folder's run_manifest.json (written by nightly.sh) lists what crashed in that run; each
crash fails the comparison too ("regressions" in the JSON counts the real regressions only).
Exit status: 0 no regression, 1 regression or crash, 2 usage/input error.
"""
from __future__ import annotations

import argparse
import glob
import json
import math
import os
import statistics
import sys

TIME_UNITS_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}
AGGREGATE_SUFFIXES = ("_mean", "_median", "_stddev", "_cv", "_BigO", "_RMS")
TTA_FILE = "tta.json"
COMPARISON_FILE = "comparison.json"
RUN_MANIFEST = "run_manifest.json"
# JSON files in a run or baseline folder that are not Google Benchmark output.
NON_BENCH_FILES = {TTA_FILE, COMPARISON_FILE, "baseline_manifest.json", RUN_MANIFEST}


class InputError(Exception):
    pass


# --------------------------------------------------------------------------- loading
def load_gbench_file(path):
    """{name: {"times_ns": [...], "errors": [...], "file": path}} from one GB JSON file."""
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: cannot read Google Benchmark JSON: {exc}") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("benchmarks"), list):
        raise InputError(f"{path}: not a Google Benchmark JSON (no 'benchmarks' list)")
    out = {}
    for b in doc["benchmarks"]:
        if not isinstance(b, dict) or "name" not in b:
            continue
        run_type = b.get("run_type")
        if run_type == "aggregate" or (run_type is None and
                                       str(b["name"]).endswith(AGGREGATE_SUFFIXES)):
            continue
        name = b.get("run_name") or b["name"]
        ent = out.setdefault(name, {"times_ns": [], "cpu_ns": [], "errors": [],
                                    "file": path})
        if b.get("error_occurred"):
            ent["errors"].append(str(b.get("error_message", "error")))
            continue
        unit = TIME_UNITS_NS.get(b.get("time_unit", "ns"))
        if unit is None:
            raise InputError(f"{path}: {name}: unknown time_unit {b.get('time_unit')!r}")
        for key, dst in (("real_time", "times_ns"), ("cpu_time", "cpu_ns")):
            v = b.get(key)
            if isinstance(v, (int, float)) and math.isfinite(v):
                ent[dst].append(float(v) * unit)
    return out, doc.get("context", {})


def gbench_files(path):
    if os.path.isdir(path):
        return sorted(p for p in glob.glob(os.path.join(path, "*.json"))
                      if os.path.basename(p) not in NON_BENCH_FILES)
    if os.path.isfile(path):
        return [path]
    raise InputError(f"{path}: no such file or folder")


def load_files(path):
    """{file stem: {name: entry}} for every Google Benchmark file of one side."""
    out = {}
    for f in gbench_files(path):
        data, _ = load_gbench_file(f)
        out[os.path.splitext(os.path.basename(f))[0]] = data
    return out


def merge_sides(old_files, new_files):
    """Flattens both sides to {name: entry}. A name that more than one file of a side holds is
    prefixed with its file's stem on both sides (so that a suite missing from one
    side does not rename the other suites' benchmarks)."""
    clash = set()
    for files in (old_files, new_files):
        count = {}
        for data in files.values():
            for name in data:
                count[name] = count.get(name, 0) + 1
        clash |= {n for n, c in count.items() if c > 1}

    def flat(files):
        return {(f"{stem}:{name}" if name in clash else name): ent
                for stem, data in files.items() for name, ent in data.items()}
    return flat(old_files), flat(new_files)


def load_side(path):
    """Merges every Google Benchmark file of one side. Duplicate names get a file prefix."""
    return merge_sides(load_files(path), {})[0]


def load_crashes(path):
    """What the nightly run in folder PATH says crashed (run_manifest.json), or []."""
    p = os.path.join(path, RUN_MANIFEST) if os.path.isdir(path) else None
    if p is None or not os.path.exists(p):
        return []
    try:
        with open(p, encoding="utf-8") as fh:
            crashed = json.load(fh).get("crashed", [])
    except (OSError, ValueError, AttributeError) as exc:
        raise InputError(f"{p}: cannot read the run manifest: {exc}") from exc
    return [str(c) for c in crashed]


def load_tta(path):
    p = os.path.join(path, TTA_FILE) if os.path.isdir(path) else None
    if p is None or not os.path.exists(p):
        return None
    try:
        with open(p, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError) as exc:
        raise InputError(f"{p}: cannot read time-to-accuracy record: {exc}") from exc
    return {r["name"]: r for r in doc.get("runs", []) if isinstance(r, dict) and "name" in r}


# --------------------------------------------------------------------------- statistics
def mann_whitney_greater(new, old):
    """One-sided p-value for 'new is stochastically greater (slower) than old'."""
    if len(new) == 0 or len(old) == 0:
        return None
    if len(set(new) | set(old)) == 1:
        return 1.0  # all identical: no evidence of anything
    from scipy.stats import mannwhitneyu
    return float(mannwhitneyu(new, old, alternative="greater").pvalue)


def compare_benchmark(name, old, new, alpha, threshold, metric="times_ns", min_reps=3):
    row = {"name": name, "status": "ok", "old_median_ns": None, "new_median_ns": None,
           "change": None, "p_value": None, "n_old": 0, "n_new": 0, "message": ""}
    if old is None:
        row.update(status="new_only", message="only in the new run (no baseline)")
        row["n_new"] = len(new[metric])
        return row
    if new is None:
        row.update(status="missing", message="in the baseline but missing from the new run")
        row["n_old"] = len(old[metric])
        return row
    if new["errors"]:
        row.update(status="error", message="new run reported an error: " + new["errors"][0])
        return row
    a, b = old[metric], new[metric]
    row["n_old"], row["n_new"] = len(a), len(b)
    if not a or not b:
        row.update(status="insufficient", message="no timings on one side")
        return row
    mo, mn = statistics.median(a), statistics.median(b)
    row["old_median_ns"], row["new_median_ns"] = mo, mn
    row["change"] = (mn - mo) / mo if mo > 0 else None
    if len(a) < min_reps or len(b) < min_reps:
        row.update(status="insufficient",
                   message=f"need >= {min_reps} repetitions per side for the test "
                           f"(have {len(a)} and {len(b)})")
        return row
    p = mann_whitney_greater(b, a)
    row["p_value"] = p
    ch = row["change"]
    if p is not None and p < alpha and ch is not None and ch > threshold:
        row["status"] = "regression"
    elif ch is not None and ch < -threshold:
        p_faster = mann_whitney_greater(a, b)
        if p_faster is not None and p_faster < alpha:
            row["status"] = "improvement"
    return row


def compare_gbench(old_side, new_side, alpha=0.05, threshold=0.05, metric="times_ns",
                   min_reps=3):
    names = sorted(set(old_side) | set(new_side))
    return [compare_benchmark(n, old_side.get(n), new_side.get(n), alpha, threshold, metric,
                              min_reps) for n in names]


def compare_tta(old, new, time_threshold=0.25, quality_tolerance=0.01):
    """Convergence regressions: not converged, quality drop, much slower time to train."""
    rows = []
    for name in sorted(set(old or {}) | set(new or {})):
        o, n = (old or {}).get(name), (new or {}).get(name)
        row = {"name": name, "status": "ok", "old_time_s": None, "new_time_s": None,
               "old_quality": None, "new_quality": None, "message": ""}
        if o is None:
            row.update(status="new_only", message="only in the new run",
                       new_time_s=n.get("time_to_train_s"), new_quality=n.get("final_quality"))
            rows.append(row)
            continue
        if n is None:
            row.update(status="missing", message="in the baseline but missing from the new run")
            rows.append(row)
            continue
        row.update(old_time_s=o.get("time_to_train_s"), new_time_s=n.get("time_to_train_s"),
                   old_quality=o.get("final_quality"), new_quality=n.get("final_quality"))
        problems = []
        if o.get("converged") and not n.get("converged"):
            problems.append(f"did not converge (status {n.get('status')})")
        oq, nq = o.get("final_quality"), n.get("final_quality")
        if isinstance(oq, (int, float)) and isinstance(nq, (int, float)) \
                and nq < oq - quality_tolerance:
            problems.append(f"final quality {nq:.4f} < baseline {oq:.4f} - {quality_tolerance}")
        for key, label in (("time_to_train_s", "time to train"),
                           ("modeled_time_to_train_s", "modeled time to train"),
                           ("epochs_to_converge", "epochs to converge")):
            ov, nv = o.get(key), n.get(key)
            if isinstance(ov, (int, float)) and isinstance(nv, (int, float)) and ov > 0 \
                    and nv > ov * (1 + time_threshold):
                problems.append(f"{label} {nv:.4g} vs baseline {ov:.4g} "
                                f"(+{100 * (nv / ov - 1):.1f}% > {100 * time_threshold:.0f}%)")
        if problems:
            row.update(status="regression", message="; ".join(problems))
        rows.append(row)
    return rows


# --------------------------------------------------------------------------- output
def _fmt_time(ns):
    if ns is None:
        return ""
    for unit, f in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= f:
            return f"{ns / f:.4g} {unit}"
    return f"{ns:.4g} ns"


def render(rows, tta_rows, alpha, threshold, crashed=()):
    out = []
    if crashed:
        out += ["## CRASHED (the run lost these; their benchmarks show as missing)", ""]
        out += [f"* {c}" for c in crashed]
        out.append("")
    out += [f"## Benchmark regression check (Mann-Whitney U one-sided, alpha={alpha}, "
           f"threshold=+{100 * threshold:.1f}% on the median)", "",
           "| benchmark | status | old median | new median | change | p-value | reps old/new |"
           " note |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ch = "" if r["change"] is None else f"{100 * r['change']:+.1f}%"
        p = "" if r["p_value"] is None else f"{r['p_value']:.3g}"
        out.append(f"| {r['name']} | {r['status'].upper() if r['status'] == 'regression' else r['status']} | "
                   f"{_fmt_time(r['old_median_ns'])} | {_fmt_time(r['new_median_ns'])} | {ch} | "
                   f"{p} | {r['n_old']}/{r['n_new']} | {r['message']} |")
    if tta_rows:
        out += ["", "## Time-to-accuracy (mini runs)", "",
                "| run | status | old TTT (s) | new TTT (s) | old quality | new quality | note |",
                "|---|---|---|---|---|---|---|"]
        for r in tta_rows:
            f = lambda v, d=4: "" if not isinstance(v, (int, float)) else f"{v:.{d}g}"  # noqa
            out.append(f"| {r['name']} | {r['status']} | {f(r['old_time_s'])} | "
                       f"{f(r['new_time_s'])} | {f(r['old_quality'])} | {f(r['new_quality'])} |"
                       f" {r['message']} |")
    return "\n".join(out) + "\n"


def summary_lines(rows, tta_rows, crashed=()):
    lines = [f"CRASHED: {c}" for c in crashed]
    for r in rows:
        if r["status"] == "regression":
            lines.append(f"REGRESSION: {r['name']}: median {_fmt_time(r['old_median_ns'])} -> "
                         f"{_fmt_time(r['new_median_ns'])} ({100 * r['change']:+.1f}%), "
                         f"p={r['p_value']:.3g}")
        elif r["status"] in ("missing", "new_only", "error", "insufficient"):
            lines.append(f"{r['status'].upper()}: {r['name']}: {r['message']}")
    for r in tta_rows:
        if r["status"] == "regression":
            lines.append(f"CONVERGENCE REGRESSION: {r['name']}: {r['message']}")
        elif r["status"] in ("missing", "new_only"):
            lines.append(f"{r['status'].upper()}: {r['name']}: {r['message']}")
    return lines


def run(old_path, new_path, alpha=0.05, threshold=0.05, metric="real_time",
        fail_on_missing=False, tta_threshold=0.25, quality_tolerance=0.01, min_reps=3):
    """Returns the comparison document (dict). Raises InputError on unreadable input."""
    old_side, new_side = merge_sides(load_files(old_path), load_files(new_path))
    crashed = load_crashes(new_path)
    key = "times_ns" if metric == "real_time" else "cpu_ns"
    rows = compare_gbench(old_side, new_side, alpha, threshold, key, min_reps)
    old_tta, new_tta = load_tta(old_path), load_tta(new_path)
    tta_rows = compare_tta(old_tta, new_tta, tta_threshold, quality_tolerance) \
        if (old_tta or new_tta) else []
    failing = [r["name"] for r in rows if r["status"] == "regression"] + \
              [f"tta:{r['name']}" for r in tta_rows if r["status"] == "regression"]
    regressions = len(failing)
    if fail_on_missing:
        failing += [r["name"] for r in rows + tta_rows if r["status"] in ("missing", "error")]
    # A crash is a failure of its own: the figures it would have given are reported missing.
    failing += [f"crashed:{c}" for c in crashed]
    return {"status": "fail" if failing else "pass", "failing": failing,
            "regressions": regressions, "crashed": crashed,
            "baseline": os.path.abspath(old_path), "new": os.path.abspath(new_path),
            "alpha": alpha, "threshold": threshold, "metric": metric,
            "benchmarks": rows, "tta": tta_rows}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old", help="baseline: Google Benchmark JSON file or folder")
    ap.add_argument("new", help="new run: Google Benchmark JSON file or folder")
    ap.add_argument("--alpha", type=float, default=0.05, help="significance level (0.05)")
    ap.add_argument("--threshold", type=float, default=0.05,
                    help="relative median slowdown that counts (0.05 = 5%%)")
    ap.add_argument("--metric", choices=("real_time", "cpu_time"), default="real_time")
    ap.add_argument("--min-reps", type=int, default=3,
                    help="repetitions needed per side for the test (3)")
    ap.add_argument("--tta-threshold", type=float, default=0.25,
                    help="relative increase of time/epochs to train that counts (0.25)")
    ap.add_argument("--quality-tolerance", type=float, default=0.01,
                    help="absolute drop of final quality that counts (0.01)")
    ap.add_argument("--fail-on-missing", action="store_true",
                    help="also fail when a baseline benchmark is missing or errored")
    ap.add_argument("--json-out", metavar="FILE", help="write the comparison as JSON")
    args = ap.parse_args(argv)
    try:
        doc = run(args.old, args.new, args.alpha, args.threshold, args.metric,
                  args.fail_on_missing, args.tta_threshold, args.quality_tolerance,
                  args.min_reps)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(render(doc["benchmarks"], doc["tta"], args.alpha, args.threshold,
                            doc["crashed"]))
    lines = summary_lines(doc["benchmarks"], doc["tta"], doc["crashed"])
    verdict = (f"result: {doc['status'].upper()} ({len(doc['failing'])} failing, "
               f"{doc['regressions']} regressions, {len(doc['crashed'])} crashed, "
               f"{len(doc['benchmarks'])} benchmarks compared)")
    # The same lines close the Markdown (the job summary) and go to stderr (the job log).
    sys.stdout.write("\n## Result\n\n" + "".join(f"* {x}\n" for x in lines + [verdict]))
    for line in lines:
        print(line, file=sys.stderr)
    if args.json_out:
        os.makedirs(os.path.dirname(os.path.abspath(args.json_out)), exist_ok=True)
        with open(args.json_out, "w") as fh:
            json.dump(doc, fh, indent=1)
    print(verdict, file=sys.stderr)
    return 1 if doc["status"] == "fail" else 0


if __name__ == "__main__":
    sys.exit(main())
