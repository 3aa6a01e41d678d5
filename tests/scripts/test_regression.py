"""Tests of scripts/bench_regression.py, update_baseline.py, record_tta.py and nightly.sh."""
import json
import os
import shutil
import stat
import subprocess

import pytest

from conftest import FIXTURES, REPO, SCRIPTS

import bench_regression as br

G = os.path.join(FIXTURES, "gbench")
OURS = os.path.join(FIXTURES, "mlperf", "Ours")
PY = "/usr/bin/python3"


def _cmp(old, new, **kw):
    return br.run(os.path.join(G, old), os.path.join(G, new), **kw)


def _by_name(doc):
    return {r["name"]: r for r in doc["benchmarks"]}


def test_loads_iterations_and_ignores_aggregates():
    data, ctx = br.load_gbench_file(os.path.join(G, "baseline.json"))
    assert set(data) == {"BM_Conv2d/64/3", "BM_MatMul/512", "BM_Compile/resnet50"}
    assert all(len(e["times_ns"]) == 10 for e in data.values())
    # time units are normalised to ns
    assert 0.8e6 < min(data["BM_MatMul/512"]["times_ns"]) < 0.9e6
    assert 2.4e9 < min(data["BM_Compile/resnet50"]["times_ns"]) < 2.6e9
    assert ctx["host_name"] == "nightly"


def test_injected_20pct_slowdown_is_flagged():
    doc = _cmp("baseline.json", "slowdown_20pct.json")
    rows = _by_name(doc)
    r = rows["BM_MatMul/512"]
    assert r["status"] == "regression" and doc["status"] == "fail"
    assert doc["failing"] == ["BM_MatMul/512"]
    assert r["change"] == pytest.approx(0.20, abs=0.03) and r["p_value"] < 0.001
    assert rows["BM_Conv2d/64/3"]["status"] == "ok"
    lines = br.summary_lines(doc["benchmarks"], doc["tta"])
    line = next(s for s in lines if s.startswith("REGRESSION"))
    # names the benchmark, the old and new medians and the p-value
    assert "BM_MatMul/512" in line and "us ->" in line and "p=" in line


def test_identical_runs_are_not_flagged():
    doc = _cmp("baseline.json", "baseline.json")
    assert doc["status"] == "pass"
    assert all(r["status"] == "ok" and r["change"] == 0.0 and r["p_value"] > 0.4
               for r in doc["benchmarks"])


def test_noise_is_not_flagged():
    doc = _cmp("baseline.json", "rerun_noise.json")
    assert doc["status"] == "pass", doc["failing"]


def test_small_significant_change_below_threshold_is_not_flagged():
    doc = _cmp("baseline.json", "small_slowdown_2pct.json")
    r = _by_name(doc)["BM_Conv2d/64/3"]
    assert r["p_value"] < 0.05 and 0.0 < r["change"] < 0.05
    assert r["status"] == "ok" and doc["status"] == "pass"
    # ...but a tighter threshold flags it.
    doc = _cmp("baseline.json", "small_slowdown_2pct.json", threshold=0.01)
    assert _by_name(doc)["BM_Conv2d/64/3"]["status"] == "regression"


def test_improvement_is_reported_not_failed():
    doc = _cmp("slowdown_20pct.json", "baseline.json")
    assert _by_name(doc)["BM_MatMul/512"]["status"] == "improvement"
    assert doc["status"] == "pass"


def test_missing_benchmark_is_reported():
    doc = _cmp("baseline.json", "missing_and_new.json")
    rows = _by_name(doc)
    assert rows["BM_Compile/resnet50"]["status"] == "missing"
    assert rows["BM_Softmax/1024"]["status"] == "new_only"
    assert doc["status"] == "pass"
    lines = br.summary_lines(doc["benchmarks"], [])
    assert any(s.startswith("MISSING: BM_Compile/resnet50") for s in lines)
    assert _cmp("baseline.json", "missing_and_new.json", fail_on_missing=True)["status"] == "fail"


BASELINE = os.path.join(REPO, "benchmarks", "baseline")


def test_injected_slowdown_on_the_committed_baseline(tmp_path):
    """The real baseline's repetitions, one benchmark made 20% slower: only it is flagged."""
    if not os.path.exists(os.path.join(BASELINE, "kernels_bench.json")):
        pytest.skip("no committed baseline")
    slow = "BM_OursConvForward/hw:56/c:64/real_time"
    d = json.load(open(os.path.join(BASELINE, "kernels_bench.json")))
    for b in d["benchmarks"]:
        if b.get("run_name") == slow and b.get("run_type") == "iteration":
            b["real_time"] *= 1.2
            b["cpu_time"] *= 1.2
    new = tmp_path / "new"
    new.mkdir()
    (new / "kernels_bench.json").write_text(json.dumps(d))
    base = tmp_path / "base"
    base.mkdir()
    shutil.copy(os.path.join(BASELINE, "kernels_bench.json"), base)
    for metric in ("cpu_time", "real_time"):
        doc = br.run(str(base), str(new), threshold=0.10, metric=metric)
        assert doc["failing"] == [slow], metric
        r = _by_name(doc)[slow]
        assert r["change"] == pytest.approx(0.20, abs=1e-9) and r["p_value"] < 0.05
    # and the whole committed baseline against itself passes
    assert br.run(BASELINE, BASELINE, threshold=0.10, metric="cpu_time")["status"] == "pass"


def test_too_few_repetitions_are_not_tested(tmp_path):
    d = json.load(open(os.path.join(G, "slowdown_20pct.json")))
    d["benchmarks"] = [b for b in d["benchmarks"]
                       if b["run_type"] == "iteration" and b["repetition_index"] < 2]
    p = tmp_path / "two.json"
    p.write_text(json.dumps(d))
    doc = br.run(os.path.join(G, "baseline.json"), str(p))
    assert all(r["status"] == "insufficient" for r in doc["benchmarks"])


def test_error_occurred_entries(tmp_path):
    d = json.load(open(os.path.join(G, "baseline.json")))
    for b in d["benchmarks"]:
        if b["name"] == "BM_MatMul/512":
            b["error_occurred"], b["error_message"] = True, "out of memory"
    p = tmp_path / "err.json"
    p.write_text(json.dumps(d))
    doc = br.run(os.path.join(G, "baseline.json"), str(p))
    assert _by_name(doc)["BM_MatMul/512"]["status"] == "error"


def test_cli_exit_codes_and_output(tmp_path):
    script = os.path.join(SCRIPTS, "bench_regression.py")
    out = tmp_path / "c.json"
    p = subprocess.run([PY, "-B", script, os.path.join(G, "baseline.json"),
                        os.path.join(G, "slowdown_20pct.json"), "--json-out", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1
    assert "| BM_MatMul/512 | REGRESSION |" in p.stdout
    assert "REGRESSION: BM_MatMul/512" in p.stderr
    assert json.loads(out.read_text())["status"] == "fail"
    p = subprocess.run([PY, "-B", script, os.path.join(G, "baseline.json"),
                        os.path.join(G, "rerun_noise.json")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    p = subprocess.run([PY, "-B", script, os.path.join(G, "baseline.json"), str(bad)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "cannot read" in p.stderr


def test_folders_are_merged(tmp_path):
    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir()
    new.mkdir()
    shutil.copy(os.path.join(G, "baseline.json"), old / "kernels_bench.json")
    shutil.copy(os.path.join(G, "slowdown_20pct.json"), new / "kernels_bench.json")
    (new / "comparison.json").write_text('{"status": "pass"}')  # not a benchmark file
    doc = br.run(str(old), str(new))
    assert doc["failing"] == ["BM_MatMul/512"]


# ----------------------------------------------------------------- time to accuracy
def _tta(tmp_path, name, **kw):
    rec = {"name": "resnet/ipu-pod1/mini", "status": "success", "converged": True,
           "time_to_train_s": 100.0, "final_quality": 0.80, "epochs_to_converge": 10}
    rec.update(kw)
    d = tmp_path / name
    d.mkdir()
    (d / "tta.json").write_text(json.dumps({"kind": "time_to_accuracy", "runs": [rec]}))
    return str(d)


def test_convergence_regression_is_caught(tmp_path):
    base = _tta(tmp_path, "base")
    assert br.run(base, _tta(tmp_path, "same", time_to_train_s=105.0))["status"] == "pass"
    for i, kw in enumerate([dict(converged=False, status="aborted"),
                            dict(final_quality=0.70),
                            dict(epochs_to_converge=14),
                            dict(time_to_train_s=150.0)]):
        doc = br.run(base, _tta(tmp_path, f"bad{i}", **kw))
        assert doc["status"] == "fail", kw
        assert doc["tta"][0]["status"] == "regression"


def test_record_tta_from_result_package(tmp_path):
    out = tmp_path / "tta.json"
    p = subprocess.run([PY, "-B", os.path.join(SCRIPTS, "record_tta.py"), OURS, "-o", str(out),
                        "--label", "mini"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    runs = {r["name"]: r for r in json.loads(out.read_text())["runs"]}
    r0 = runs["resnet/ipu-pod16-emu/mini#0"]
    assert r0["converged"] and r0["time_to_train_s"] == pytest.approx(1800.0)
    assert r0["modeled_time_to_train_s"] == pytest.approx(27 * 60.0)
    assert not runs["resnet/ipu-pod16-emu/mini#4"]["converged"]


# ----------------------------------------------------------------- update_baseline
def _run_dir(tmp_path, name, bench_file, comparison=None, tta=None):
    d = tmp_path / name
    d.mkdir()
    shutil.copy(os.path.join(G, bench_file), d / "kernels_bench.json")
    if comparison is not None:
        (d / "comparison.json").write_text(json.dumps(comparison))
    if tta is not None:
        (d / "tta.json").write_text(json.dumps({"runs": [tta]}))
    return d


def _update(*args):
    return subprocess.run([PY, "-B", os.path.join(SCRIPTS, "update_baseline.py"), *args],
                          capture_output=True, text=True, timeout=60)


def test_update_baseline_copies_a_good_run(tmp_path):
    run = _run_dir(tmp_path, "run", "rerun_noise.json", {"status": "pass", "failing": []},
                   {"name": "x", "converged": True})
    (run / "run_manifest.json").write_text(json.dumps(
        {"git_rev": "abc123", "host": "runner1", "cpus": 2, "date_utc": "2026-12-02T02:17:00Z",
         "suites_conf": "benchmarks/nightly.conf", "mem_limit_mb": 18000, "crashed": [],
         "durations_s": {"kernels_bench": 120.0, "tta": 60.0}}))
    base = tmp_path / "baseline"
    p = _update(str(run), "--baseline", str(base), "--note", "quiet machine")
    assert p.returncode == 0, p.stderr
    readme = (base / "README.md").read_text()
    for text in ["commit: `abc123`", "machine: runner1", "2 CPUs", "total 3.0 min",
                 "note: quiet machine", "| kernels_bench.json | 3 benchmarks, 10 repetitions |",
                 "| tta.json | x: "]:
        assert text in readme, text
    assert (base / "kernels_bench.json").read_bytes() == (run / "kernels_bench.json").read_bytes()
    assert (base / "tta.json").exists()
    man = json.loads((base / "baseline_manifest.json").read_text())
    assert man["files"] == ["kernels_bench.json", "tta.json"] and not man["forced"]
    # and bench_regression ignores the manifest
    assert br.run(str(base), str(run))["status"] == "pass"


def test_update_baseline_refuses_failed_comparison_unless_forced(tmp_path):
    run = _run_dir(tmp_path, "run", "slowdown_20pct.json",
                   {"status": "fail", "failing": ["BM_MatMul/512"]})
    base = tmp_path / "baseline"
    p = _update(str(run), "--baseline", str(base))
    assert p.returncode == 1 and "FAILED its comparison" in p.stderr
    assert "BM_MatMul/512" in p.stderr and not base.exists()
    p = _update(str(run), "--baseline", str(base), "--force")
    assert p.returncode == 0, p.stderr
    assert json.loads((base / "baseline_manifest.json").read_text())["forced"]


def test_update_baseline_refuses_non_converged_tta(tmp_path):
    run = _run_dir(tmp_path, "run", "baseline.json", {"status": "pass"},
                   {"name": "resnet/x", "converged": False, "status": "aborted"})
    p = _update(str(run), "--baseline", str(tmp_path / "b"))
    assert p.returncode == 1 and "did not converge" in p.stderr


def test_update_baseline_dry_run_and_prune(tmp_path):
    run = _run_dir(tmp_path, "run", "baseline.json", {"status": "pass"})
    base = tmp_path / "baseline"
    base.mkdir()
    (base / "old_bench.json").write_text(open(os.path.join(G, "baseline.json")).read())
    p = _update(str(run), "--baseline", str(base), "--prune", "--dry-run")
    assert p.returncode == 0 and "would remove" in p.stdout
    assert (base / "old_bench.json").exists() and not (base / "kernels_bench.json").exists()
    p = _update(str(run), "--baseline", str(base), "--prune")
    assert p.returncode == 0
    assert not (base / "old_bench.json").exists() and (base / "kernels_bench.json").exists()


# ----------------------------------------------------------------- nightly.sh end to end
FAKE_BENCH = """#!/bin/sh
exec %s -B %s %s "$@"
"""

FAKE_HARNESS = """#!/bin/sh
# Fake harness: writes a small MLPerf result package (FAKE_RESULT, else %s) into --results-dir.
while [ $# -gt 0 ]; do
  case "$1" in --results-dir) dir="$2"; shift;; esac
  shift
done
mkdir -p "$dir/Ours/results/ipu-pod1-emu/resnet"
cp "${FAKE_RESULT:-%s}" "$dir/Ours/results/ipu-pod1-emu/resnet/result_0.txt"
"""
TTA = os.path.join(FIXTURES, "tta")
MINI_LOG = os.path.join(TTA, "run_benchmark_mini_result_0.txt")
SMALL_CNN_LOG = os.path.join(TTA, "train_small_cnn.log")


def _exe(path, text):
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _fake_suite(build, name, fixture):
    d = build / "benchmarks" / name.replace("_bench", "")
    d.mkdir(parents=True, exist_ok=True)
    _exe(d / name, FAKE_BENCH % (PY, os.path.join(os.path.dirname(__file__), "fake_gbench.py"),
                                 fixture))


def _renamed_fixture(tmp_path, fixture, prefix):
    """A copy of a fixture with every benchmark renamed (a second suite's figures)."""
    d = json.load(open(os.path.join(G, fixture)))
    for b in d["benchmarks"]:
        b["name"] = prefix + b["name"]
        b["run_name"] = prefix + b["run_name"]
    p = tmp_path / f"{prefix.strip('/')}_{fixture}"
    p.write_text(json.dumps(d))
    return str(p)


def _nightly(tmp_path, fixture, baseline_dir, harness=True, small_cnn=None, extra_suites=(),
             env_extra=None, tag=""):
    build = tmp_path / "build"
    _fake_suite(build, "kernels_bench", os.path.join(G, fixture))
    for name, path in extra_suites:
        _fake_suite(build, name, path)
    (build / "benchmarks" / "kernels" / "not_a_bench.txt").write_text("x")
    if harness:
        (build / "harness").mkdir(exist_ok=True)
        _exe(build / "harness" / "run_benchmark", FAKE_HARNESS % (MINI_LOG, MINI_LOG))
    if small_cnn:  # a train_small_cnn that prints the given log
        (build / "harness").mkdir(exist_ok=True)
        _exe(build / "harness" / "train_small_cnn", f"#!/bin/sh\ncat '{small_cnn}'\n")
    out = tmp_path / ("out_" + fixture.replace(".json", "") + tag)
    env = dict(os.environ, NIGHTLY_SKIP_BUILD="1", NIGHTLY_BUILD_DIR=str(build),
               NIGHTLY_OUT=str(out), NIGHTLY_BASELINE=str(baseline_dir),
               NIGHTLY_GIT_REV="test", NIGHTLY_REPETITIONS="10", PYTHONDONTWRITEBYTECODE="1",
               NIGHTLY_SUITES_CONF=os.devnull,  # not the real suites' filters
               NIGHTLY_TTA_BENCHMARKS="resnet50")  # the fake harness writes ResNet's log
    env.pop("GITHUB_STEP_SUMMARY", None)
    env.update(env_extra or {})
    p = subprocess.run(["bash", os.path.join(SCRIPTS, "nightly.sh")], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=300)
    return p, out


def test_nightly_end_to_end(tmp_path):
    base = tmp_path / "baseline"
    base.mkdir()
    # No baseline yet: passes and says how to record one.
    p, out = _nightly(tmp_path, "baseline.json", base, small_cnn=SMALL_CNN_LOG)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "no baseline" in p.stdout and (out / "kernels_bench.json").exists()
    log = (out / "kernels_bench.log").read_text()
    assert "--benchmark_repetitions=10" in log
    # one process per benchmark, each with an anchored, escaped filter
    assert r"--benchmark_filter=^BM_Conv2d/64/3$" in log
    assert set(br.load_gbench_file(str(out / "kernels_bench.json"))[0]) == \
        set(br.load_gbench_file(os.path.join(G, "baseline.json"))[0])
    tta = {r["name"]: r for r in json.loads((out / "tta.json").read_text())["runs"]}
    assert tta["resnet/ipu-pod1-emu/mini"]["converged"]
    # judged against the run's own target (benchmarks/tta_mini.json's mini_target_accuracy,
    # 0.759), which the fixture log's first evaluation (0.8044 after epoch 1) reaches
    assert tta["resnet/ipu-pod1-emu/mini"]["quality_target"] == 0.759
    assert tta["resnet/ipu-pod1-emu/mini"]["epochs_to_converge"] == 1
    assert tta["small_cnn/fashion_mnist/mini"]["final_quality"] == pytest.approx(0.8668)
    man = json.loads((out / "run_manifest.json").read_text())
    assert set(man["durations_s"]) == {"kernels_bench", "tta_resnet50", "tta_small_cnn"}
    assert "nightly: done, exit 0" in (out / "nightly.log").read_text()
    # A second run into the same folder would mix tonight's results with these: refused.
    p, _ = _nightly(tmp_path, "baseline.json", base, small_cnn=SMALL_CNN_LOG)
    assert p.returncode == 2 and "already holds results" in p.stderr
    # Record it deliberately, then a noisy re-run passes and a slowdown fails.
    assert _update(str(out), "--baseline", str(base)).returncode == 0
    p, out2 = _nightly(tmp_path, "rerun_noise.json", base, small_cnn=SMALL_CNN_LOG)
    assert p.returncode == 0, p.stdout + p.stderr
    assert json.loads((out2 / "comparison.json").read_text())["status"] == "pass"
    p, out3 = _nightly(tmp_path, "slowdown_20pct.json", base, small_cnn=SMALL_CNN_LOG)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "REGRESSION: BM_MatMul/512" in p.stderr
    assert "REGRESSION: BM_MatMul/512" in (out3 / "comparison.md").read_text()
    assert json.loads((out3 / "comparison.json").read_text())["status"] == "fail"
    # ...and that failed run cannot become the baseline without --force.
    assert _update(str(out3), "--baseline", str(base)).returncode == 1


def _lower_final_accuracy(src, dst, new_value):
    """The run_benchmark log with its last eval_accuracy lowered (a convergence regression
    that still ends with run_stop success)."""
    lines = open(src).read().splitlines(keepends=True)
    i = max(k for k, line in enumerate(lines) if '"key": "eval_accuracy"' in line)
    ev = json.loads(lines[i][len(":::MLLOG "):])
    ev["value"] = new_value
    lines[i] = ":::MLLOG " + json.dumps(ev) + "\n"
    dst.write_text("".join(lines))
    return str(dst)


def test_nightly_flags_an_accuracy_drop(tmp_path):
    base = tmp_path / "baseline"
    base.mkdir()
    # A target that only the log's last evaluation (0.8604) reaches.
    config = tmp_path / "tta_085.json"
    config.write_text(json.dumps({"mini_target_accuracy": 0.85}))
    target = {"NIGHTLY_TTA_ARGS": f"--threads 2 --runs 1 --config {config}"}
    p, out = _nightly(tmp_path, "baseline.json", base, small_cnn=SMALL_CNN_LOG, env_extra=target)
    assert p.returncode == 0 and _update(str(out), "--baseline", str(base)).returncode == 0
    # Same benchmark figures, same log but the final accuracy 0.8604 -> 0.83: below the
    # baseline and below the run's target.
    drop = _lower_final_accuracy(MINI_LOG, tmp_path / "drop.txt", 0.83)
    p, out2 = _nightly(tmp_path, "baseline.json", base, small_cnn=SMALL_CNN_LOG,
                       env_extra={"FAKE_RESULT": drop, **target}, tag="_drop")
    assert p.returncode == 1, p.stdout + p.stderr
    line = next(x for x in p.stderr.splitlines() if x.startswith("CONVERGENCE REGRESSION"))
    assert line.startswith("CONVERGENCE REGRESSION: resnet/ipu-pod1-emu/mini: did not converge")
    assert "final quality 0.8300 < baseline 0.8604" in line
    doc = json.loads((out2 / "comparison.json").read_text())
    assert doc["failing"] == ["tta:resnet/ipu-pod1-emu/mini"] and doc["regressions"] == 1
    # The small CNN run: an accuracy below its target is a run that no longer converges.
    low = tmp_path / "small_low.log"
    low.write_text(open(SMALL_CNN_LOG).read().replace("test accuracy 0.8668",
                                                      "test accuracy 0.8200"))
    p, _ = _nightly(tmp_path, "baseline.json", base, small_cnn=str(low), tag="_low")
    assert p.returncode == 1
    assert "CONVERGENCE REGRESSION: small_cnn/fashion_mnist/mini: did not converge" in p.stderr


def test_nightly_survives_a_crashing_benchmark(tmp_path):
    base = tmp_path / "baseline"
    base.mkdir()
    models = _renamed_fixture(tmp_path, "baseline.json", "Model/")
    suites = [("models_bench", models)]
    p, out = _nightly(tmp_path, "baseline.json", base, extra_suites=suites)
    assert p.returncode == 0 and _update(str(out), "--baseline", str(base)).returncode == 0
    # One benchmark of models_bench dies (SIGABRT, as an uncaught bad_alloc does).
    p, out2 = _nightly(tmp_path, "baseline.json", base, extra_suites=suites,
                       env_extra={"FAKE_ABORT": "Model/BM_Compile"}, tag="_crash")
    assert p.returncode == 4, p.stdout + p.stderr
    assert "models_bench: Model/BM_Compile/resnet50 CRASHED (killed by SIGABRT)" in p.stdout
    # the suite's other benchmarks and the other suite still ran and were compared
    doc = json.loads((out2 / "comparison.json").read_text())
    rows = _by_name(doc)
    assert rows["Model/BM_Compile/resnet50"]["status"] == "missing"
    assert rows["Model/BM_MatMul/512"]["status"] == "ok"
    assert rows["BM_MatMul/512"]["status"] == "ok"
    assert doc["crashed"] == ["models_bench: Model/BM_Compile/resnet50 (killed by SIGABRT)"]
    assert doc["regressions"] == 0 and doc["status"] == "fail"
    md = (out2 / "comparison.md").read_text()
    assert "CRASHED: models_bench: Model/BM_Compile/resnet50" in md
    assert "MISSING: Model/BM_Compile/resnet50" in md
    # a crashed run cannot become the baseline
    assert _update(str(out2), "--baseline", str(base)).returncode == 1
    # A crash and a real regression together: the regression decides the exit status.
    p, _ = _nightly(tmp_path, "slowdown_20pct.json", base, extra_suites=suites,
                    env_extra={"FAKE_ABORT": "Model/BM_Compile"}, tag="_both")
    assert p.returncode == 1 and "REGRESSION: BM_MatMul/512" in p.stderr


def test_nightly_memory_cap_turns_an_oom_into_a_named_failure(tmp_path):
    # Every benchmark of the suite asks for 2 GB under a 400 MB cap: a real MemoryError.
    p, out = _nightly(tmp_path, "baseline.json", tmp_path / "none", harness=False,
                      env_extra={"NIGHTLY_MEM_LIMIT_MB": "400", "FAKE_ALLOC_MB": "2048"})
    assert p.returncode == 4, p.stdout + p.stderr
    assert "kernels_bench: BM_MatMul/512 CRASHED (exit 1, out of memory (cap " \
           "NIGHTLY_MEM_LIMIT_MB=400))" in p.stdout
    assert not (out / "kernels_bench.json").exists()
    man = json.loads((out / "run_manifest.json").read_text())
    assert len(man["crashed"]) == 3 and man["mem_limit_mb"] == 400


def test_nightly_suite_settings_from_conf(tmp_path):
    conf = tmp_path / "nightly.conf"
    conf.write_text("# comment\nkernels_bench 4 --benchmark_filter=MatMul --x=1\n"
                    "models_bench 3 --benchmark_filter=NoSuchBenchmark\n")
    env = {"NIGHTLY_SUITES_CONF": str(conf), "NIGHTLY_REPETITIONS": ""}
    p, out = _nightly(tmp_path, "baseline.json", tmp_path / "none", harness=False,
                      extra_suites=[("models_bench", os.path.join(G, "baseline.json"))],
                      env_extra=env)
    # a filter that selects nothing is a failure that says so, not a silent empty suite
    assert p.returncode == 4, p.stdout + p.stderr
    assert "models_bench: its arguments select no benchmark (--benchmark_filter=" \
           "NoSuchBenchmark" in p.stdout
    log = (out / "kernels_bench.log").read_text()
    assert "--benchmark_repetitions=4" in log and "--x=1" in log
    assert set(br.load_gbench_file(str(out / "kernels_bench.json"))[0]) == {"BM_MatMul/512"}


def test_nightly_without_harness(tmp_path):
    p, out = _nightly(tmp_path, "baseline.json", tmp_path, harness=False)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "does not exist yet; skipping the time-to-accuracy runs" in p.stdout
    assert not (out / "tta.json").exists()


def test_record_tta_reads_train_small_cnn_output(tmp_path):
    out = tmp_path / "tta.json"
    p = subprocess.run([PY, "-B", os.path.join(SCRIPTS, "record_tta.py"), "--train-log",
                        SMALL_CNN_LOG, "--train-target", "0.86", "-o", str(out)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    (r,) = json.loads(out.read_text())["runs"]
    assert r["name"] == "small_cnn/fashion_mnist" and r["converged"]
    assert r["final_quality"] == pytest.approx(0.8668) and r["epochs_to_converge"] == 2
    assert r["time_to_train_s"] == pytest.approx(50.4)
    bad = tmp_path / "bad.log"
    bad.write_text("error: cannot open train-images-idx3-ubyte\n")
    p = subprocess.run([PY, "-B", os.path.join(SCRIPTS, "record_tta.py"), "--train-log",
                        str(bad), "-o", str(out)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "bad.log: no 'epoch N" in p.stderr


def test_datasets_adapter_speaks_google_benchmark(tmp_path):
    bench = os.environ.get("DATASETS_BENCH")
    if not bench or not os.access(bench, os.X_OK):
        pytest.skip("DATASETS_BENCH (the built datasets_bench) not set; ctest sets it")
    script = os.path.join(SCRIPTS, "datasets_gbench.py")
    p = subprocess.run([PY, "-B", script, bench, "--benchmark_list_tests"],
                       capture_output=True, text=True, timeout=60)
    assert p.stdout.split() == ["DatasetsDecode/train/reduced", "DatasetsDecode/eval/reduced",
                                "DatasetsDecode/train/full"]
    out = tmp_path / "d.json"
    p = subprocess.run([PY, "-B", script, bench, "--benchmark_filter=^DatasetsDecode/eval/",
                        "--benchmark_repetitions=3", f"--benchmark_out={out}", "--images", "8"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    data, _ = br.load_gbench_file(str(out))
    assert list(data) == ["DatasetsDecode/eval/reduced"]
    times = data["DatasetsDecode/eval/reduced"]["times_ns"]
    assert len(times) == 3 and all(1e3 < t < 1e9 for t in times)  # per image: us to ms


def test_workflow_file_runs_nightly():
    wf = open(os.path.join(REPO, ".github", "workflows", "nightly.yml")).read()
    assert "schedule:" in wf and "cron:" in wf
    assert "scripts/nightly.sh" in wf and "upload-artifact" in wf
