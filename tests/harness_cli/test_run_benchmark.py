"""End-to-end tests of the run_benchmark binary: refusals, real short runs judged by the official
MLPerf checker, a five-run package, SIGINT and a diverging run.

Environment (set by tests/harness_cli/CMakeLists.txt): RUN_BENCHMARK = the binary,
IPU_SOURCE_DIR = the repository (its .venv holds mlperf-logging; checker tests skip without it).

Every run is the real ResNet-50 (the full [3,4,6,3] network on Fashion-MNIST). One closed run
reaches the MLPerf target and its log is judged under both rulesets (`real_resnet50` tests). The
five-run package is five short open runs (five closed runs to 0.759 take about 40 minutes on a
2-core machine: benchmarks/harness/resnet50_closed_package.sh does that outside CI).
"""
import csv
import json
import math
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import time

import pytest

BINARY = os.environ.get("RUN_BENCHMARK", "")
SOURCE_DIR = pathlib.Path(os.environ.get("IPU_SOURCE_DIR", pathlib.Path(__file__).parents[2]))
VENV_PYTHON = SOURCE_DIR / ".venv" / "bin" / "python"
ORG = "ipu_mlperf"
SYSTEM = "ipu-pod1-emulated"
# The checker writes compliance_checker.log into its working folder: keep it out of packages.
CHECKER_CWD = tempfile.mkdtemp(prefix="harness_cli_checker_")

# Short open runs: micro-batch 8 and SGD 0.012 (the closed CI run's settings), 3,200 training
# images an epoch, 500 evaluated after every epoch. The open division sets no accuracy floor: the
# target is one the model passes after one or two such epochs (seed 1 on 2026-12-03: 0.376,
# 0.690, 0.730 after epochs 1-3).
OPEN_SHORT = {
    "micro_batch_size": 8,
    "model_bn_span": 8,
    "sgd_opt_base_learning_rate": 0.012,
    "mini_train_samples": 3200,
    "mini_eval_samples": 500,
    "mini_target_accuracy": 0.35,
    "eval_period": 1,
}
THREADS = ["--threads", "2"]


def have_checker():
    if not VENV_PYTHON.exists():
        return False
    return subprocess.run([str(VENV_PYTHON), "-c", "import mlperf_logging"],
                          capture_output=True).returncode == 0


needs_checker = pytest.mark.skipif(
    not have_checker(), reason="mlperf-logging missing: run `bash scripts/setup.sh`")


def run(args, timeout=600, cwd=None, env=None):
    """The binary with `args`; `env`: variables added to this process's environment."""
    assert BINARY, "RUN_BENCHMARK is not set"
    return subprocess.run([BINARY, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=cwd, env={**os.environ, **env} if env else None)


def write_config(path, obj):
    path.write_text(json.dumps(obj))
    return str(path)


def files_under(root):
    return sorted(str(p.relative_to(root)) for p in pathlib.Path(root).rglob("*"))


def result_dir(results, system=SYSTEM):
    return pathlib.Path(results) / ORG / "results" / system / "resnet"


def events(log):
    out = []
    for line in pathlib.Path(log).read_text().splitlines():
        if line.startswith(":::MLLOG "):
            out.append(json.loads(line[len(":::MLLOG "):]))
    return out


def checker(log, ruleset):
    r = subprocess.run([str(VENV_PYTHON), "-m", "mlperf_logging.compliance_checker", "--usage",
                        "training", "--ruleset", ruleset, str(log)],
                       capture_output=True, text=True, cwd=CHECKER_CWD)
    text = r.stdout + r.stderr
    lines = [l for l in text.splitlines() if l.strip()]
    return r.returncode, text, (lines[-2] if lines and lines[-1].startswith("**") else lines[-1])


def failed_checks(text):
    return [l for l in text.splitlines() if "failed test" in l or "ERROR" in l and "FAILED" not in l]


# ----------------------------------------------------------------------------- refusals

REFUSALS = {
    # name: (extra args, config or None, expected exit code (None: any non-zero), substrings)
    "illegal_closed_hyperparameter": (
        [], {"sgd_opt_momentum": 0.8}, 1,
        ["closed division does not allow", "MLPerf Training rules v4.0, ResNet-50 closed",
         "sgd_opt_momentum must be 0.9 (got 0.8)"]),
    "illegal_closed_base_lr": (
        [], {"sgd_opt_base_learning_rate": 0.0505}, 1,
        ["sgd_opt_base_learning_rate must be a multiple of 0.001"]),
    "closed_eval_period": (
        [], {"eval_period": 2}, 1, ["eval_period must be 4", "ResNet-50 closed"]),
    "closed_target_below_mlperf": (
        [], {"mini_target_accuracy": 0.5}, 1, ["mini_target_accuracy must be >= 0.759"]),
    "unknown_config_key": (
        [], {"sgd_opt_momentun": 0.9}, 1,
        ["unknown key 'sgd_opt_momentun'", "config.json", "sgd_opt_momentum"]),
    "config_wrong_type": ([], {"micro_batch_size": "big"}, 1, ["micro_batch_size", "integer"]),
    "unknown_flag": (["--bogus-flag"], None, None, ["--bogus-flag"]),
    "missing_data_dir": (
        ["--data-dir", "/nonexistent/fashion"], None, 1,
        ["Fashion-MNIST not found", "/nonexistent/fashion", "dataset-fashion-mnist"]),
    "bn_span_not_whole_replicas": (
        ["--pod-size", "4", "--division", "open"], {"model_bn_span": 12}, 1,
        ["model_bn_span 12", "the micro-batch (8) times a number of replicas that divides the 4",
         "e.g. 8 or 32"]),
    "bn_span_group_does_not_divide_replicas": (
        ["--pod-size", "4", "--division", "open"], {"model_bn_span": 24}, 1,
        ["model_bn_span 24", "divides the 4 replicas"]),
    "invalid_pod_size": (["--pod-size", "8"], None, None, ["8", "1,4,16,64,128,256"]),
    "unknown_benchmark": (
        ["--benchmark", "gpt3"], None, None, ["gpt3", "resnet50,bert_large,efficientnet_b4"]),
    "bert_full_scale_needs_pipelining": (
        ["--benchmark", "bert_large", "--scale", "full"], None, 1,
        ["--scale full is not implemented yet for bert_large", "pipelined execution"]),
    # EfficientNet-B4: our own rules (harness/rules/efficientnet_b4.json), checked before a run.
    "efficientnet_closed_g16": (
        ["--benchmark", "efficientnet_b4"], {"model_variant": "g16"}, 1,
        ["EfficientNet-B4 closed rules", "model_variant must be \"b4\"", "(got \"g16\")",
         "--division open"]),
    "efficientnet_closed_tuned_fixed_hyperparameter": (
        ["--benchmark", "efficientnet_b4"], {"opt_rmsprop_decay": 0.95}, 1,
        ["EfficientNet-B4 closed rules", "opt_rmsprop_decay must be 0.9", "(got 0.95)"]),
    "efficientnet_closed_eval_period": (
        ["--benchmark", "efficientnet_b4"], {"eval_period": 2}, 1,
        ["evaluation cadence", "eval_period must be 4"]),
    "efficientnet_closed_target_below_rules": (
        ["--benchmark", "efficientnet_b4"], {"mini_target_accuracy": 0.15}, 1,
        ["mini_target_accuracy must be >= 0.2 ", "the mini quality target of the rules"]),
    "efficientnet_benchmark_scale_not_the_runs": (
        ["--benchmark", "efficientnet_b4"], {"benchmark_scale": "full"}, 1,
        ["benchmark_scale must be \"mini\" (the run's --scale)",
         "dropout_rate must be 0.4 (fixed in the closed division)"]),
    "efficientnet_open_norm_not_built": (
        ["--benchmark", "efficientnet_b4", "--division", "open"],
        {"norm_type": "layer_norm_proxy_norm"}, 1,
        ["norm_type \"layer_norm_proxy_norm\"", "batch_norm and group_norm only"]),
    "efficientnet_full_scale_needs_pipelining": (
        ["--benchmark", "efficientnet_b4", "--scale", "full", "--data-dir", "/nonexistent"], None,
        1, ["--scale full is not implemented yet for efficientnet_b4", "4-IPU pipelines"]),
    "full_scale_needs_data_dir": (
        ["--scale", "full"], None, 1, ["--scale full needs --data-dir", "train/<synset>/*.JPEG"]),
    "full_scale_without_imagenet_layout": (
        ["--scale", "full", "--data-dir", "/usr/share/datasets/fashion-mnist"], None, 1,
        ["no train folder", "/usr/share/datasets/fashion-mnist/train",
         "standard ImageNet layout"]),
    "optimizer_switch_through_config": (
        ["--division", "open"], {"opt_name": "lars"}, 1,
        ["opt_name", "trains with \"sgd\"", "cannot be changed through --config"]),
    "gradient_accumulation_zero": (
        ["--division", "open"], {"gradient_accumulation_steps": 0}, 1,
        ["key 'gradient_accumulation_steps' must be >= 1, got 0"]),
    "augment_padding_out_of_range": (
        ["--division", "open"], {"mini_augment_padding": 9}, 1,
        ["mini_augment_padding must be an integer 0-8", "(got 9)"]),
    "augment_flip_wrong_type": (
        ["--division", "open"], {"mini_augment_flip": 1}, 1, ["mini_augment_flip", "boolean"]),
    "bad_loss_scaling": (
        ["--loss-scaling", "static:-1"], None, 1, ["--loss-scaling", "static:-1", "static:<S>"]),
    "loss_scaling_without_16_bit": (
        ["--precision", "fp32", "--loss-scaling", "static:128"], None, 1,
        ["loss scaling is for 16-bit compute"]),
}


@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_refusal_writes_nothing(name, tmp_path):
    extra, config, code, needles = REFUSALS[name]
    results = tmp_path / "results"
    results.mkdir()
    args = ["--results-dir", str(results), "--threads", "1", *extra]
    if config is not None:
        args += ["--config", write_config(tmp_path / "config.json", config)]
    r = run(args, timeout=120)
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    if code is not None:
        assert r.returncode == code, out
    for needle in needles:
        assert needle in out, f"{needle!r} not in:\n{out}"
    assert files_under(results) == [], f"refusal wrote {files_under(results)}"


def test_real_resnet50_that_does_not_fit_is_refused_before_writing(tmp_path):
    """The compile step of the real ResNet-50 (micro-batch 64) runs before anything is written."""
    results = tmp_path / "results"
    results.mkdir()
    config = write_config(tmp_path / "mb64.json", {"micro_batch_size": 64, "model_bn_span": 64})
    r = run(["--results-dir", str(results), "--threads", "1", "--config", config], timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 3, out
    assert "does not fit in IPU tile memory" in out, out
    assert "out of tile memory on IPU-Mk2" in out, out
    assert files_under(results) == []


def canonical_resnet50_names():
    """The 161 tensor names of the MLPerf 1.1.0 ResNet rules, as the checker itself lists them."""
    yaml_path = next(SOURCE_DIR.joinpath(".venv").rglob("training_1.1.0/closed_resnet.yaml"))
    text = yaml_path.read_text()
    names = re.findall(r'"((?:bn0|conv0|fc1|stage\d_unit\d+)_\w+)"', text)
    return sorted(set(names))


@pytest.fixture(scope="module")
def real_closed_log(tmp_path_factory):
    """One closed run of the real ResNet-50 to the closed target, at micro-batch 8 (more updates
    per image than the preset's 32, so the target comes sooner; SGD 0.012, linear scaling).

    12,800 training images an epoch, 1,000 evaluated, evaluation at epoch 2 (offset 2) and at the
    last of 3 epochs. On 2026-12-03 this seed reached 0.794 after epoch 2 with direct
    convolutions and 0.801 with Winograd 3x3 convolutions on the 14x14 and 7x7 stages (AVX-512),
    against the 0.759 target; epoch 3 is a second chance (the 1,000-image accuracy is noisy:
    another kernel mix gave 0.776 after epoch 2 and 0.756 after epoch 3). About 6 minutes with
    2 threads when epoch 2 reaches the target.
    """
    root = tmp_path_factory.mktemp("real_closed")
    results = root / "results"
    config = write_config(root / "c.json", {"micro_batch_size": 8, "model_bn_span": 8,
                                            "sgd_opt_base_learning_rate": 0.012,
                                            "mini_train_samples": 12800, "mini_eval_samples": 1000,
                                            "mini_target_accuracy": 0.759, "eval_offset": 2})
    t0 = time.time()
    r = run(["--results-dir", str(results), "--max-epochs", "3", "--seed", "1", "--threads", "2",
             "--config", config], timeout=1500)
    print(f"real ResNet-50 closed run: {time.time() - t0:.1f} s", file=sys.stderr)
    return results, r


def test_real_resnet50_closed_run_reaches_the_target(real_closed_log):
    results, r = real_closed_log
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "ResNet-50 v1.5" in out and "stand-in" not in out, out
    ev = events(result_dir(results) / "result_0.txt")
    assert ev[-1]["key"] == "run_stop" and ev[-1]["metadata"]["status"] == "success"
    accuracies = [e["value"] for e in ev if e["key"] == "eval_accuracy"]
    assert accuracies and accuracies[-1] >= 0.759, accuracies
    value = {e["key"]: e["value"] for e in ev}
    assert value["global_batch_size"] == 8 and value["submission_division"] == "closed"
    logged = sorted(e["metadata"]["tensor"] for e in ev if e["key"] == "weights_initialization")
    assert len(logged) == 161 and len(set(logged)) == 161
    if have_checker():  # the checker's own list of the 1.1.0 names
        assert logged == canonical_resnet50_names()


@needs_checker
@pytest.mark.parametrize("ruleset", ["4.0.0", "1.1.0"])
def test_real_resnet50_closed_log_passes_the_checker(real_closed_log, ruleset):
    results, _ = real_closed_log
    code, text, verdict = checker(result_dir(results) / "result_0.txt", ruleset)
    assert code == 0 and "SUCCESS" in verdict, text


@needs_checker
def test_real_resnet50_open_log_passes_the_checker(tmp_path):
    """A short open run of the real ResNet-50 on POD4 (4 replicas of micro-batch 8) whose batch
    norm spans all 4 replicas (model_bn_span 32), trained on flipped and translated images: the
    open rulesets set no accuracy floor, and the augmentation's custom key passes them."""
    results = tmp_path / "results"
    config = write_config(tmp_path / "c.json", {"mini_train_samples": 800, "mini_eval_samples": 200,
                                                "eval_period": 1, "model_bn_span": 32,
                                                "mini_augment_flip": True,
                                                "mini_augment_padding": 2})
    r = run(["--division", "open", "--pod-size", "4", "--results-dir", str(results),
             "--max-epochs", "1", "--threads", "2", "--config", config], timeout=600)
    assert r.returncode in (0, 2), r.stdout + r.stderr
    ev = events(result_dir(results, "ipu-pod4-emulated") / "result_0.txt")
    assert [e["value"] for e in ev if e["key"] == "submission_division"] == ["open"]
    value = {e["key"]: e["value"] for e in ev}
    assert value["model_bn_span"] == 32 and value["global_batch_size"] == 32
    assert value["ipu_train_augmentation"] == ("random horizontal flip, random translation by up "
                                               "to 2 px")
    assert len([e for e in ev if e["key"] == "weights_initialization"]) == 161
    for ruleset in ["4.0.0", "1.1.0"]:
        code, text, verdict = checker(result_dir(results, "ipu-pod4-emulated") / "result_0.txt", ruleset)
        assert code == 0 and "SUCCESS" in verdict, f"{ruleset}:\n{text}"


def test_help_documents_every_flag_with_its_default():
    r = run(["--help"])
    assert r.returncode == 0
    for flag in ["--benchmark", "--division", "--pod-size", "--scale", "--data-dir",
                 "--results-dir", "--system-name", "--runs", "--seed", "--config", "--max-epochs",
                 "--engine", "--threads", "--precision", "--loss-scaling",
                 "--project-full-scale"]:
        assert flag in r.stdout, flag
    for default in ["=resnet50", "=closed", "=1", "=mini", "=results", "=fused", "=2"]:
        assert default in r.stdout, default


def test_help_and_readme_list_the_exit_codes():
    """harness/exit_codes.h is the one definition; --help prints it and README.md repeats it."""
    r = run(["--help"])
    assert r.returncode == 0
    header = (SOURCE_DIR / "harness" / "exit_codes.h").read_text()
    codes = {int(v): k for k, v in re.findall(r"(kExit\w+) = (\d+),", header)}
    codes.update({130: "kExitSigint", 143: "kExitSigterm"})
    assert sorted(codes) == [0, 1, 2, 3, 4, 130, 143], codes
    readme = (SOURCE_DIR / "README.md").read_text()
    for code, words in {0: "success", 1: "refused before running", 2: "target not reached",
                        3: "tile memory", 4: "aborted by an error", 130: "SIGINT",
                        143: "SIGTERM"}.items():
        assert re.search(rf"\b{code}\b[^\n]*{words}", r.stdout), (code, r.stdout)
        assert re.search(rf"\b{code}\b[^\n]*{words}", readme), (code, "README.md")


def test_help_refusal_exit_code_for_a_bad_flag_value():
    r = run(["--pod-size", "8"])
    assert r.returncode == 1, r.stdout + r.stderr  # refused before running, as any refusal


# ----------------------------------------------------------------------------- real runs

@pytest.fixture(scope="module")
def package(tmp_path_factory):
    """Five open runs of the real ResNet-50 into one package (the MLPerf ResNet run count)."""
    root = tmp_path_factory.mktemp("package")
    results = root / "results"
    t0 = time.time()
    r = run(["--division", "open", "--results-dir", str(results), "--runs", "5", "--seed", "11",
             "--max-epochs", "3", "--config", write_config(root / "short.json", OPEN_SHORT),
             "--report", str(root / "reports"), *THREADS], timeout=1500)
    print(f"5-run package: {time.time() - t0:.1f} s", file=sys.stderr)
    return results, r


def test_package_report_pages_of_the_programs_and_each_run(package):
    """--report: the fit check's two programs and each run's curves; the run page's evaluations
    are the log's eval_accuracy values."""
    results, r = package
    reports = results.parent / "reports"
    out = r.stdout + r.stderr
    for program in ("training", "evaluation"):
        stem = reports / f"resnet50_mini_pod1_{program}"
        assert f"report: {stem}.html" in out, out
        assert json.loads(stem.with_suffix(".json").read_text())["memory"]["fits"]
    for i in range(5):
        page = reports / f"resnet50_mini_pod1_run{i}.html"
        assert f"report: {page}" in out
        text = page.read_text()
        data = json.loads(text.split("const REPORT = ", 1)[1].split(";\nwindow.onerror", 1)[0])
        run_view = data["views"][0]["run"]
        logged = [e["value"] for e in events(result_dir(results) / f"result_{i}.txt")
                  if e["key"] == "eval_accuracy"]
        assert [e["accuracy"] for e in run_view["evals"]] == pytest.approx(logged, abs=1e-4)
        assert run_view["loss"] and all(math.isfinite(p["loss"]) for p in run_view["loss"])
        assert all(e["ipu_seconds"] > 0 for e in run_view["evals"])


def test_package_runs_and_summary(package):
    results, r = package
    assert r.returncode == 0, r.stdout + r.stderr
    logs = sorted(result_dir(results).glob("result_*.txt"))
    assert [p.name for p in logs] == [f"result_{i}.txt" for i in range(5)]
    assert (results / ORG / "systems" / f"{SYSTEM}.json").exists()
    for needle in ["time to train", "final accuracy", "success", "result_4.txt", "score",
                   f"{SYSTEM}.json"]:
        assert needle in r.stdout, needle
    seeds = []
    for log in logs:
        ev = events(log)
        keys = [e["key"] for e in ev]
        assert keys[0] == "cache_clear" and keys[1] == "init_start"
        assert keys[-1] == "run_stop" and ev[-1]["metadata"]["status"] == "success"
        for once in ["init_stop", "run_start", "run_stop", "seed", "global_batch_size",
                     "gradient_accumulation_steps", "train_samples", "eval_samples"]:
            assert keys.count(once) == 1, once
        assert "modeled_time_to_train_ms" not in keys  # modeled times: the summary only
        seeds.append([e["value"] for e in ev if e["key"] == "seed"][0])
        assert keys.index("init_stop") < keys.index("run_start")
        evals = [e["metadata"]["epoch_num"] for e in ev if e["key"] == "eval_accuracy"]
        assert evals == list(range(1, len(evals) + 1)), evals  # eval_period 1
        assert [e["value"] for e in ev if e["key"] == "submission_division"] == ["open"]
        assert len([e for e in ev if e["key"] == "weights_initialization"]) == 161
    assert len(set(seeds)) == 5 and all(isinstance(s, int) for s in seeds)
    # The cost model prices each run's steps and evaluation batches (summary only, not logged).
    modeled = re.findall(r"modeled IPU time, run (\d): ([\d.]+) s \((\d+) steps x ([\d.]+) ms "
                         r"\+ (\d+) evaluation batches", r.stdout)
    assert [int(m[0]) for m in modeled] == list(range(5)), r.stdout
    for _, total, steps, step_ms, evals in modeled:
        assert int(steps) > 0 and float(step_ms) > 0 and int(evals) > 0
        assert float(total) >= int(steps) * float(step_ms) / 1e3 * 0.999


@needs_checker
@pytest.mark.parametrize("ruleset", ["4.0.0", "1.1.0"])
def test_package_logs_pass_the_checker(package, ruleset):
    results, _ = package
    for log in sorted(result_dir(results).glob("result_*.txt")):
        code, text, verdict = checker(log, ruleset)
        assert code == 0 and "SUCCESS" in verdict, f"{log.name}:\n{text}"


@needs_checker
def test_package_checker_and_summarizer(package, tmp_path):
    results, _ = package
    org = results / ORG
    r = subprocess.run([str(VENV_PYTHON), "-m", "mlperf_logging.package_checker", str(org),
                        "training", "4.0.0", "--rcp-bypass"],
                       capture_output=True, text=True, cwd=tmp_path)
    text = r.stdout + r.stderr
    verdict = [l for l in text.splitlines() if l.strip()][-1]
    assert "PACKAGE CHECKER FOUND NO ERRORS, SUCCESS" in text, text
    print("package checker:", verdict, file=sys.stderr)

    csv_path = tmp_path / "summary.csv"
    r = subprocess.run([str(VENV_PYTHON), "-m", "mlperf_logging.result_summarizer", str(org),
                        "training", "4.0.0", "-csv", str(csv_path)],
                       capture_output=True, text=True, cwd=tmp_path)
    with open(csv_path) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 1, r.stdout + r.stderr
    summarized = float(rows[0]["resnet"])
    minutes = []
    for log in result_dir(results).glob("result_*.txt"):
        t = {e["key"]: e["time_ms"] for e in events(log) if e["key"] in ("run_start", "run_stop")}
        minutes.append((t["run_stop"] - t["run_start"]) / 60000.0)
    minutes.sort()
    olympic = sum(minutes[1:-1]) / 3
    print(f"summarizer: {summarized:.6f} min, ours: {olympic:.6f} min", file=sys.stderr)
    assert summarized == pytest.approx(olympic, rel=1e-9, abs=1e-9)


@needs_checker
def test_open_run_with_precision_logs_the_policy_and_passes_the_checker(tmp_path):
    results = tmp_path / "results"
    config = write_config(tmp_path / "c.json", {**OPEN_SHORT, "mini_train_samples": 1600})
    r = run(["--division", "open", "--results-dir", str(results), "--max-epochs", "1",
             "--precision", "16.16", "--loss-scaling", "dynamic:1024", "--config", config,
             *THREADS])
    assert r.returncode in (0, 2), r.stdout + r.stderr
    log = result_dir(results) / "result_0.txt"
    ev = events(log)
    value = {e["key"]: e["value"] for e in ev}
    assert value["ipu_precision"] == "16.16,loss=dynamic:1024:2000,sr=on"
    assert value["ipu_loss_scaling"] == "dynamic:1024:2000"
    scales = [e for e in ev if e["key"] == "ipu_loss_scale"]
    assert [e["metadata"]["epoch_num"] for e in scales] == [1]
    assert scales[0]["value"] > 0
    assert "ipu_skipped_steps" in value and "ipu_overflow_events" in value
    code, text, verdict = checker(log, "4.0.0")
    assert code == 0 and "SUCCESS" in verdict, text


def test_open_run_projects_full_scale_time_to_train(tmp_path):
    """--project-full-scale prices full ResNet-50 (224x224, the published POD16 configuration)
    with the cost model. Nothing is fitted to the published time, so only a broad band is
    checked: the model once overcounted MACs and projected ~25x the published minutes."""
    config = write_config(tmp_path / "c.json", {"mini_train_samples": 256, "mini_eval_samples": 128,
                                                "mini_target_accuracy": 0.99, "eval_period": 1})
    r = run(["--division", "open", "--pod-size", "16", "--results-dir", str(tmp_path / "r"),
             "--max-epochs", "1", "--config", config, "--project-full-scale", *THREADS],
            timeout=900)
    assert r.returncode == 2, r.stdout + r.stderr  # ran; the 0.99 target is out of reach
    out = r.stdout
    assert "full-scale projection for IPU-POD16" in out, out
    assert "16 replicas x micro-batch 20 x accumulation 10 = global batch 3200, 38 epochs" in out
    m = re.search(r"modeled time-to-train ([0-9.]+) min = (\d+) steps", out)
    assert m, out
    assert int(m.group(2)) == -(-38 * 1281167 // 3200)  # ceil(epochs x ImageNet / batch)
    ratio = float(re.search(r"28\.33 min \(ratio ([0-9.]+)\)", out).group(1))
    assert 0.33 < ratio < 3.0, out
    assert abs(float(m.group(1)) / 28.33 - ratio) < 0.01


# ----------------------------------------------------------------------------- full scale

# A tiny ImageNet in the standard layout: 4 synsets x 6 training JPEGs of assorted sizes (one
# grayscale, one CMYK: ImageNet has both) and 2 validation JPEGs each. The full ResNet-50 at
# 224x224 trains on it with the POD's LARS hyperparameters, scaled down by --config to
# micro-batch 2 x accumulation 2 (6 weight updates an epoch).
SYNSETS = ["n01440764", "n01443537", "n01484850", "n01491361"]
FULL_CONFIG = {"micro_batch_size": 2, "gradient_accumulation_steps": 2, "model_bn_span": 2}
POD4_CONFIG = {"micro_batch_size": 1, "gradient_accumulation_steps": 1, "model_bn_span": 1}


def make_imagenet(root, corrupt=False, corrupt_val=False, train_per=6):
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(0)
    for split, per in (("train", train_per), ("val", 2)):
        for c, syn in enumerate(SYNSETS):
            folder = root / split / syn
            folder.mkdir(parents=True)
            for i in range(per):
                w, h = int(rng.integers(260, 420)), int(rng.integers(230, 340))
                px = np.array([60 * c, 255 - 60 * c, 128]) + rng.normal(0, 20, (h, w, 3))
                img = Image.fromarray(px.clip(0, 255).astype(np.uint8))
                if split == "train" and c == 1 and i == 0:
                    img = img.convert("L")
                if split == "train" and c == 2 and i == 0:
                    img = img.convert("CMYK")
                img.save(folder / f"{syn}_{i}.JPEG", quality=90)
    if corrupt:  # a truncated file: the header and a little of the scan
        good = (root / "train" / SYNSETS[3] / f"{SYNSETS[3]}_0.JPEG").read_bytes()
        (root / "train" / SYNSETS[3] / "truncated.JPEG").write_bytes(good[:400])
    if corrupt_val:  # 2 of 10 validation files: a truncated one and one of random bytes
        good = (root / "val" / SYNSETS[0] / f"{SYNSETS[0]}_0.JPEG").read_bytes()
        (root / "val" / SYNSETS[0] / "val_truncated.JPEG").write_bytes(good[:400])
        (root / "val" / SYNSETS[2] / "val_random.JPEG").write_bytes(
            np.random.default_rng(1).integers(0, 256, 3000, dtype=np.uint8).tobytes())
    return root


@pytest.fixture(scope="module")
def imagenet(tmp_path_factory):
    return make_imagenet(tmp_path_factory.mktemp("imagenet"))


@pytest.fixture(scope="module")
def imagenet_corrupt(tmp_path_factory):
    return make_imagenet(tmp_path_factory.mktemp("imagenet_corrupt"), corrupt=True)


@pytest.fixture(scope="module")
def imagenet_corrupt_val(tmp_path_factory):
    """One training step an epoch (4 images): these tests are about the evaluation after it."""
    return make_imagenet(tmp_path_factory.mktemp("imagenet_corrupt_val"), corrupt_val=True,
                         train_per=1)


def full_run(tmp_path, data, division="open", pod="1", config=FULL_CONFIG, extra=()):
    results = tmp_path / "results"
    r = run(["--scale", "full", "--division", division, "--pod-size", pod, "--data-dir", str(data),
             "--results-dir", str(results), "--precision", "fp32", "--max-epochs", "1",
             "--skip-memory-check", "--config", write_config(tmp_path / "c.json", config),
             *THREADS, *extra], timeout=600)
    return r, results


def test_full_scale_open_run_trains_resnet50_with_lars_and_passes_the_checker(tmp_path, imagenet):
    r, results = full_run(tmp_path, imagenet)
    out = r.stdout + r.stderr
    assert r.returncode == 2, out  # one epoch of 24 images does not reach 0.759
    assert "224x224x3, 1000 classes" in out and "resnet50/full/POD1" in out, out
    assert "6 steps x" in out, out  # 24 images / (2 x 2)
    log = result_dir(results) / "result_0.txt"
    ev = events(log)
    value = {e["key"]: e["value"] for e in ev}
    assert value["opt_name"] == "lars" and value["lars_opt_base_learning_rate"] == 10.72
    assert value["train_samples"] == 24 and value["eval_samples"] == 8  # the folders' own counts
    assert value["global_batch_size"] == 4 and value["gradient_accumulation_steps"] == 2
    assert len([e for e in ev if e["key"] == "weights_initialization"]) == 161
    assert [e["metadata"]["status"] for e in ev if e["key"] == "run_stop"] == ["aborted"]
    accuracy = [e["value"] for e in ev if e["key"] == "eval_accuracy"]
    assert len(accuracy) == 1 and accuracy[0] in (0.0, 0.125, 0.25, 0.375, 0.5, 0.625, 0.75,
                                                  0.875, 1.0)
    if have_checker():
        for ruleset in ["4.0.0", "1.1.0"]:
            code, text, verdict = checker(log, ruleset)
            assert code == 0 and "SUCCESS" in verdict, f"{ruleset}:\n{text}"


@needs_checker
def test_full_scale_closed_log_fails_only_the_accuracy_target(tmp_path, imagenet):
    """Closed: the published LARS keys pass every rule; only the 0.759 target is not met."""
    r, results = full_run(tmp_path, imagenet, division="closed")
    assert r.returncode == 2, r.stdout + r.stderr
    code, text, verdict = checker(result_dir(results) / "result_0.txt", "4.0.0")
    failed = [l for l in text.splitlines() if "Failed checks" in l]
    assert failed and all("eval_accuracy" in l for l in failed), text


def test_full_scale_pod4_skips_a_corrupt_jpeg_and_names_it(tmp_path, imagenet_corrupt):
    """4 replicas (LARS over the all-reduced gradient); --on-corrupt-image skip replaces the
    truncated file by the next image of the epoch and logs its name."""
    r, results = full_run(tmp_path, imagenet_corrupt, pod="4", config=POD4_CONFIG,
                          extra=["--on-corrupt-image", "skip"])
    out = r.stdout + r.stderr
    assert r.returncode == 2, out
    assert "corrupt image(s) skipped, first:" in out and "truncated.JPEG" in out, out
    ev = events(result_dir(results, "ipu-pod4-emulated") / "result_0.txt")
    skipped = [e for e in ev if e["key"] == "ipu_corrupt_images_skipped"]
    assert len(skipped) == 1 and skipped[0]["value"] == 1, skipped
    assert skipped[0]["metadata"]["files"][0].endswith("truncated.JPEG")
    value = {e["key"]: e["value"] for e in ev}
    assert value["train_samples"] == 25 and value["global_batch_size"] == 4
    assert [e["metadata"]["status"] for e in ev if e["key"] == "run_stop"] == ["aborted"]
    assert "eval_accuracy" in value


def test_full_scale_corrupt_jpeg_fails_the_run_naming_it(tmp_path, imagenet_corrupt):
    r, results = full_run(tmp_path, imagenet_corrupt)
    out = r.stdout + r.stderr
    assert r.returncode == 4, out  # aborted by an error, not a missed target
    ev = events(result_dir(results) / "result_0.txt")
    reason = [e["value"] for e in ev if e["key"] == "run_abort_reason"]
    assert len(reason) == 1 and "truncated.JPEG" in reason[0], reason
    assert [e["metadata"]["status"] for e in ev if e["key"] == "run_stop"] == ["aborted"]


def test_full_scale_corrupt_val_images_are_not_scored_under_skip(tmp_path, imagenet_corrupt_val):
    """Issue 33: 2 of 10 validation files are corrupt. Under skip they are named and not scored,
    and nothing is scored in their place: eval_samples and the denominator are the 8 others."""
    r, results = full_run(tmp_path, imagenet_corrupt_val,
                          config={**FULL_CONFIG, "max_corrupt_eval_fraction": 0.25},
                          extra=["--on-corrupt-image", "skip"])
    out = r.stdout + r.stderr
    assert r.returncode == 2, out  # ran to the end; one epoch does not reach the target
    assert ("evaluation after epoch 1: 2 of 10 validation image(s) corrupt, skipped and not "
            "scored (the accuracy is over the other 8), first: ") in out, out
    ev = events(result_dir(results) / "result_0.txt")
    assert [e["value"] for e in ev if e["key"] == "eval_samples"] == [8]
    assert [e["value"] for e in ev if e["key"] == "ipu_max_corrupt_eval_fraction"] == [0.25]
    skipped = [e for e in ev if e["key"] == "ipu_corrupt_eval_images_skipped"]
    assert len(skipped) == 1 and skipped[0]["value"] == 2, skipped
    assert skipped[0]["metadata"]["epoch_num"] == 1
    assert sorted(pathlib.Path(f).name for f in skipped[0]["metadata"]["files"]) == [
        "val_random.JPEG", "val_truncated.JPEG"]
    accuracy = [e["value"] for e in ev if e["key"] == "eval_accuracy"]
    assert len(accuracy) == 1 and abs(accuracy[0] * 8 - round(accuracy[0] * 8)) < 1e-9, accuracy
    assert not [e for e in ev if e["key"] == "ipu_corrupt_images_skipped"]  # training: none
    if have_checker():
        code, text, verdict = checker(result_dir(results) / "result_0.txt", "4.0.0")
        assert code == 0 and "SUCCESS" in verdict, text


def test_full_scale_too_many_corrupt_val_images_abort_the_run(tmp_path, imagenet_corrupt_val):
    """The default limit (0.1% of the validation set) is exceeded by 2 of 10: aborted, exit 4."""
    r, results = full_run(tmp_path, imagenet_corrupt_val, extra=["--on-corrupt-image", "skip"])
    out = r.stdout + r.stderr
    assert r.returncode == 4, out
    log = result_dir(results) / "result_0.txt"
    assert_aborted_log(log, "evaluation after epoch 1: 2 of 10 validation images are corrupt "
                            "(20%), more than the limit of 0.1% (max_corrupt_eval_fraction)")
    ev = events(log)
    assert [e["value"] for e in ev if e["key"] == "eval_samples"] == [8]
    assert [e["value"] for e in ev if e["key"] == "ipu_max_corrupt_eval_fraction"] == [0.001]
    assert not [e for e in ev if e["key"] == "eval_accuracy"]


def test_full_scale_corrupt_val_image_fails_naming_the_evaluation(tmp_path, imagenet_corrupt_val):
    """Under fail, the error says it came from the evaluation after epoch 1 (it once said
    "batch 0 of epoch 0") and names the file."""
    r, results = full_run(tmp_path, imagenet_corrupt_val)
    out = r.stdout + r.stderr
    assert r.returncode == 4, out
    log = result_dir(results) / "result_0.txt"
    assert_aborted_log(log, "evaluation after epoch 1, batch ")
    reason = [e["value"] for e in events(log) if e["key"] == "run_abort_reason"][0]
    assert "val_truncated.JPEG" in reason and "of epoch 0" not in reason, reason
    assert [e["value"] for e in events(log) if e["key"] == "eval_samples"] == [10]


def test_full_scale_that_does_not_fit_is_refused_before_writing(tmp_path, imagenet):
    """Full ResNet-50 in FP32 with gradient accumulation does not fit one Mk2 even at micro-batch
    2: the compile step says so (exit 3) and nothing is written."""
    results = tmp_path / "results"
    results.mkdir()
    r = run(["--scale", "full", "--division", "open", "--data-dir", str(imagenet), "--results-dir",
             str(results), "--precision", "fp32", "--config",
             write_config(tmp_path / "c.json", FULL_CONFIG), *THREADS], timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 3, out
    assert "out of tile memory on IPU-Mk2" in out, out
    assert files_under(results) == []


def test_open_run_beyond_the_hosts_memory_is_refused_before_writing(tmp_path):
    """Each emulated IPU holds its own tensors: 16 real ResNet-50 replicas (~0.6 GB each) are
    refused when the host's memory (here capped by IPU_HOST_MEMORY_LIMIT_GB) cannot hold them,
    before anything is written (POD64 on a 24 GB host is refused so, instead of being killed)."""
    results = tmp_path / "results"
    results.mkdir()
    r = run(["--division", "open", "--pod-size", "16", "--results-dir", str(results), "--threads",
             "1"], timeout=300, env={"IPU_HOST_MEMORY_LIMIT_GB": "2"})
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert "16 replicas in this process need" in out and "only 2.0 GB more" in out, out
    assert "mpirun -np N" in out and "smaller pod size" in out, out
    assert files_under(results) == []


def test_progress_line_only_on_a_terminal(tmp_path):
    config = write_config(tmp_path / "c.json", {**OPEN_SHORT, "mini_train_samples": 800})
    args = ["--division", "open", "--max-epochs", "1", "--config", config, *THREADS]
    quiet = run(["--results-dir", str(tmp_path / "a"), *args])
    assert "img/s" not in quiet.stderr and "\r" not in quiet.stderr
    cmd = " ".join([BINARY, "--results-dir", str(tmp_path / "b"), *args])
    tty = subprocess.run(["script", "-qec", cmd, "/dev/null"], capture_output=True, text=True,
                         timeout=300)
    assert "img/s" in tty.stdout and "ETA" in tty.stdout and "epoch 1/1" in tty.stdout, tty.stdout


# ----------------------------------------------------------------------------- aborted runs

def assert_aborted_log(log, reason):
    ev = events(log)
    stops = [e for e in ev if e["key"] == "run_stop"]
    assert len(stops) == 1 and stops[0]["metadata"]["status"] == "aborted"
    assert ev[-1]["key"] == "run_stop"
    # Why, just before run_stop (a key of ours; the checker skips keys it does not know).
    assert ev[-2]["key"] == "run_abort_reason" and reason in ev[-2]["value"], ev[-2]
    if have_checker():
        # The checker reads the whole log; the only complaints allowed are about accuracy (an
        # aborted run may end before its first evaluation or below the target).
        code, text, verdict = checker(log, "4.0.0")
        assert "Traceback" not in text, text
        fails = [l for l in text.splitlines() if "failed test" in l or "Required" in l]
        assert all("eval_accuracy" in l or "0.7590" in l for l in fails), text


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)],
                         ids=["SIGINT", "SIGTERM"])
def test_sigint_ends_the_run_aborted_with_a_complete_log(tmp_path, sig, code):
    results = tmp_path / "results"
    config = write_config(tmp_path / "c.json", {"mini_eval_samples": 1000})
    p = subprocess.Popen([BINARY, "--results-dir", str(results), "--runs", "2",
                          "--config", config, *THREADS],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = result_dir(results) / "result_0.txt"
    deadline = time.time() + 300  # the compile step and the weight init come first
    while time.time() < deadline:
        if log.exists() and "run_start" in log.read_text():
            break
        time.sleep(0.1)
    else:
        p.kill()
        pytest.fail("no run_start in the log within 300 s")
    time.sleep(2.0)  # well inside the first epoch (60,000 images, ~10 minutes)
    p.send_signal(sig)
    out, err = p.communicate(timeout=120)
    assert p.returncode == code, out + err
    assert "interrupted" in out + err
    assert_aborted_log(log, f"interrupted ({sig.name})")
    assert not (result_dir(results) / "result_1.txt").exists()  # no further run started


def test_diverging_run_is_aborted_and_reported(tmp_path):
    results = tmp_path / "results"
    # Closed (eval at epoch 1, offset 1): SGD 1e6 is legal, and diverges within the first epoch
    # (on 2026-12-03 the loss was NaN at step 14).
    config = write_config(tmp_path / "c.json",
                          {"mini_train_samples": 3200, "mini_eval_samples": 500, "eval_offset": 1,
                           "sgd_opt_base_learning_rate": 1e6})
    r = run(["--results-dir", str(results), "--max-epochs", "2", "--config", config, *THREADS])
    assert r.returncode == 2, r.stdout + r.stderr
    assert re.search(r"training diverged: loss -?(nan|inf)", r.stderr), r.stderr
    assert_aborted_log(result_dir(results) / "result_0.txt", "training diverged")
