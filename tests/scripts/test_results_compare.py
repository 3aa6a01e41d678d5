"""Tests of scripts/mlperf_results.py and scripts/compare_results.py."""
import json
import math
import os
import shutil
import subprocess

import pytest

from conftest import FIXTURES, REPO, SCRIPTS

import compare_results as cr
import mlperf_results as mr

OURS = os.path.join(FIXTURES, "mlperf", "Ours")
BROKEN = os.path.join(FIXTURES, "mlperf", "Broken")

PUBLISHED = {  # MLPerf training v1.1 published scores, minutes
    ("Graphcore", "ipu-pod16-TF1", "resnet"): 28.33,
    ("Graphcore", "ipu-pod64-TF1", "resnet"): 8.50,
    ("Graphcore", "ipu-pod128-TF1", "resnet"): 5.67,
    ("Graphcore", "ipu-pod256-TF1", "resnet"): 3.79,
    ("Graphcore", "ipu-pod16-POPART-closed", "bert"): 32.70,
    ("Graphcore", "ipu-pod64-POPART-closed", "bert"): 10.56,
    ("Graphcore", "ipu-pod128-POPART-closed", "bert"): 6.86,
    ("NVIDIA", "dgxa100_ngc21.09_mxnet", "resnet"): 29.15,
    ("NVIDIA", "dgxa100_ngc21.09_pytorch", "bert"): 20.00,
}


def _scores(*dirs):
    return {(s.org, s.system, s.benchmark): s
            for s in mr.score_packages([mr.load_package(d) for d in dirs])}


# ----------------------------------------------------------------- official packages
def test_official_scores_reproduce_published(official):
    scores = _scores(os.path.join(official, "Graphcore"), os.path.join(official, "NVIDIA"))
    for key, want in PUBLISHED.items():
        s = scores[key]
        assert s.valid, (key, s.reason)
        assert round(s.score_min, 2) == pytest.approx(want, abs=1e-9), (key, s.score_min)


def test_official_folder_of_orgs_and_pod_sizes(official):
    scores = _scores(official)  # one folder holding both orgs
    assert {k for k in PUBLISHED} <= set(scores)
    pods = {k[1]: s.pod_size for k, s in scores.items()}
    assert pods["ipu-pod16-TF1"] == 16 and pods["ipu-pod128-TF1"] == 128
    assert pods["ipu-pod256-TF1"] == 256 and pods["dgxa100_ngc21.09_mxnet"] == 8
    # The Graphcore ResNet results each contain one aborted run, counted as the slowest.
    for p in (16, 64, 128, 256):
        s = scores[("Graphcore", f"ipu-pod{p}-TF1", "resnet")]
        assert s.n_failed == 1 and "aborted" in s.reason


def test_official_run_metrics(official):
    pkg = mr.load_package(os.path.join(official, "Graphcore"))
    assert not [i for i in pkg.issues if i.severity == "error"]
    r = next(r for r in pkg.runs if r.system == "ipu-pod16-TF1" and r.run_index == 0)
    assert r.status == "aborted" and not r.converged and math.isinf(r.scoring_time)
    r = next(r for r in pkg.runs if r.system == "ipu-pod16-TF1" and r.run_index == 1)
    assert r.converged and r.global_batch_size == 3200 and r.epochs_to_converge is not None
    assert r.final_quality >= 0.759 and len(r.eval_curve) > 5
    b = next(r for r in pkg.runs if r.system == "ipu-pod16-POPART-closed" and r.run_index == 0)
    # Graphcore BERT logs samples in eval_accuracy's epoch_num (and run_stop as INTERVAL_START).
    assert b.converged and b.samples_to_converge == 2625000 and b.epochs_to_converge is None
    assert b.time_to_train_min == pytest.approx(33.978, abs=1e-3)


def test_official_nvidia_bert_samples_from_train_samples(official):
    pkg = mr.load_package(os.path.join(official, "NVIDIA"))
    r = next(r for r in pkg.runs if r.benchmark == "bert" and r.run_index == 0)
    # NVIDIA logs a constant epoch_num of 1; samples come from the final train_samples.
    assert r.samples_to_converge == 2550016
    assert all(p.samples is None for p in r.eval_curve)


def test_official_cli_outputs(official, tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run(
        ["/usr/bin/python3", "-B", os.path.join(SCRIPTS, "compare_results.py"),
         os.path.join(official, "Graphcore"), "--package", os.path.join(official, "NVIDIA"),
         "--vs", "dgxa100*", "ipu-pod16-*", "--out", str(out)],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    md = proc.stdout
    assert "| resnet | Graphcore | ipu-pod256-TF1 | closed | 256 | 5 | 1 | 3.79 | yes |" in md
    assert "## Scaling across pod sizes" in md and "## System A vs system B" in md
    for f in ("runs.csv", "scores.csv", "scaling.csv", "vs.csv", "summary.json",
              "time_to_train_by_pod.png", "scaling_efficiency.png", "accuracy_curves.png"):
        assert (out / f).stat().st_size > 0, f
    summary = json.loads((out / "summary.json").read_text())
    sc = {(s["system"], s["benchmark"]): s for s in summary["scaling"]}
    assert sc[("ipu-pod64-TF1", "resnet")]["speedup"] == pytest.approx(28.3345 / 8.5037,
                                                                       rel=1e-3)
    assert sc[("ipu-pod64-TF1", "resnet")]["efficiency"] == pytest.approx(
        28.3345 / 8.5037 / 4, rel=1e-3)
    vs = {(v["benchmark"], v["system_b"]): v for v in summary["vs"]}
    assert vs[("resnet", "Graphcore/ipu-pod16-TF1")]["speedup_b_over_a"] == pytest.approx(
        29.1466 / 28.3345, rel=1e-3)
    import pandas as pd
    runs = pd.read_csv(out / "runs.csv")
    assert len(runs) == 5 * 5 + 10 * 7  # 5 ResNet systems, 7 BERT systems


def test_modeled_vs_published(official):
    res = cr.analyse([OURS, os.path.join(official, "Graphcore")])
    rows = [m for m in res["modeled"] if m["benchmark"] == "resnet"]
    assert len(rows) == 1
    m = rows[0]
    assert m["published_system"] == "Graphcore/ipu-pod16-TF1"
    assert m["modeled_min"] == pytest.approx(29.0)
    assert m["modeled_over_published"] == pytest.approx(29.0 / 28.3345, rel=1e-4)
    assert "## Modeled vs published" in cr.render_markdown(res)


# ----------------------------------------------------------------- our package (fixture)
def test_our_package_prefixes_extra_keys_sidecar():
    pkg = mr.load_package(OURS)
    assert len(pkg.runs) == 5
    assert not [i for r in pkg.runs for i in r.issues if i.severity == "error"]
    by = {r.run_index: r for r in pkg.runs}
    assert by[0].time_to_train_min == pytest.approx(30.0)
    assert by[0].modeled_time_to_train_min == pytest.approx(27.0)
    assert by[2].modeled_time_to_train_min == pytest.approx(29.0)  # from result_2.json
    assert by[4].status == "aborted" and not by[4].converged
    assert by[0].epochs_to_converge == 16 and by[0].global_batch_size == 1024
    assert by[0].samples_to_converge == 16 * 1281167
    s = _scores(OURS)[("Ours", "ipu-pod16-emu", "resnet")]
    assert s.valid and s.pod_size == 16
    assert s.score_min == pytest.approx(32.0) and s.modeled_score_min == pytest.approx(29.0)


def test_modeled_without_published_is_reported():
    res = cr.analyse([OURS])
    assert res["modeled"][0]["published_system"] is None
    assert "no published result" in res["modeled"][0]["note"]


# ----------------------------------------------------------------- scoring rules
def _run(t, ok=True):
    r = mr.Run(path=f"result_{t}.txt", org="o", system="s", benchmark="resnet", run_index=0)
    r.status = "success" if ok else "aborted"
    r.converged = ok
    r.time_to_train_min = t
    return r


def test_olympic_mean_and_invalid_rules():
    assert mr.olympic_mean([5, 1, 3, 4, 2]) == pytest.approx(3.0)
    score, valid, reason, nf = mr.score_runs([_run(t) for t in (10, 11, 12, 13, 14)], "resnet")
    assert valid and score == pytest.approx(12.0) and nf == 0
    score, valid, reason, nf = mr.score_runs(
        [_run(10), _run(11), _run(12), _run(13), _run(9, ok=False)], "resnet")
    assert valid and score == pytest.approx(12.0) and nf == 1  # failed run = slowest
    score, valid, reason, nf = mr.score_runs(
        [_run(10), _run(11), _run(12), _run(13, ok=False), _run(9, ok=False)], "resnet")
    assert not valid and score is None and nf == 2 and "2 of 5 runs did not converge" in reason
    score, valid, reason, _ = mr.score_runs([_run(10), _run(11), _run(12)], "resnet")
    assert not valid and score == pytest.approx(11.0) and "only 3 of the 5" in reason


def test_success_status_below_target_does_not_count():
    recs, issues = mr.parse_mllog_lines([
        ':::MLLOG {"key": "run_start", "time_ms": 0, "event_type": "INTERVAL_START"}',
        ':::MLLOG {"key": "eval_accuracy", "time_ms": 1000, "value": 0.70, '
        '"metadata": {"epoch_num": 1}}',
        ':::MLLOG {"key": "run_stop", "time_ms": 60000, "event_type": "INTERVAL_END", '
        '"metadata": {"status": "success"}}'])
    r = mr.analyse_run(recs, "result_0.txt", benchmark="resnet", issues=issues)
    assert r.time_to_train_min == pytest.approx(1.0) and not r.converged
    assert any("never reached" in i.message for i in r.issues)


def test_quality_target_override():
    recs, _ = mr.parse_mllog_lines([
        ':::MLLOG {"key": "quality_target", "time_ms": 0, "value": 0.5}',
        ':::MLLOG {"key": "run_start", "time_ms": 0}',
        ':::MLLOG {"key": "eval_accuracy", "time_ms": 1000, "value": 0.55, '
        '"metadata": {"epoch_num": 1}}',
        ':::MLLOG {"key": "run_stop", "time_ms": 120000, "metadata": {"status": "success"}}'])
    r = mr.analyse_run(recs, "result_0.txt", benchmark="resnet50")
    assert r.benchmark == "resnet" and r.quality_target == 0.5 and r.converged
    assert r.epochs_to_converge == 1


# ----------------------------------------------------------------- malformed inputs
def test_malformed_package_per_file_errors():
    pkg = mr.load_package(BROKEN)
    by = {r.run_index: r for r in pkg.runs}
    assert len(by) == 5
    # Bad JSON line: a warning naming file and line; the run is still measured.
    w = [i for i in by[1].issues if "invalid JSON" in i.message]
    assert len(w) == 1 and w[0].line == 9 and w[0].path.endswith("result_1.txt")
    assert by[1].converged and by[1].time_to_train_min == pytest.approx(11.0)
    # Missing run_stop: an error, and the run counts as not converged.
    assert by[2].status == "no_run_stop" and not by[2].converged
    assert any(i.severity == "error" and "missing run_stop" in i.message for i in by[2].issues)
    # No MLLOG lines at all.
    assert by[3].status == "empty" and any("no :::MLLOG" in i.message for i in by[3].issues)
    # The good files are still reported.
    assert by[0].converged and by[4].converged
    s = _scores(BROKEN)[("Broken", "sys-a", "resnet")]
    assert not s.valid and s.score_min is None
    assert "result_2.txt" in s.reason and "result_3.txt" in s.reason


def test_cli_reports_bad_files_and_empty_folder_but_keeps_others(tmp_path):
    empty = tmp_path / "Empty"
    (empty / "results").mkdir(parents=True)
    proc = subprocess.run(
        ["/usr/bin/python3", "-B", os.path.join(SCRIPTS, "compare_results.py"), BROKEN,
         str(empty), OURS, "--runs", "--out", str(tmp_path / "o"), "--no-plots"],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    md = proc.stdout
    assert "| resnet | Ours | ipu-pod16-emu | closed | 16 | 5 | 1 | 32.00 | yes |" in md
    assert "## Problems" in md
    assert "no result_*.txt files found" in md and str(empty) in md
    assert "result_1.txt | 9 | invalid JSON" in md
    assert "missing run_stop" in md and "result_2.txt" in proc.stderr
    probs = (tmp_path / "o" / "problems.csv").read_text()
    assert "missing run_stop" in probs and "invalid JSON" in probs
    # --strict turns per-file errors into a failing exit status.
    proc = subprocess.run(
        ["/usr/bin/python3", "-B", os.path.join(SCRIPTS, "compare_results.py"), BROKEN,
         "--strict", "--no-plots"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1


def test_cli_nothing_found(tmp_path):
    proc = subprocess.run(
        ["/usr/bin/python3", "-B", os.path.join(SCRIPTS, "compare_results.py"), str(tmp_path)],
        capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "no runs found" in proc.stderr


def test_unreadable_system_json_and_sidecar(tmp_path):
    pkg_dir = tmp_path / "Org"
    shutil.copytree(OURS, pkg_dir)
    (pkg_dir / "systems" / "ipu-pod16-emu.json").write_text("{not json")
    (pkg_dir / "results" / "ipu-pod16-emu" / "resnet" / "result_2.json").write_text("[")
    pkg = mr.load_package(str(pkg_dir))
    assert any("cannot parse system description" in i.message for i in pkg.issues)
    assert pkg.systems[("Org", "ipu-pod16-emu")].pod_size == 16  # from the name
    r2 = next(r for r in pkg.runs if r.run_index == 2)
    assert any("cannot parse sidecar" in i.message for i in r2.issues)


def test_plots_with_fixture_packages(tmp_path):
    res = cr.analyse([OURS, BROKEN])
    files = cr.make_plots(res, str(tmp_path))
    names = {os.path.basename(f) for f in files}
    assert {"time_to_train_by_pod.png", "accuracy_curves.png"} <= names
    for f in files:
        with open(f, "rb") as fh:
            assert fh.read(8) == b"\x89PNG\r\n\x1a\n"


# ----------------------------------------------------------------- projections
# `run_benchmark --project-only --all-pod-sizes --json` output for ResNet-50 (2026-12-07).
PROJECTION = os.path.join(FIXTURES, "projection", "resnet50_all_pods.json")


def test_projections_join_the_modeled_table_without_packages():
    res = cr.analyse([], projection_files=[PROJECTION])
    rows = {r["pod_size"]: r for r in res["modeled"]}
    assert sorted(rows) == [1, 4, 16, 64, 128, 256]
    assert res["projections"] == res["modeled"]
    with open(PROJECTION) as fh:
        doc = {p["pod_size"]: p for p in json.load(fh)}
    for pod, r in rows.items():
        assert r["system"] == f"projection/IPU-POD{pod}"
        assert r["modeled_min"] == doc[pod]["modeled_minutes"]
        assert r["fits"] == doc[pod]["fit"]["fits"]
        assert ("priced as if it fit" in r["note"]) == (not r["fits"])
    # Published times recorded by run_benchmark stand in when no package is given.
    assert rows[256]["published_min"] == pytest.approx(3.795)
    assert rows[256]["modeled_over_published"] == pytest.approx(
        doc[256]["modeled_minutes"] / 3.795)
    assert rows[1]["published_min"] is None and "no published result" in rows[1]["note"]
    assert rows[16]["configuration"] == "16x20x10=3200, 38 ep"
    md = cr.render_markdown(res)
    assert "| resnet | projection/IPU-POD64 | 64 | 64x20x3=3840, 38 ep |" in md


def test_projections_beside_the_official_packages(official):
    res = cr.analyse([os.path.join(official, "Graphcore")], projection_files=[PROJECTION])
    rows = {r["pod_size"]: r for r in res["modeled"] if r["system"].startswith("projection/")}
    assert rows[256]["published_system"] == "Graphcore/ipu-pod256-TF1"
    assert rows[256]["published_min"] == pytest.approx(3.7949, abs=1e-4)
    assert rows[64]["published_system"] == "Graphcore/ipu-pod64-TF1"


def test_projection_cli_writes_table_and_plots(tmp_path):
    single = tmp_path / "pod16.json"
    with open(PROJECTION) as fh:
        single.write_text(json.dumps(json.load(fh)[2]))  # one pod size: a JSON object
    out = tmp_path / "out"
    proc = subprocess.run(
        ["/usr/bin/python3", "-B", os.path.join(SCRIPTS, "compare_results.py"),
         "--projection", str(single), "--out", str(out)],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "| resnet | projection/IPU-POD16 | 16 |" in proc.stdout
    for f in ("modeled.csv", "projection_vs_published.png", "modeled_vs_published.png"):
        assert (out / f).stat().st_size > 0, f


def test_projection_file_that_is_not_one_is_named(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"system": "IPU-POD16"}]))
    proc = subprocess.run(
        ["/usr/bin/python3", "-B", os.path.join(SCRIPTS, "compare_results.py"),
         "--projection", str(bad)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert f"{bad}: projection 0 lacks mlperf_benchmark" in proc.stderr


# ------------------------------------------------- a folder and its child; scaling.json
VENV_PYTHON = os.path.join(REPO, ".venv", "bin", "python")

# The official result_summarizer's own reading and arithmetic (its compliance step left out:
# the mlperf-logging release in .venv applies checks to ruleset 1.1.0 that the published v1.1
# logs predate): run_start/run_stop of each file, olympic average, scaling.json.
OFFICIAL_SCORE = r"""
import glob, json, sys
from mlperf_logging.result_summarizer import result_summarizer as rs
from mlperf_logging.compliance_checker.mlp_parser import parse_file
folder = sys.argv[1]
scores = []
for f in glob.glob(folder + "/result_*.txt"):
    lines, failed = parse_file(f, ruleset="1.1.0")
    start, stop = rs._query_run_start_stop(lines)
    scores.append((stop - start) / 60000)
print(json.dumps(rs._compute_olympic_average(scores, 0, 1) * rs._get_scaling_factor(folder)))
"""


def _has_official_summarizer():
    return os.path.exists(VENV_PYTHON) and subprocess.run(
        [VENV_PYTHON, "-c", "import mlperf_logging.result_summarizer"],
        capture_output=True).returncode == 0


def test_folder_and_its_child_count_each_run_once():
    alone = _scores(OURS)
    key = ("Ours", "ipu-pod16-emu", "resnet")
    pkgs = mr.load_packages([OURS, os.path.join(OURS, "results", "ipu-pod16-emu")])
    both = {(s.org, s.system, s.benchmark): s for s in mr.score_packages(pkgs)}
    assert both[key].n_runs == alone[key].n_runs == 5
    assert both[key].score_min == alone[key].score_min
    assert any("5 result file(s) already read" in i.message for i in pkgs[1].issues)
    # The aborted run is reported once, not twice.
    failed = [r for p in pkgs for r in p.runs if not math.isfinite(r.scoring_time)]
    assert len(failed) == 1


def test_official_parent_and_child_given_together(official):
    pkgs = mr.load_packages([official, os.path.join(official, "NVIDIA")])
    scores = {(s.org, s.system, s.benchmark): s for s in mr.score_packages(pkgs)}
    s = scores[("NVIDIA", "dgxa100_ngc21.09_pytorch", "bert")]
    assert s.n_runs == 10 and round(s.score_min, 2) == pytest.approx(20.00, abs=1e-9)
    assert "requires" not in s.reason


def test_more_runs_than_required_are_pointed_out(tmp_path):
    # The same five runs under a second system folder name would be another system; copies
    # under new file names in the same folder are more runs of one result.
    dst = tmp_path / "Ours"
    shutil.copytree(OURS, dst)
    bench = dst / "results" / "ipu-pod16-emu" / "resnet"
    for i in range(5):
        shutil.copy(bench / f"result_{i}.txt", bench / f"result_{i + 5}.txt")
    s = _scores(str(dst))[("Ours", "ipu-pod16-emu", "resnet")]
    assert s.n_runs == 10 and "10 runs where MLPerf requires 5" in s.reason


def test_scaling_json_multiplies_the_score(tmp_path):
    dst = tmp_path / "Ours"
    shutil.copytree(OURS, dst)
    key = ("Ours", "ipu-pod16-emu", "resnet")
    plain = _scores(str(dst))[key]
    (dst / "results" / "ipu-pod16-emu" / "resnet" / "scaling.json").write_text(
        '{"scaling_factor": 1.023}')
    scaled = _scores(str(dst))[key]
    assert scaled.score_min == pytest.approx(plain.score_min * 1.023, rel=1e-12)
    assert scaled.scaling_factor == 1.023 and "scaled by 1.023" in scaled.reason


@pytest.mark.parametrize("text", ['{"scaling": 2}', '{"scaling_factor": -1}', "not json",
                                  '{"scaling_factor": "1.1"}'])
def test_bad_scaling_json_is_named_and_leaves_the_score(tmp_path, text):
    dst = tmp_path / "Ours"
    shutil.copytree(OURS, dst)
    key = ("Ours", "ipu-pod16-emu", "resnet")
    plain = _scores(str(dst))[key]
    path = dst / "results" / "ipu-pod16-emu" / "resnet" / "scaling.json"
    path.write_text(text)
    pkg = mr.load_package(str(dst))
    s = {(x.org, x.system, x.benchmark): x for x in mr.score_packages([pkg])}[key]
    assert s.score_min == plain.score_min and s.scaling_factor == 1.0
    msgs = [str(i) for r in pkg.runs for i in r.issues]
    assert any(str(path) in m and "scaling factor" in m for m in msgs), msgs


def test_scaling_matches_the_official_summarizer(official, tmp_path):
    if not _has_official_summarizer():
        pytest.skip("mlperf-logging is not installed in .venv (scripts/setup.sh installs it)")
    src = os.path.join(official, "NVIDIA")
    dst = tmp_path / "NVIDIA"
    shutil.copytree(src, dst)
    folder = dst / "results" / "dgxa100_ngc21.09_pytorch" / "bert"
    (folder / "scaling.json").write_text('{"scaling_factor": 1.023}')
    want = json.loads(subprocess.run([VENV_PYTHON, "-c", OFFICIAL_SCORE, str(folder)],
                                     check=True, capture_output=True, text=True).stdout)
    s = _scores(str(dst))[("NVIDIA", "dgxa100_ngc21.09_pytorch", "bert")]
    assert want == pytest.approx(20.00 * 1.023, abs=0.01)
    assert s.score_min == pytest.approx(want, rel=1e-9)


# ----------------------------------------------------------------- plot helpers
def test_label_offsets_stack_nearly_equal_values():
    # Two systems at pod 16 with 28.33 and 28.50 minutes; one far away; another x.
    off = cr.label_offsets([(16, 28.50), (16, 28.33), (16, 40.0), (64, 28.4)])
    assert off[1] == 4 and off[0] == 13  # stacked above the lower one
    assert off[2] == 4 and off[3] == 4


def test_evaluations_logged_after_training_are_recognised():
    steady = [{"time_min": t} for t in (5.0, 10.0, 15.0, 20.0)]
    after = [{"time_min": t} for t in (30.0, 30.1, 30.2, 30.3)]
    assert not cr.evaluated_after_training(steady)
    assert cr.evaluated_after_training(after)
    assert not cr.evaluated_after_training(after[:2])  # too few points to say
