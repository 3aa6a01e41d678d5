#!/usr/bin/python3
"""Reading MLPerf training result packages and scoring them.

A *package* is a folder in the MLPerf submission layout::

    <org>/results/<system>/<benchmark>/result_<i>.txt   (MLLOG lines)
    <org>/systems/<system>.json                          (system description)

Both the official MLPerf packages and the ones written by this project's harness use
that layout.  This module parses the logs tolerantly (text before ``:::MLLOG``, extra
keys, unknown event types, bad lines), extracts the per-run metrics and computes the
MLPerf score (olympic mean) per (org, system, benchmark).

Conventions for *our* packages (see scripts/README.md):

* ``:::MLLOG {"key": "modeled_time_to_train_ms", "event_type": "POINT_IN_TIME",
  "value": <ms>, ...}`` anywhere in a result log gives the modeled IPU time to train of
  that run; alternatively a sidecar ``result_<i>.json`` next to ``result_<i>.txt`` with
  ``{"modeled": {"time_to_train_ms": <ms>}}``.  The sidecar wins when both exist.
* ``:::MLLOG {"key": "quality_target", "value": <float>}`` overrides the benchmark's
  default quality target (used for the scaled-down "mini" runs).
* ``systems/<system>.json`` may carry ``"pod_size": <int>``; otherwise the pod size is
  ``accelerators_per_node * number_of_nodes``, otherwise parsed from ``pod<N>`` in the
  system folder name.

Only the Python standard library is needed here (pandas/matplotlib are used by
compare_results.py).
"""
from __future__ import annotations

import dataclasses
import glob
import json
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

MLLOG_MARKER = ":::MLLOG"

# Canonical benchmark names and the aliases seen in folder names / submission_benchmark.
BENCHMARK_ALIASES = {
    "resnet": "resnet", "resnet50": "resnet", "resnet-50": "resnet", "resnet_50": "resnet",
    "bert": "bert", "bert-large": "bert", "bert_large": "bert", "language_model": "bert",
    "ssd": "ssd", "maskrcnn": "maskrcnn", "mask_rcnn": "maskrcnn", "rnnt": "rnnt",
    "unet3d": "unet3d", "dlrm": "dlrm", "minigo": "minigo",
}

# MLPerf training v1.1 closed-division quality targets (eval_accuracy >= target).
QUALITY_TARGETS = {"resnet": 0.759, "bert": 0.720}

# Number of runs an MLPerf v1.1 result must contain, and how many of the fastest and
# slowest are dropped for the olympic mean.
REQUIRED_RUNS = {"resnet": 5, "bert": 10, "ssd": 5, "maskrcnn": 5, "rnnt": 10,
                 "unet3d": 40, "dlrm": 5, "minigo": 10}
OLYMPIC_DROP = {"unet3d": 4}  # everything else drops one on each side

# How training progress is counted in eval_accuracy's metadata.epoch_num.
PROGRESS_UNIT = {"bert": "samples"}  # default "epochs"


def canonical_benchmark(name: str | None) -> str:
    if not name or not isinstance(name, str):  # a log's submission_benchmark may be anything
        return "unknown"
    key = name.strip().lower()
    return BENCHMARK_ALIASES.get(key, key)


# --------------------------------------------------------------------------- records
@dataclass
class Issue:
    """A problem found while reading a package; `severity` is "error" or "warning"."""
    path: str
    message: str
    severity: str = "error"
    line: int | None = None

    def __str__(self) -> str:
        where = self.path if self.line is None else f"{self.path}:{self.line}"
        return f"{self.severity}: {where}: {self.message}"


@dataclass
class LogRecord:
    key: str
    time_ms: float | None
    event_type: str
    value: Any
    metadata: dict
    namespace: str = ""
    line: int = 0


def parse_mllog_lines(lines: Iterable[str], path: str = "<input>"):
    """Parses MLLOG lines. Returns (records, issues). Never raises on bad content."""
    records: list[LogRecord] = []
    issues: list[Issue] = []
    for lineno, raw in enumerate(lines, start=1):
        pos = raw.find(MLLOG_MARKER)
        if pos < 0:
            continue  # free text, blank lines, framework chatter
        payload = raw[pos + len(MLLOG_MARKER):].strip()
        try:
            obj = json.loads(payload)
        except json.JSONDecodeError as exc:
            issues.append(Issue(path, f"invalid JSON after {MLLOG_MARKER} ({exc.msg} at "
                                      f"column {exc.colno}); line skipped", "warning", lineno))
            continue
        if not isinstance(obj, dict) or "key" not in obj:
            issues.append(Issue(path, f"{MLLOG_MARKER} record without a 'key'; line skipped",
                                "warning", lineno))
            continue
        t = _num(obj.get("time_ms"))
        if t is None and "time_ms" in obj:
            issues.append(Issue(path, f"time_ms {obj['time_ms']!r:.40} is not a finite number; "
                                      "the record is kept without a time", "warning", lineno))
        md = obj.get("metadata")
        records.append(LogRecord(key=str(obj["key"]), time_ms=t,
                                 event_type=str(obj.get("event_type", "")),
                                 value=obj.get("value"),
                                 metadata=md if isinstance(md, dict) else {},
                                 namespace=str(obj.get("namespace", "") or ""), line=lineno))
    return records, issues


def parse_mllog_file(path: str):
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return parse_mllog_lines(fh, path)
    except OSError as exc:
        return [], [Issue(path, f"cannot read: {exc.strerror or exc}")]


# --------------------------------------------------------------------------- runs
@dataclass
class EvalPoint:
    accuracy: float
    time_min: float | None      # minutes since run_start
    epoch: float | None         # epochs (ResNet-style logs)
    samples: float | None       # samples (BERT-style logs)


@dataclass
class Run:
    path: str
    org: str
    system: str
    benchmark: str
    run_index: int | None
    division: str | None = None
    status: str = "unknown"          # success | aborted | no_run_stop | no_run_start | ...
    converged: bool = False
    time_to_train_min: float | None = None
    epochs_to_converge: float | None = None
    samples_to_converge: float | None = None
    final_quality: float | None = None
    quality_target: float | None = None
    global_batch_size: int | None = None
    modeled_time_to_train_min: float | None = None
    eval_curve: list[EvalPoint] = field(default_factory=list)
    issues: list[Issue] = field(default_factory=list)

    @property
    def scoring_time(self) -> float:
        """Time used for scoring: infinite for a run that does not count as converged."""
        if self.converged and self.time_to_train_min is not None:
            return self.time_to_train_min
        return math.inf

    @property
    def modeled_scoring_time(self) -> float:
        if self.converged and self.modeled_time_to_train_min is not None:
            return self.modeled_time_to_train_min
        return math.inf

    def failure_reason(self) -> str:
        if self.converged:
            return ""
        if self.status == "success":
            return (f"run_stop says success but no eval_accuracy >= {self.quality_target} "
                    f"(final {self.final_quality})")
        return f"status {self.status}"

    def as_row(self) -> dict:
        d = {k: v for k, v in dataclasses.asdict(self).items()
             if k not in ("eval_curve", "issues")}
        d["file"] = os.path.basename(self.path)
        d["eval_points"] = len(self.eval_curve)
        d["issues"] = "; ".join(str(i) for i in self.issues)
        return d


def _num(x) -> float | None:
    """A finite float, or None (not a number, NaN/inf, or an integer beyond a float's range)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    try:
        f = float(x)
    except OverflowError:  # JSON integers are unbounded in Python
        return None
    return f if math.isfinite(f) else None


def _run_stop_status(rec: LogRecord) -> str:
    status = rec.metadata.get("status")
    if isinstance(status, str) and status:
        return status.lower()
    if isinstance(rec.value, dict) and "success" in rec.value:
        return "success" if rec.value["success"] else "aborted"
    return "unknown"


def analyse_run(records: list[LogRecord], path: str, *, org: str = "unknown",
                system: str = "unknown", benchmark: str | None = None,
                issues: list[Issue] | None = None, sidecar: dict | None = None) -> Run:
    """Turns the records of one result log into a Run with its metrics."""
    issues = list(issues or [])
    first: dict[str, LogRecord] = {}
    for r in records:
        first.setdefault(r.key, r)

    bench = canonical_benchmark(benchmark or (first.get("submission_benchmark").value
                                              if "submission_benchmark" in first else None))
    m = re.search(r"result_(\d+)", os.path.basename(path))
    run = Run(path=path, org=org, system=system, benchmark=bench,
              run_index=int(m.group(1)) if m else None)
    if "submission_division" in first and isinstance(first["submission_division"].value, str):
        run.division = first["submission_division"].value
    gbs = first.get("global_batch_size")
    if gbs is not None and _num(gbs.value) is not None:
        run.global_batch_size = int(gbs.value)

    target = QUALITY_TARGETS.get(bench)
    if "quality_target" in first and _num(first["quality_target"].value) is not None:
        target = float(first["quality_target"].value)
    run.quality_target = target

    if not records:
        issues.append(Issue(path, f"no {MLLOG_MARKER} records found"))
        run.status = "empty"
        run.issues = issues
        return run

    start = first.get("run_start")
    stop = first.get("run_stop")
    if start is None or start.time_ms is None:
        issues.append(Issue(path, "missing run_start; the run cannot be timed"))
        run.status = "no_run_start"
    if stop is None or stop.time_ms is None:
        issues.append(Issue(path, "missing run_stop (run did not finish or log truncated); "
                                  "counted as not converged"))
        if run.status == "unknown":
            run.status = "no_run_stop"
    else:
        st = _run_stop_status(stop)
        if run.status == "unknown":
            run.status = st
    t0 = start.time_ms if start is not None else None
    if t0 is not None and stop is not None and stop.time_ms is not None:
        run.time_to_train_min = (stop.time_ms - t0) / 60000.0
        if run.time_to_train_min < 0:
            issues.append(Issue(path, "run_stop precedes run_start"))
            run.status = "bad_times"

    # Evaluation curve.
    unit = PROGRESS_UNIT.get(bench, "epochs")
    raw_points = []
    for r in records:
        if r.key != "eval_accuracy":
            continue
        acc = _num(r.value)
        if acc is None:
            continue
        prog = _num(r.metadata.get("epoch_num"))
        tmin = (r.time_ms - t0) / 60000.0 if (t0 is not None and r.time_ms is not None) else None
        raw_points.append((acc, tmin, prog))
    progs = [p for _, _, p in raw_points]
    # BERT logs put samples in epoch_num (Graphcore); some (NVIDIA v1.1) log a constant
    # epoch_num of 1 instead, which carries no progress information.
    progress_ok = all(p is not None for p in progs) and all(
        b > a for a, b in zip(progs, progs[1:]))
    if len(progs) == 1 and unit == "samples" and (progs[0] or 0) <= 1:
        progress_ok = False
    for acc, tmin, prog in raw_points:
        pe = prog if (progress_ok and unit == "epochs") else None
        ps = prog if (progress_ok and unit == "samples") else None
        run.eval_curve.append(EvalPoint(acc, tmin, pe, ps))

    if run.eval_curve:
        run.final_quality = run.eval_curve[-1].accuracy
    reached = None
    if target is not None:
        reached = next((p for p in run.eval_curve if p.accuracy >= target), None)
    run.converged = (run.status == "success" and run.time_to_train_min is not None
                     and (target is None or reached is not None))

    # Progress to converge: the eval that reached the target (or the last one).
    ref = reached if reached is not None else (run.eval_curve[-1] if run.eval_curve else None)
    if run.converged and ref is not None:
        run.epochs_to_converge = ref.epoch
        run.samples_to_converge = ref.samples
        if run.epochs_to_converge is None and unit == "epochs" and stop is not None:
            run.epochs_to_converge = _num(stop.metadata.get("epoch_num"))
        if run.samples_to_converge is None and unit == "samples":
            # NVIDIA-style BERT logs report the trained samples as train_samples at the end.
            ts = [r for r in records if r.key == "train_samples" and _num(r.value) is not None
                  and stop is not None and r.time_ms is not None and start is not None
                  and r.time_ms >= start.time_ms]
            if ts:
                run.samples_to_converge = float(ts[-1].value)
        if run.samples_to_converge is None and run.epochs_to_converge is not None:
            ds = first.get("train_samples")
            if ds is not None and _num(ds.value) is not None:
                run.samples_to_converge = run.epochs_to_converge * float(ds.value)

    # Modeled time (our harness only).
    modeled = None
    mod_rec = first.get("modeled_time_to_train_ms")
    if mod_rec is not None and _num(mod_rec.value) is not None:
        modeled = float(mod_rec.value)
    if sidecar is not None:
        v = (sidecar.get("modeled") or {}).get("time_to_train_ms") if isinstance(
            sidecar.get("modeled"), dict) else None
        if _num(v) is not None:
            modeled = float(v)
        elif "modeled" in sidecar:
            issues.append(Issue(path, "sidecar 'modeled' has no numeric time_to_train_ms",
                                "warning"))
    if modeled is not None:
        run.modeled_time_to_train_min = modeled / 60000.0

    if not run.converged and run.status == "success" and target is not None:
        issues.append(Issue(path, f"run_stop status success but eval_accuracy never reached "
                                  f"{target} (final {run.final_quality}); counted as not "
                                  f"converged", "warning"))
    run.issues = issues
    return run


# --------------------------------------------------------------------------- packages
@dataclass
class SystemInfo:
    org: str
    name: str
    pod_size: int | None = None
    accelerator: str | None = None
    division: str | None = None
    framework: str | None = None
    description: dict = field(default_factory=dict)


def pod_size_from(name: str, desc: dict | None) -> int | None:
    desc = desc or {}
    v = desc.get("pod_size")
    if _num(v) is not None or (isinstance(v, str) and v.strip().isdigit()):
        return int(float(v))
    try:
        return int(desc["accelerators_per_node"]) * int(desc["number_of_nodes"])
    except (KeyError, TypeError, ValueError):
        pass
    m = re.search(r"pod[-_]?(\d+)", name, re.IGNORECASE)
    return int(m.group(1)) if m else None


def system_family(name: str) -> str:
    """'ipu-pod64-POPART-closed' -> 'ipu-pod*-POPART-closed' (same system, other size)."""
    return re.sub(r"(pod[-_]?)\d+", r"\1*", name, flags=re.IGNORECASE)


@dataclass
class Package:
    root: str
    runs: list[Run] = field(default_factory=list)
    systems: dict[tuple[str, str], SystemInfo] = field(default_factory=dict)
    issues: list[Issue] = field(default_factory=list)


def _locate(path: str):
    """(org, system, benchmark, org_dir) from .../<org>/results/<system>/<bench>/result_i.txt"""
    bench_dir = os.path.dirname(os.path.abspath(path))
    sys_dir = os.path.dirname(bench_dir)
    results_dir = os.path.dirname(sys_dir)
    if os.path.basename(results_dir) == "results":
        org_dir = os.path.dirname(results_dir)
        return os.path.basename(org_dir), os.path.basename(sys_dir), os.path.basename(
            bench_dir), org_dir
    return "unknown", os.path.basename(sys_dir), os.path.basename(bench_dir), None


def load_system(org_dir: str | None, org: str, system: str, issues: list[Issue]) -> SystemInfo:
    desc: dict = {}
    if org_dir is not None:
        sp = os.path.join(org_dir, "systems", system + ".json")
        if os.path.exists(sp):
            try:
                with open(sp, encoding="utf-8") as fh:
                    desc = json.load(fh)
                if not isinstance(desc, dict):
                    raise ValueError("top level is not an object")
            except (OSError, ValueError) as exc:
                issues.append(Issue(sp, f"cannot parse system description: {exc}", "warning"))
                desc = {}
        else:
            issues.append(Issue(sp, "system description missing", "warning"))
    return SystemInfo(org=org, name=system, pod_size=pod_size_from(system, desc),
                      accelerator=desc.get("accelerator_model_name"),
                      division=desc.get("division"),
                      framework=desc.get("framework") if isinstance(desc.get("framework"),
                                                                    str) else None,
                      description=desc)


def load_packages(roots: Iterable[str]) -> list[Package]:
    """load_package of each root, every result file read once: a folder given together with
    one of its children (or a file reached through a symlink) is not counted twice, and the
    later root says which files it left to the earlier one."""
    seen: dict[str, str] = {}
    return [load_package(r, seen) for r in roots]


def load_package(root: str, seen: dict[str, str] | None = None) -> Package:
    """Loads every result_*.txt below `root` (an org folder, a folder of orgs, ...).
    `seen` maps the real path of each file already loaded to the root that loaded it; such
    files are skipped (and recorded in it)."""
    pkg = Package(root=root)
    if not os.path.isdir(root):
        pkg.issues.append(Issue(root, "package folder does not exist"))
        return pkg
    files = sorted(glob.glob(os.path.join(root, "**", "result_*.txt"), recursive=True),
                   key=_natural_key)
    if not files:
        pkg.issues.append(Issue(root, "no result_*.txt files found (empty package?)"))
        return pkg
    seen = {} if seen is None else seen
    repeated: dict[str, int] = {}
    for path in files:
        real = os.path.realpath(path)
        if real in seen:
            repeated[seen[real]] = repeated.get(seen[real], 0) + 1
            continue
        seen[real] = root
        org, system, bench_dir, org_dir = _locate(path)
        if (org, system) not in pkg.systems:
            pkg.systems[(org, system)] = load_system(org_dir, org, system, pkg.issues)
        info = pkg.systems[(org, system)]
        records, issues = parse_mllog_file(path)
        sidecar = None
        sc_path = path[:-4] + ".json"
        if os.path.exists(sc_path):
            try:
                with open(sc_path, encoding="utf-8") as fh:
                    sidecar = json.load(fh)
                if not isinstance(sidecar, dict):
                    raise ValueError("top level is not an object")
            except (OSError, ValueError) as exc:
                issues.append(Issue(sc_path, f"cannot parse sidecar: {exc}"))
                sidecar = None
        run = analyse_run(records, path, org=org, system=system, benchmark=bench_dir,
                          issues=issues, sidecar=sidecar)
        if run.division is None:
            run.division = info.division
        if info.division is None:
            info.division = run.division
        pkg.runs.append(run)
    for first, n in repeated.items():
        pkg.issues.append(Issue(root, f"{n} result file(s) already read under {first}: "
                                      f"counted once", "warning"))
    return pkg


def _natural_key(s: str):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]


# --------------------------------------------------------------------------- scoring
@dataclass
class Score:
    org: str
    system: str
    benchmark: str
    division: str | None
    pod_size: int | None
    n_runs: int
    n_required: int | None
    n_failed: int
    score_min: float | None
    valid: bool
    reason: str
    modeled_score_min: float | None = None
    accelerator: str | None = None
    family: str = ""
    scaling_factor: float = 1.0  # from the benchmark folder's scaling.json (review decision)

    def as_row(self) -> dict:
        return dataclasses.asdict(self)


def olympic_mean(times: list[float], drop: int = 1) -> float:
    """Sorts, drops `drop` fastest and slowest, averages the rest."""
    if len(times) <= 2 * drop:
        raise ValueError(f"olympic mean needs more than {2 * drop} values, got {len(times)}")
    kept = sorted(times)[drop:len(times) - drop]
    return sum(kept) / len(kept)


def score_runs(runs: list[Run], benchmark: str) -> tuple[float | None, bool, str, int]:
    """MLPerf score of one (system, benchmark) result. Returns (score, valid, reason, n_failed).

    A run that is aborted, lacks run_stop or never reaches the target counts as the
    slowest (infinite); more than one such run makes the result invalid.  A result with
    fewer runs than MLPerf requires gets a provisional score and valid=False.
    """
    times = [r.scoring_time for r in runs]
    failed = [r for r in runs if not math.isfinite(r.scoring_time)]
    drop = OLYMPIC_DROP.get(benchmark, 1)
    need = REQUIRED_RUNS.get(benchmark)
    if not runs:
        return None, False, "no runs", 0
    if len(failed) > drop:
        detail = ", ".join(f"{os.path.basename(r.path)} ({r.failure_reason()})" for r in failed)
        return None, False, (f"{len(failed)} of {len(runs)} runs did not converge "
                             f"(at most {drop} allowed): {detail}"), len(failed)
    reasons = []
    if len(times) > 2 * drop:
        score = olympic_mean(times, drop)
    else:
        finite = [t for t in times if math.isfinite(t)]
        score = sum(finite) / len(finite) if finite and not failed else None
        reasons.append(f"only {len(times)} run(s): plain mean, not an olympic mean")
    valid = True
    if need is not None and len(runs) < need:
        valid = False
        reasons.insert(0, f"only {len(runs)} of the {need} runs MLPerf requires "
                          f"(score is provisional)")
    if score is None:
        valid = False
        reasons.append("no converged run")
    if failed and valid:
        reasons.append(f"{os.path.basename(failed[0].path)} did not converge "
                       f"({failed[0].failure_reason()}) and counts as the slowest")
    return score, valid, "; ".join(reasons), len(failed)


def scaling_factor(runs: list[Run]) -> tuple[float, list[Issue]]:
    """The factor of a result's scaling.json, as the official result_summarizer applies it: the
    review committee may scale a score; the file sits in the benchmark folder beside the
    result files and holds {"scaling_factor": F}. 1.0 without one."""
    factors: dict[str, float] = {}
    issues: list[Issue] = []
    for folder in sorted({os.path.dirname(os.path.abspath(r.path)) for r in runs}):
        path = os.path.join(folder, "scaling.json")
        if not os.path.isfile(path):
            factors[folder] = 1.0
            continue
        try:
            with open(path, encoding="utf-8") as fh:
                f = json.load(fh)["scaling_factor"]
            if isinstance(f, bool) or not isinstance(f, (int, float)) or not f > 0:
                raise ValueError(f"scaling_factor {f!r} is not a positive number")
            factors[folder] = float(f)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            issues.append(Issue(path, f"cannot read the scaling factor ({exc!s}); expected "
                                      '{"scaling_factor": <positive number>}; score left '
                                      "unscaled"))
            factors[folder] = 1.0
    distinct = set(factors.values())
    if len(distinct) > 1:
        issues.append(Issue(min(factors), "the runs of one result come from folders with "
                                          f"different scaling factors {sorted(distinct)}; "
                                          "score left unscaled"))
        return 1.0, issues
    return (distinct.pop() if distinct else 1.0), issues


def group_runs(runs: Iterable[Run]) -> dict[tuple[str, str, str], list[Run]]:
    groups: dict[tuple[str, str, str], list[Run]] = {}
    for r in runs:
        groups.setdefault((r.org, r.system, r.benchmark), []).append(r)
    return groups


def score_packages(packages: list[Package]) -> list[Score]:
    systems: dict[tuple[str, str], SystemInfo] = {}
    runs: list[Run] = []
    for p in packages:
        systems.update(p.systems)
        runs.extend(p.runs)
    out = []
    for (org, system, bench), rs in group_runs(runs).items():
        score, valid, reason, n_failed = score_runs(rs, bench)
        factor, scale_issues = scaling_factor(rs)
        for i in scale_issues:
            rs[0].issues.append(i)
        notes = [reason] if reason else []
        if factor != 1.0 and score is not None:
            score *= factor
            notes.append(f"scaled by {factor:g} (scaling.json)")
        need = REQUIRED_RUNS.get(bench)
        if need is not None and len(rs) > need:
            notes.append(f"{len(rs)} runs where MLPerf requires {need}: all are scored "
                         "(two packages with the same runs given together?)")
        reason = "; ".join(notes)
        info = systems.get((org, system)) or SystemInfo(org, system,
                                                        pod_size_from(system, None))
        modeled = None
        if any(r.modeled_time_to_train_min is not None for r in rs):
            mt = [r.modeled_scoring_time for r in rs]
            drop = OLYMPIC_DROP.get(bench, 1)
            if sum(1 for t in mt if not math.isfinite(t)) <= drop:
                modeled = (olympic_mean(mt, drop) if len(mt) > 2 * drop
                           else _finite_mean(mt))
        divisions = {r.division for r in rs if r.division}
        out.append(Score(org=org, system=system, benchmark=bench,
                         division=(divisions.pop() if len(divisions) == 1 else info.division),
                         pod_size=info.pod_size, n_runs=len(rs),
                         n_required=REQUIRED_RUNS.get(bench), n_failed=n_failed,
                         score_min=score, valid=valid, reason=reason,
                         modeled_score_min=modeled, accelerator=info.accelerator,
                         family=system_family(system), scaling_factor=factor))
    out.sort(key=lambda s: (s.benchmark, s.org, s.family, s.pod_size or 0, s.system))
    return out


def _finite_mean(xs: list[float]) -> float | None:
    f = [x for x in xs if math.isfinite(x)]
    return sum(f) / len(f) if f and len(f) == len(xs) else None


if __name__ == "__main__":  # tiny self-check: print the scores of the given packages
    import sys
    pk = load_packages(sys.argv[1:])
    for s in score_packages(pk):
        sc = "invalid" if s.score_min is None else f"{s.score_min:.2f}"
        print(f"{s.org:10s} {s.system:28s} {s.benchmark:8s} {sc:>8s}  {s.reason}")
    for p in pk:
        for i in p.issues + [i for r in p.runs for i in r.issues]:
            print(i, file=sys.stderr)
