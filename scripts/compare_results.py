#!/usr/bin/python3
"""Compares MLPerf training result packages (ours and official ones).

    compare_results.py PKG [PKG ...] [--package PKG] [--projection JSON]... [--out DIR]
                       [--vs A B]... [--runs] [--no-plots] [--strict]

Prints Markdown tables on stdout (scores, scaling across pod sizes, A-vs-B speedups,
modeled vs published times, problems found), and with --out writes runs.csv,
scores.csv, scaling.csv, vs.csv, modeled.csv, eval_curves.csv, problems.csv,
summary.json and PNG plots.  --projection adds the output of
`run_benchmark --project-only --json` (one pod size or --all-pod-sizes) to the
modeled-vs-published table and plots.  See scripts/README.md.
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mlperf_results as mr  # noqa: E402

try:
    import pandas as pd
except ImportError:  # pragma: no cover - pandas is a declared dependency (python3-pandas)
    pd = None


# --------------------------------------------------------------------------- tables
def runs_table(packages):
    return [r.as_row() for p in packages for r in p.runs]


def curves_table(packages):
    rows = []
    for p in packages:
        for r in p.runs:
            for i, e in enumerate(r.eval_curve):
                rows.append({"org": r.org, "system": r.system, "benchmark": r.benchmark,
                             "run_index": r.run_index, "eval_index": i, "epoch": e.epoch,
                             "samples": e.samples, "time_min": e.time_min,
                             "accuracy": e.accuracy})
    return rows


def problems_table(packages):
    rows = []
    for p in packages:
        for i in p.issues + [i for r in p.runs for i in r.issues]:
            rows.append({"severity": i.severity, "path": i.path, "line": i.line,
                         "message": i.message})
    return rows


def scaling_table(scores):
    """Speedup and parallel efficiency vs the smallest pod of the same system family."""
    fams = {}
    for s in scores:
        if s.pod_size is None or s.score_min is None:
            continue
        fams.setdefault((s.org, s.family, s.benchmark, s.division), []).append(s)
    rows = []
    for (org, fam, bench, div), ss in sorted(fams.items(), key=lambda kv: tuple(
            str(x) for x in kv[0])):
        if len({s.pod_size for s in ss}) < 2:
            continue
        ss.sort(key=lambda s: s.pod_size)
        base = ss[0]
        for s in ss:
            speedup = base.score_min / s.score_min
            ideal = s.pod_size / base.pod_size
            rows.append({"org": org, "family": fam, "benchmark": bench, "division": div,
                         "system": s.system, "pod_size": s.pod_size,
                         "score_min": s.score_min, "valid": s.valid,
                         "base_system": base.system, "speedup": speedup,
                         "ideal_speedup": ideal, "efficiency": speedup / ideal})
    return rows


def _match(pattern, s):
    pat = pattern.lower()
    return (fnmatch.fnmatchcase(s.system.lower(), pat)
            or fnmatch.fnmatchcase(f"{s.org}/{s.system}".lower(), pat))


def vs_table(scores, pairs):
    """Per benchmark: every system matching A against every system matching B."""
    rows = []
    for pa, pb in pairs:
        for bench in sorted({s.benchmark for s in scores}):
            a_side = [s for s in scores if s.benchmark == bench and _match(pa, s)]
            b_side = [s for s in scores if s.benchmark == bench and _match(pb, s)]
            for a in a_side:
                for b in b_side:
                    if a is b:
                        continue
                    sp = (a.score_min / b.score_min
                          if a.score_min is not None and b.score_min is not None else None)
                    rows.append({"benchmark": bench, "system_a": f"{a.org}/{a.system}",
                                 "score_a_min": a.score_min, "system_b": f"{b.org}/{b.system}",
                                 "score_b_min": b.score_min, "speedup_b_over_a": sp,
                                 "valid": a.valid and b.valid,
                                 "note": "" if sp is not None else "a score is invalid"})
    return rows


def modeled_table(scores):
    """Our modeled IPU times vs the published time of the same pod size and benchmark."""
    rows = []
    published = [s for s in scores if s.modeled_score_min is None and s.score_min is not None]
    for s in scores:
        if s.modeled_score_min is None:
            continue
        cands = [p for p in published if p.benchmark == s.benchmark
                 and p.pod_size == s.pod_size and p.pod_size is not None]
        # Prefer IPU systems, then the same division.
        cands.sort(key=lambda p: (not _is_ipu(p), p.division != s.division, p.system))
        if not cands:
            rows.append({"benchmark": s.benchmark, "system": f"{s.org}/{s.system}",
                         "pod_size": s.pod_size, "modeled_min": s.modeled_score_min,
                         "measured_min": s.score_min, "published_system": None,
                         "published_min": None, "modeled_over_published": None,
                         "note": "no published result for this pod size and benchmark"})
            continue
        for p in cands:
            if _is_ipu(p) != _is_ipu(cands[0]) or p.division != cands[0].division:
                break
            rows.append({"benchmark": s.benchmark, "system": f"{s.org}/{s.system}",
                         "pod_size": s.pod_size, "modeled_min": s.modeled_score_min,
                         "measured_min": s.score_min,
                         "published_system": f"{p.org}/{p.system}",
                         "published_min": p.score_min,
                         "modeled_over_published": s.modeled_score_min / p.score_min,
                         "note": "" if p.division == s.division
                         else f"division differs ({s.division} vs {p.division})"})
    return rows


def load_projections(paths):
    """Projections written by `run_benchmark --project-only --json`: one object per pod size,
    or an array of them (--all-pod-sizes). Raises ValueError naming the file and what is
    missing."""
    out = []
    need = ("mlperf_benchmark", "system", "pod_size", "modeled_minutes", "fit", "configuration")
    for path in paths:
        try:
            with open(path) as fh:
                doc = json.load(fh)
        except (OSError, json.JSONDecodeError) as e:
            raise ValueError(f"{path}: not a run_benchmark --project-only --json output ({e})")
        items = doc if isinstance(doc, list) else [doc]
        for i, p in enumerate(items):
            missing = [k for k in need if not isinstance(p, dict) or k not in p]
            if missing:
                raise ValueError(f"{path}: projection {i} lacks {', '.join(missing)} (expected "
                                 "the output of run_benchmark --project-only --json)")
            out.append(dict(p, path=path))
    return out


def projection_rows(projections, scores):
    """Each projected pod size beside the published score of the same benchmark and pod size
    (an IPU system of the packages given, else the published time run_benchmark records)."""
    rows = []
    published = [s for s in scores if s.modeled_score_min is None and s.score_min is not None]
    for p in projections:
        bench, pod = p["mlperf_benchmark"], p["pod_size"]
        cands = [s for s in published if s.benchmark == bench and s.pod_size == pod]
        cands.sort(key=lambda s: (not _is_ipu(s), s.division != "closed", s.system))
        fit = p["fit"]
        c = p["configuration"]
        row = {"benchmark": bench, "system": f'projection/{p["system"]}', "pod_size": pod,
               "modeled_min": p["modeled_minutes"], "measured_min": None,
               "published_system": None, "published_min": None,
               "modeled_over_published": None, "fits": fit["fits"],
               "configuration": (f'{c["replicas"]}x{c["micro_batch"]}x'
                                 f'{c["gradient_accumulation"]}={c["global_batch"]}, '
                                 f'{c["epochs"]} ep')}
        notes = [] if fit["fits"] else ["does not fit one IPU yet: priced as if it fit"]
        if cands:
            row["published_system"] = f"{cands[0].org}/{cands[0].system}"
            row["published_min"] = cands[0].score_min
        elif p.get("published_minutes") is not None:
            row["published_system"] = "MLPerf v1.1 (as recorded by run_benchmark)"
            row["published_min"] = p["published_minutes"]
        else:
            notes.append("no published result for this pod size and benchmark")
        if row["published_min"]:
            row["modeled_over_published"] = row["modeled_min"] / row["published_min"]
        row["note"] = "; ".join(notes)
        rows.append(row)
    return rows


def _is_ipu(s):
    return "ipu" in (s.accelerator or "").lower() or "ipu" in s.system.lower() \
        or s.org.lower() == "graphcore"


# --------------------------------------------------------------------------- markdown
def _fmt(v, digits=2):
    if v is None:
        return ""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if math.isnan(v):
            return ""
        if math.isinf(v):
            return "inf"
        if abs(v) >= 1e5:
            return f"{v:.4g}"
        return f"{v:.{digits}f}"
    return str(v).replace("|", "\\|").replace("\n", " ")


def markdown_table(rows, columns, headers=None, digits=None):
    digits = digits or {}
    headers = headers or columns
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    for r in rows:
        out.append("| " + " | ".join(_fmt(r.get(c), digits.get(c, 2)) for c in columns) + " |")
    return "\n".join(out)


def render_markdown(res, show_runs=False):
    parts = ["# MLPerf results comparison", ""]
    parts.append("Packages: " + ", ".join(f"`{p}`" for p in res["packages"]))
    parts += ["", "## Scores (olympic mean time to train, minutes)", ""]
    parts.append(markdown_table(
        res["scores"],
        ["benchmark", "org", "system", "division", "pod_size", "n_runs", "n_failed",
         "score_min", "valid", "reason"],
        ["benchmark", "org", "system", "division", "pod/accel", "runs", "failed",
         "score (min)", "valid", "reason"]))
    if res["scaling"]:
        parts += ["", "## Scaling across pod sizes (vs the smallest pod)", ""]
        parts.append(markdown_table(
            res["scaling"], ["benchmark", "family", "pod_size", "score_min", "speedup",
                             "ideal_speedup", "efficiency"],
            ["benchmark", "system family", "pod", "score (min)", "speedup", "ideal",
             "efficiency"]))
    if res["vs"]:
        parts += ["", "## System A vs system B (speedup = score A / score B)", ""]
        parts.append(markdown_table(
            res["vs"], ["benchmark", "system_a", "score_a_min", "system_b", "score_b_min",
                        "speedup_b_over_a", "note"],
            ["benchmark", "A", "A (min)", "B", "B (min)", "speedup of B", "note"]))
    if res["modeled"]:
        parts += ["", "## Modeled vs published time to train (same pod and benchmark)", ""]
        parts.append(markdown_table(
            res["modeled"], ["benchmark", "system", "pod_size", "configuration", "fits",
                             "modeled_min", "measured_min", "published_system", "published_min",
                             "modeled_over_published", "note"],
            ["benchmark", "ours", "pod", "replicas x micro-batch x accumulation", "fits",
             "modeled (min)", "measured (min)", "published", "published (min)",
             "modeled/published", "note"], {"modeled_over_published": 3}))
    if show_runs:
        parts += ["", "## Runs", ""]
        parts.append(markdown_table(
            res["runs"], ["benchmark", "system", "file", "status", "converged",
                          "time_to_train_min", "epochs_to_converge", "samples_to_converge",
                          "final_quality", "global_batch_size", "modeled_time_to_train_min"],
            ["benchmark", "system", "file", "status", "converged", "TTT (min)", "epochs",
             "samples", "final quality", "global batch", "modeled (min)"],
            {"final_quality": 4, "epochs_to_converge": 0, "samples_to_converge": 0}))
    if res["problems"]:
        parts += ["", "## Problems", ""]
        parts.append(markdown_table(res["problems"], ["severity", "path", "line", "message"]))
    return "\n".join(parts) + "\n"


# --------------------------------------------------------------------------- plots
def label_offsets(points, close=1.08, step=9):
    """Vertical offsets (in points) for value labels at (x, y) on a log-y axis: labels at the
    same x whose values are within a factor `close` of the one below are stacked `step`
    points apart, so nearly equal times do not print over each other."""
    offsets = [4] * len(points)
    by_x = {}
    for i, (x, y) in enumerate(points):
        by_x.setdefault(x, []).append(i)
    for idx in by_x.values():
        idx.sort(key=lambda i: points[i][1])
        for prev, cur in zip(idx, idx[1:]):
            if points[cur][1] <= points[prev][1] * close:
                offsets[cur] = offsets[prev] + step
    return offsets


def evaluated_after_training(curve, share=0.02):
    """True when a run's evaluations (3 or more) were all logged within `share` of its time
    span: a submitter that scored every checkpoint after training, whose accuracy-vs-time
    curve is a vertical line that says nothing about when the accuracy was reached."""
    ts = [p["time_min"] for p in curve if p.get("time_min") is not None]
    if len(ts) < 3 or ts[-1] <= 0:
        return False
    return max(ts) - min(ts) <= share * max(ts)


def make_plots(res, out_dir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    scores = [s for s in res["scores"] if s["score_min"] is not None and s["pod_size"]]
    benches = sorted({s["benchmark"] for s in scores})

    # 1. Time to train by pod size.
    if benches:
        fig, axes = plt.subplots(1, len(benches), figsize=(6.5 * len(benches), 4.8),
                                 squeeze=False)
        for ax, b in zip(axes[0], benches):
            fams = {}
            for s in scores:
                if s["benchmark"] == b:
                    fams.setdefault(f'{s["org"]}/{s["family"]}', []).append(s)
            labels = []
            for fam, ss in sorted(fams.items()):
                ss.sort(key=lambda s: s["pod_size"])
                xs = [s["pod_size"] for s in ss]
                ys = [s["score_min"] for s in ss]
                line, = ax.plot(xs, ys, marker="o", label=fam)
                labels += [(x, y, line.get_color()) for x, y in zip(xs, ys)]
            for (x, y, c), dy in zip(labels, label_offsets([(x, y) for x, y, _ in labels])):
                ax.annotate(f"{y:.2f}", (x, y), textcoords="offset points",
                            xytext=(4, dy), fontsize=7, color=c)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("pod size / accelerators")
            ax.set_ylabel("time to train (min, olympic mean)")
            ax.set_title(f"{b}: time to train")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
        fig.tight_layout()
        p = os.path.join(out_dir, "time_to_train_by_pod.png")
        fig.savefig(p, dpi=110)
        plt.close(fig)
        written.append(p)

    # 2. Scaling: speedup and parallel efficiency.
    sc = res["scaling"]
    sbench = sorted({r["benchmark"] for r in sc})
    if sbench:
        fig, axes = plt.subplots(2, len(sbench), figsize=(6.5 * len(sbench), 8),
                                 squeeze=False)
        for j, b in enumerate(sbench):
            fams = {}
            for r in sc:
                if r["benchmark"] == b:
                    fams.setdefault(f'{r["org"]}/{r["family"]}', []).append(r)
            top, bot = axes[0][j], axes[1][j]
            xmax = 1
            for fam, rs in sorted(fams.items()):
                xs = [r["pod_size"] for r in rs]
                top.plot(xs, [r["speedup"] for r in rs], marker="o", label=fam)
                bot.plot(xs, [100 * r["efficiency"] for r in rs], marker="o", label=fam)
                for r in rs:
                    bot.annotate(f'{100 * r["efficiency"]:.0f}%', (r["pod_size"],
                                 100 * r["efficiency"]), textcoords="offset points",
                                 xytext=(4, 4), fontsize=7)
                base = rs[0]["pod_size"]
                xmax = max(xmax, max(xs))
                top.plot([base, max(xs)], [1, max(xs) / base], ls="--", color="grey",
                         lw=0.8)
            top.set_title(f"{b}: speedup vs smallest pod (dashed: ideal)")
            bot.set_title(f"{b}: parallel efficiency")
            for ax in (top, bot):
                ax.set_xscale("log", base=2)
                ax.set_xlabel("pod size")
                ax.grid(True, which="both", alpha=0.3)
                ax.legend(fontsize=7)
            top.set_ylabel("speedup")
            bot.set_ylabel("efficiency (%)")
            bot.set_ylim(0, 110)
        fig.tight_layout()
        p = os.path.join(out_dir, "scaling_efficiency.png")
        fig.savefig(p, dpi=110)
        plt.close(fig)
        written.append(p)

    # 3. Accuracy curves: vs progress (epochs / samples) and vs time.
    runs = [r for r in res["runs_full"] if r["eval_curve"]]
    cbench = sorted({r["benchmark"] for r in runs})
    if cbench:
        fig, axes = plt.subplots(len(cbench), 2, figsize=(14, 4.8 * len(cbench)),
                                 squeeze=False)
        for i, b in enumerate(cbench):
            br = [r for r in runs if r["benchmark"] == b]
            systems = sorted({f'{r["org"]}/{r["system"]}' for r in br})
            cmap = plt.get_cmap("tab10" if len(systems) <= 10 else "tab20")
            colour = {s: cmap(k % cmap.N) for k, s in enumerate(systems)}
            unit = mr.PROGRESS_UNIT.get(b, "epochs")
            left, right = axes[i]
            seen_l, seen_r, no_progress, after = set(), set(), set(), set()
            for r in br:
                key = f'{r["org"]}/{r["system"]}'
                pts = r["eval_curve"]
                xs = [p["samples"] if unit == "samples" else p["epoch"] for p in pts]
                ys = [p["accuracy"] for p in pts]
                if all(x is not None for x in xs):
                    left.plot(xs, ys, lw=0.8, marker=".", ms=3, color=colour[key],
                              label=None if key in seen_l else key, alpha=0.8)
                    seen_l.add(key)
                else:
                    no_progress.add(key)
                ts = [p["time_min"] for p in pts]
                if evaluated_after_training(pts):
                    after.add(key)
                if all(t is not None for t in ts):
                    right.plot(ts, ys, lw=0.8, marker=".", ms=3, color=colour[key],
                               label=None if key in seen_r else key, alpha=0.8)
                    seen_r.add(key)
            tgt = mr.QUALITY_TARGETS.get(b) or next(
                (r["quality_target"] for r in br if r["quality_target"]), None)
            for ax in (left, right):
                if tgt is not None:
                    ax.axhline(tgt, ls="--", color="black", lw=0.8)
                ax.grid(True, alpha=0.3)
                ax.set_ylabel("eval_accuracy")
                if ax.get_legend_handles_labels()[0]:
                    ax.legend(fontsize=6, ncol=2)
            title = f"{b}: accuracy vs {unit}"
            if no_progress:
                title += " (no per-eval progress in log: " + ", ".join(
                    sorted(no_progress)) + ")"
            left.set_title(title, fontsize=9)
            left.set_xlabel(unit)
            rtitle = f"{b}: accuracy vs time since run_start"
            if after:
                rtitle += ("\n(every evaluation logged after training, so the time axis says "
                           "nothing of progress: " + ", ".join(sorted(after)) + ")")
            right.set_title(rtitle, fontsize=9)
            right.set_xlabel("minutes")
        fig.tight_layout()
        p = os.path.join(out_dir, "accuracy_curves.png")
        fig.savefig(p, dpi=110)
        plt.close(fig)
        written.append(p)

    # 4. Full-scale projections beside the published times, by pod size.
    proj = res.get("projections") or []
    pbench = sorted({r["benchmark"] for r in proj})
    if pbench:
        fig, axes = plt.subplots(1, len(pbench), figsize=(6.5 * len(pbench), 4.8),
                                 squeeze=False)
        for ax, b in zip(axes[0], pbench):
            rs = sorted((r for r in proj if r["benchmark"] == b), key=lambda r: r["pod_size"])
            ax.plot([r["pod_size"] for r in rs], [r["modeled_min"] for r in rs], marker="o",
                    label="projected (cost model)")
            for r in rs:
                if not r["fits"]:  # hollow marker: priced as if it fit
                    ax.plot(r["pod_size"], r["modeled_min"], marker="o", ms=11, mfc="none",
                            color="red", ls="none")
            pub = [r for r in rs if r["published_min"] is not None]
            if pub:
                ax.plot([r["pod_size"] for r in pub], [r["published_min"] for r in pub],
                        marker="s", label="published")
            for r in rs:
                ax.annotate(f'{r["modeled_min"]:.2f}', (r["pod_size"], r["modeled_min"]),
                            textcoords="offset points", xytext=(4, 4), fontsize=7)
            if any(not r["fits"] for r in rs):
                ax.plot([], [], marker="o", ms=11, mfc="none", color="red", ls="none",
                        label="does not fit one IPU yet (priced as if it fit)")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("pod size (IPUs)")
            ax.set_ylabel("time to train (min)")
            ax.set_title(f"{b}: projected vs published time to train")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
        fig.tight_layout()
        p = os.path.join(out_dir, "projection_vs_published.png")
        fig.savefig(p, dpi=110)
        plt.close(fig)
        written.append(p)

    # 5. Modeled vs published.
    mod = [m for m in res["modeled"] if m["published_min"] is not None]
    if mod:
        fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(mod)), 4.5))
        labels = [f'{m["benchmark"]}\npod{m["pod_size"]}\n{m["system"].split("/")[-1]}'
                  for m in mod]
        xs = range(len(mod))
        ax.bar([x - 0.2 for x in xs], [m["modeled_min"] for m in mod], 0.4, label="modeled")
        ax.bar([x + 0.2 for x in xs], [m["published_min"] for m in mod], 0.4,
               label="published")
        ax.set_xticks(list(xs))
        ax.set_xticklabels(labels, fontsize=7)
        ax.set_ylabel("time to train (min)")
        ax.set_title("modeled vs published time to train")
        ax.legend()
        fig.tight_layout()
        p = os.path.join(out_dir, "modeled_vs_published.png")
        fig.savefig(p, dpi=110)
        plt.close(fig)
        written.append(p)
    return written


# --------------------------------------------------------------------------- driver
def analyse(package_dirs, vs_pairs=(), projection_files=()):
    packages = mr.load_packages(package_dirs)
    scores = mr.score_packages(packages)
    projections = projection_rows(load_projections(projection_files), scores)
    runs_full = []
    for p in packages:
        for r in p.runs:
            row = r.as_row()
            row["eval_curve"] = [dict(epoch=e.epoch, samples=e.samples, time_min=e.time_min,
                                      accuracy=e.accuracy) for e in r.eval_curve]
            row["issues"] = [str(i) for i in r.issues]
            runs_full.append(row)
    return {
        "packages": list(package_dirs),
        "scores": [s.as_row() for s in scores],
        "runs": runs_table(packages),
        "runs_full": runs_full,
        "curves": curves_table(packages),
        "scaling": scaling_table(scores),
        "vs": vs_table(scores, vs_pairs),
        # Projections (run_benchmark --project-only --json) are rows of the same table.
        "modeled": modeled_table(scores) + projections,
        "projections": projections,
        "problems": problems_table(packages),
    }


def _json_safe(o):
    if isinstance(o, float) and not math.isfinite(o):
        return None
    if isinstance(o, dict):
        return {k: _json_safe(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_json_safe(v) for v in o]
    return o


def write_outputs(res, out_dir, plots=True):
    os.makedirs(out_dir, exist_ok=True)
    written = []
    tables = {"runs": res["runs"], "scores": res["scores"], "scaling": res["scaling"],
              "vs": res["vs"], "modeled": res["modeled"], "eval_curves": res["curves"],
              "projections": res["projections"], "problems": res["problems"]}
    for name, rows in tables.items():
        p = os.path.join(out_dir, f"{name}.csv")
        if pd is not None:
            pd.DataFrame(rows).to_csv(p, index=False)
        else:  # pragma: no cover
            import csv
            with open(p, "w", newline="") as fh:
                cols = sorted({k for r in rows for k in r})
                w = csv.DictWriter(fh, cols)
                w.writeheader()
                w.writerows(rows)
        written.append(p)
    p = os.path.join(out_dir, "summary.json")
    summary = {k: v for k, v in res.items() if k not in ("runs", "curves")}
    summary["runs"] = summary.pop("runs_full")
    with open(p, "w") as fh:
        json.dump(_json_safe(summary), fh, indent=1)
    written.append(p)
    if plots:
        written += make_plots(res, out_dir)
    return written


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("packages", nargs="*", metavar="PKG",
                    help="package folder (an org folder with results/ and systems/, or a "
                         "folder holding several)")
    ap.add_argument("--package", action="append", default=[], metavar="PKG",
                    help="package folder (repeatable; same as a positional)")
    ap.add_argument("--projection", action="append", default=[], metavar="JSON",
                    help="output of `run_benchmark --project-only --json` (one pod size or "
                         "--all-pod-sizes; repeatable): projected times beside the published")
    ap.add_argument("--out", metavar="DIR", help="write CSV, JSON and PNG files here")
    ap.add_argument("--vs", nargs=2, action="append", default=[], metavar=("A", "B"),
                    help="compare systems matching glob A against those matching glob B "
                         "per benchmark (system or org/system; repeatable)")
    ap.add_argument("--runs", action="store_true", help="also print the per-run table")
    ap.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    ap.add_argument("--strict", action="store_true",
                    help="exit 1 when any file has an error")
    args = ap.parse_args(argv)
    dirs = args.packages + args.package
    if not dirs and not args.projection:
        ap.error("give at least one package folder or --projection file")
    try:
        res = analyse(dirs, [tuple(p) for p in args.vs], args.projection)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    sys.stdout.write(render_markdown(res, show_runs=args.runs))
    for prob in res["problems"]:
        if prob["severity"] == "error":
            where = prob["path"] + (f':{prob["line"]}' if prob["line"] else "")
            print(f"error: {where}: {prob['message']}", file=sys.stderr)
    if args.out:
        files = write_outputs(res, args.out, plots=not args.no_plots)
        print(f"wrote {len(files)} files to {args.out}", file=sys.stderr)
    if not res["runs"] and not res["projections"]:
        print("error: no runs found in any package", file=sys.stderr)
        return 2
    if args.strict and any(p["severity"] == "error" for p in res["problems"]):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
