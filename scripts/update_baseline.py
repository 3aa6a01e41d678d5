#!/usr/bin/python3
"""Deliberately records a nightly run as the new performance baseline.

    update_baseline.py RUN_DIR [--baseline benchmarks/baseline] [--only NAME.json ...]
                       [--prune] [--force] [--dry-run]

Copies the Google Benchmark JSON files (and tta.json) of RUN_DIR (a scripts/nightly.sh
output folder) into the baseline folder and writes baseline_manifest.json and README.md
(how, when and where it was recorded; --note adds a line) there.  The lead then reviews and
commits benchmarks/baseline/.

Refuses (exit 1) unless --force when:
  * RUN_DIR/comparison.json says the run FAILED its comparison (a regression must not
    silently become the new normal);
  * a benchmark in the run reported an error, or a time-to-accuracy run did not converge;
  * the run crashed a suite (run_manifest.json lists crashes).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_regression as br  # noqa: E402

DEFAULT_BASELINE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "benchmarks", "baseline")


def _read_json(path):
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def check_run(run_dir, only=None):
    """Returns (files_to_copy, refusals, warnings)."""
    refusals, warnings = [], []
    files = br.gbench_files(run_dir)
    if only:
        files = [f for f in files if os.path.basename(f) in only]
    for f in files:
        try:
            data, _ = br.load_gbench_file(f)
        except br.InputError as exc:
            refusals.append(str(exc))
            continue
        for name, ent in data.items():
            if ent["errors"]:
                refusals.append(f"{os.path.basename(f)}: {name} reported an error: "
                                f"{ent['errors'][0]}")
            elif len(ent["times_ns"]) < 3:
                warnings.append(f"{os.path.basename(f)}: {name} has only "
                                f"{len(ent['times_ns'])} repetition(s); the statistical test "
                                f"needs >= 3 (use --benchmark_repetitions)")
    tta = os.path.join(run_dir, br.TTA_FILE)
    if os.path.exists(tta) and (not only or br.TTA_FILE in only):
        doc = _read_json(tta)
        if doc is None:
            refusals.append(f"{tta}: unreadable")
        else:
            for r in doc.get("runs", []):
                if not r.get("converged"):
                    refusals.append(f"tta: {r.get('name')} did not converge "
                                    f"(status {r.get('status')})")
            files.append(tta)
    comp = _read_json(os.path.join(run_dir, br.COMPARISON_FILE))
    if comp is None:
        warnings.append("the run has no comparison.json (it was never compared with a "
                        "baseline)")
    elif comp.get("status") == "fail":
        refusals.append("the run FAILED its comparison against the baseline: "
                        + ", ".join(comp.get("failing", [])))
    man = _read_json(os.path.join(run_dir, "run_manifest.json"))
    if man and man.get("crashed"):
        refusals.append("the run had crashes: " + ", ".join(man["crashed"]))
    if not files:
        refusals.append(f"{run_dir}: no Google Benchmark JSON or tta.json to record")
    return files, refusals, warnings


def machine():
    """CPU model, cores and memory of the machine that records (the one that ran the run)."""
    info = {"cpus": os.cpu_count()}
    try:
        with open("/proc/cpuinfo") as fh:
            info["cpu"] = next((ln.split(":", 1)[1].strip() for ln in fh
                                if ln.startswith("model name")), None)
        with open("/proc/meminfo") as fh:
            kb = next(int(ln.split()[1]) for ln in fh if ln.startswith("MemTotal:"))
        info["mem_gib"] = round(kb / 2 ** 20, 1)
    except (OSError, StopIteration, ValueError):
        pass
    return info


def readme(manifest, baseline_dir):
    run, mach = manifest.get("run", {}), manifest.get("recorded_on", {})
    lines = [
        "# Performance baseline", "",
        "The nightly job (`scripts/nightly.sh`) compares each night's Google Benchmark results "
        "and mini time-to-accuracy runs against the JSON files in this folder (see "
        "scripts/README.md). Written by `scripts/update_baseline.py`; do not edit by hand, and "
        "never record a failing run. The figures are only comparable on the machine below.", "",
        "## This baseline", "",
        f"* recorded: {manifest['recorded_utc']} from the nightly run "
        f"`{os.path.basename(manifest['source'])}` ({run.get('date_utc', '?')})",
        f"* commit: `{run.get('git_rev', '?')}`",
        f"* machine: {run.get('host', '?')}, {mach.get('cpu', '?')}, "
        f"{run.get('cpus', mach.get('cpus', '?'))} CPUs, {mach.get('mem_gib', '?')} GiB",
        f"* settings: `{run.get('suites_conf', '?')}`"
        + (f", repetitions {run['repetitions_override']} for every suite"
           if run.get("repetitions_override") else ", its repetitions per suite")
        + f", memory cap {run.get('mem_limit_mb', '?')} MB per process",
    ]
    if run.get("durations_s"):
        total = sum(run["durations_s"].values())
        lines.append("* durations: " + ", ".join(
            f"{k} {v:.0f} s" for k, v in run["durations_s"].items())
            + f" (total {total / 60:.1f} min, build not included)")
    if manifest.get("forced"):
        lines.append("* FORCED past: " + "; ".join(manifest["refusals_overridden"]))
    lines += [f"* note: {n}" for n in manifest.get("notes", [])]
    lines += ["", "| file | what |", "|---|---|"]
    for f in manifest["files"]:
        path = os.path.join(baseline_dir, f)
        if f == br.TTA_FILE:
            doc = _read_json(path) or {}
            for r in doc.get("runs", []):
                t = r.get("time_to_train_s")
                lines.append(f"| {f} | {r.get('name')}: {r.get('status')}, final quality "
                             f"{r.get('final_quality')}, epochs to converge "
                             f"{r.get('epochs_to_converge')}, time to train "
                             f"{'?' if t is None else f'{t:.1f} s'} |")
            continue
        try:
            data, _ = br.load_gbench_file(path)
        except br.InputError:
            continue
        reps = sorted({len(e["times_ns"]) for e in data.values()})
        lines.append(f"| {f} | {len(data)} benchmarks, {'/'.join(map(str, reps))} repetitions |")
    lines += ["", "Record a new one (after review, on the same machine as the nightly) with", "",
              "    /usr/bin/python3 scripts/update_baseline.py out/nightly/<run> [--dry-run] "
              "[--note TEXT]", "", "and commit this folder.", ""]
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", help="a scripts/nightly.sh output folder")
    ap.add_argument("--baseline", default=DEFAULT_BASELINE, help="baseline folder")
    ap.add_argument("--only", nargs="+", metavar="FILE",
                    help="record only these files of the run (e.g. kernels_bench.json)")
    ap.add_argument("--prune", action="store_true",
                    help="remove baseline files that the run does not have")
    ap.add_argument("--force", action="store_true", help="record even a failed run")
    ap.add_argument("--dry-run", action="store_true", help="only say what would be done")
    ap.add_argument("--note", action="append", default=[],
                    help="a line for the README (e.g. the conditions of the run)")
    args = ap.parse_args(argv)
    if not os.path.isdir(args.run_dir):
        print(f"error: {args.run_dir}: not a folder", file=sys.stderr)
        return 2
    files, refusals, warnings = check_run(args.run_dir, args.only)
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    if refusals:
        for r in refusals:
            print(f"{'forced past' if args.force else 'refusing'}: {r}", file=sys.stderr)
        if not args.force or not files:
            print("baseline NOT updated" + ("" if args.force else " (use --force to record "
                                            "it anyway)"), file=sys.stderr)
            return 1
    os.makedirs(args.baseline, exist_ok=True)
    names = {os.path.basename(f) for f in files}
    for f in files:
        dst = os.path.join(args.baseline, os.path.basename(f))
        print(f"{'would copy' if args.dry_run else 'copy'} {f} -> {dst}")
        if not args.dry_run:
            shutil.copyfile(f, dst)
    if args.prune:
        for old in br.gbench_files(args.baseline) + [os.path.join(args.baseline, br.TTA_FILE)]:
            if os.path.exists(old) and os.path.basename(old) not in names:
                print(f"{'would remove' if args.dry_run else 'remove'} {old}")
                if not args.dry_run:
                    os.remove(old)
    if not args.dry_run:
        man = _read_json(os.path.join(args.run_dir, "run_manifest.json")) or {}
        manifest = {"recorded_utc": datetime.datetime.utcnow().isoformat() + "Z",
                    "source": os.path.relpath(args.run_dir), "files": sorted(names),
                    "forced": bool(refusals), "refusals_overridden": refusals,
                    "run": man}
        manifest["recorded_on"] = machine()
        manifest["notes"] = args.note
        with open(os.path.join(args.baseline, "baseline_manifest.json"), "w") as fh:
            json.dump(manifest, fh, indent=1)
        with open(os.path.join(args.baseline, "README.md"), "w") as fh:
            fh.write(readme(manifest, args.baseline))
        print(f"baseline updated in {args.baseline}; review and commit it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
