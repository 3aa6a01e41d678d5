"""run_benchmark under faults: interrupts at varied moments (scripts/interrupt_stress.py), a full
disk while the package is written, an unreadable results folder, a second run writing into the
same package, and determinism (the same seed gives the same log, metrics and final weights).

Every run here is a tiny open mini ResNet-50 (micro-batch 8, 16 training and 16 evaluation
images an epoch): seconds after its compile. Environment: RUN_BENCHMARK = the binary;
INTERRUPT_STRESS_COUNT = interrupts in test_interrupts_at_varied_moments (default 5: the run's
compile, its data load, its first steps, an evaluation, between two runs; the nightly runs
scripts/interrupt_stress.py with 50 over every moment).
"""
import json
import os
import pathlib
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

BINARY = os.environ.get("RUN_BENCHMARK", "")
SOURCE_DIR = pathlib.Path(os.environ.get("IPU_SOURCE_DIR", pathlib.Path(__file__).parents[2]))
VENV_PYTHON = SOURCE_DIR / ".venv" / "bin" / "python"
TINY = {"micro_batch_size": 8, "model_bn_span": 8, "sgd_opt_base_learning_rate": 0.012,
        "mini_train_samples": 16, "mini_eval_samples": 16, "mini_target_accuracy": 0.99,
        "eval_period": 1}
CHECKER_CWD = tempfile.mkdtemp(prefix="harness_cli_checker_")


def have_checker():
    return VENV_PYTHON.exists() and subprocess.run(
        [str(VENV_PYTHON), "-c", "import mlperf_logging"], capture_output=True).returncode == 0


def shared_dir():
    """A folder every user can read (the unreadable-folder test runs the binary as nobody)."""
    d = pathlib.Path(tempfile.mkdtemp(prefix="harness_cli_reliability_"))
    d.chmod(0o755)
    return d


def config(d, **overrides):
    path = d / "c.json"
    path.write_text(json.dumps({**TINY, **overrides}))
    path.chmod(0o644)
    return str(path)


def args(cfg, results, *extra):
    return ["--division", "open", "--max-epochs", "1", "--threads", "2", "--config", cfg,
            "--results-dir", str(results), *extra]


def run(argv, timeout=600, **kw):
    assert BINARY, "RUN_BENCHMARK is not set"
    return subprocess.run([BINARY, *argv], capture_output=True, text=True, timeout=timeout, **kw)


def bench_dir(results):
    return pathlib.Path(results) / "ipu_mlperf" / "results" / "ipu-pod1-emulated" / "resnet"


def records(log):
    return [json.loads(l[len(":::MLLOG "):]) for l in pathlib.Path(log).read_text().splitlines()]


def without_times(log):
    out = []
    for rec in records(log):
        rec.pop("time_ms", None)
        out.append(json.dumps(rec, sort_keys=True))
    return out


def snapshot(root):
    """Every file under root with its bytes."""
    return {str(p.relative_to(root)): p.read_bytes()
            for p in sorted(pathlib.Path(root).rglob("*")) if p.is_file()}


def assert_complete_and_valid(log):
    ev = records(log)  # every line a whole record
    stops = [e for e in ev if e["key"] == "run_stop"]
    assert len(stops) == 1 and ev[-1]["key"] == "run_stop", log
    if have_checker():
        r = subprocess.run([str(VENV_PYTHON), "-m", "mlperf_logging.compliance_checker", "--usage",
                            "training", "--ruleset", "4.0.0", str(log)],
                           capture_output=True, text=True, cwd=CHECKER_CWD)
        text = r.stdout + r.stderr
        assert "Traceback" not in text, text
        fails = [l for l in text.splitlines() if "failed test" in l or "Required" in l]
        assert all("eval_accuracy" in l or "0.7590" in l for l in fails), text


@pytest.fixture(scope="module")
def first_package():
    """One complete tiny run (seed 1, 2 threads): the package the fault tests start from and
    the reference of the determinism tests."""
    d = shared_dir()
    r = run(args(config(d), d / "results"))
    assert r.returncode == 2, r.stdout + r.stderr  # ran; the 0.99 target is out of reach
    log = bench_dir(d / "results") / "result_0.txt"
    assert_complete_and_valid(log)
    return d, log


# ----------------------------------------------------------------------------- interrupts

def test_interrupts_at_varied_moments():
    count = os.environ.get("INTERRUPT_STRESS_COUNT", "5")
    r = subprocess.run([sys.executable, str(SOURCE_DIR / "scripts" / "interrupt_stress.py"),
                        "--binary", BINARY, "--count", count, "--moments",
                        "compile,data,step,eval,between,package,preflight"],
                       capture_output=True, text=True, timeout=1800)
    print(r.stdout)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"{count} of {count} interrupts ended cleanly" in r.stdout


# ----------------------------------------------------------------------------- faults

def test_full_disk_keeps_every_earlier_result(first_package, tmp_path):
    """A file size limit (RLIMIT_FSIZE: what a full disk or quota does to a write) hit while the
    second invocation writes its log: a clear message naming the file and the error, exit 4 (aborted by an error),
    and the first invocation's result moved aside byte for byte, still a valid log."""
    d, _ = first_package
    results = tmp_path / "results"
    shutil.copytree(d / "results", results)
    before = snapshot(results)
    limit = 16 * 1024  # the log's weights_initialization lines alone pass 30 KB

    def small_disk():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    r = run(args(config(d), results), preexec_fn=small_disk)
    out = r.stdout + r.stderr
    assert r.returncode == 4, out
    assert "File too large" in out and "could not be completed" in out, out
    assert "result_0.txt" in out, out
    moved = list(results.glob("ipu_mlperf/results/ipu-pod1-emulated/resnet.replaced-*"))
    assert len(moved) == 1, out
    key = "ipu_mlperf/results/ipu-pod1-emulated/resnet/result_0.txt"
    assert (moved[0] / "result_0.txt").read_bytes() == before[key]
    assert_complete_and_valid(moved[0] / "result_0.txt")
    system = results / "ipu_mlperf" / "systems" / "ipu-pod1-emulated.json"
    json.loads(system.read_text())
    assert not list(results.rglob("*.tmp"))


def test_unreadable_results_folder_is_reported_and_left_alone(first_package):
    d = shared_dir()
    config(d)
    shutil.copytree(first_package[0] / "results", d / "results")
    before = snapshot(d / "results")
    org = d / "results" / "ipu_mlperf"
    org.chmod(0)
    try:
        # Root reads any folder: run as nobody there.
        prefix = (["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
                  if os.geteuid() == 0 else [])
        r = subprocess.run([*prefix, BINARY, *args(str(d / "c.json"), d / "results")],
                           capture_output=True, text=True, timeout=600)
    finally:
        org.chmod(0o755)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert "cannot write the results package" in out and "Permission denied" in out, out
    assert str(org) in out, out
    assert snapshot(d / "results") == before


def test_second_run_into_a_package_being_written_is_refused(tmp_path):
    d = shared_dir()
    cfg = config(d, mini_train_samples=160)
    results = tmp_path / "results"
    log = bench_dir(results) / "result_0.txt"
    first = subprocess.Popen([BINARY, *args(cfg, results)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while time.time() < deadline and not (log.exists() and "init_start" in log.read_text()):
        time.sleep(0.1)
    # The first run holds the lock from before its log exists. Pause it there, so that it is
    # still writing the package however long the second takes to compile (no race on a slow
    # or loaded host), and let it go on once the second has answered.
    assert first.poll() is None, "the first run ended before its log had init_start"
    first.send_signal(signal.SIGSTOP)
    try:
        second = run(args(cfg, results))
    finally:
        first.send_signal(signal.SIGCONT)
    out, err = first.communicate(timeout=900)
    assert second.returncode == 1, second.stdout + second.stderr
    assert "another run_benchmark is writing the package folder" in second.stderr, second.stderr
    assert first.returncode == 2, out + err
    assert_complete_and_valid(log)
    assert not list(results.glob("ipu_mlperf/results/ipu-pod1-emulated/resnet.replaced-*"))


def test_sigterm_ends_the_run_with_exit_143_and_a_complete_log(tmp_path):
    d = shared_dir()
    results = tmp_path / "results"
    log = bench_dir(results) / "result_0.txt"
    p = subprocess.Popen([BINARY, *args(config(d, mini_train_samples=160), results)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while time.time() < deadline and not (log.exists() and "run_start" in log.read_text()):
        time.sleep(0.1)
    p.terminate()
    out, err = p.communicate(timeout=300)
    assert p.returncode == 143, out + err
    ev = records(log)
    assert ev[-1]["key"] == "run_stop" and ev[-1]["metadata"]["status"] == "aborted"
    assert ev[-2]["key"] == "run_abort_reason" and "SIGTERM" in ev[-2]["value"], ev[-2]
    assert_complete_and_valid(log)


# ----------------------------------------------------------------------------- determinism

def test_same_seed_gives_the_same_log_metrics_and_weights(first_package, tmp_path):
    d, reference = first_package
    r = run(args(config(d), tmp_path / "results"))
    assert r.returncode == 2, r.stdout + r.stderr
    again = bench_dir(tmp_path / "results") / "result_0.txt"
    assert without_times(again) == without_times(reference)
    keys = [json.loads(l)["key"] for l in without_times(reference)]
    assert "ipu_weights_crc32" in keys and "eval_accuracy" in keys
    # Another seed changes the weights (the CRC is not a constant).
    r = run(args(config(d), tmp_path / "other", "--seed", "2"))
    assert r.returncode == 2, r.stdout + r.stderr
    crc = lambda log: [e["value"] for e in records(log) if e["key"] == "ipu_weights_crc32"]
    assert crc(bench_dir(tmp_path / "other") / "result_0.txt") != crc(reference)
