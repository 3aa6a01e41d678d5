"""run_benchmark --benchmark efficientnet_b4 end to end: a mini closed run (B4) and a mini open
run (G16, group norm, micro-batch 4), each a few micro-batches of Fashion-MNIST at 28x28,
judged by the official mlperf_logging checker with our ruleset
(harness/rules/training_efficientnet/, `--config` as tests/scripts/test_efficientnet_rules.py
runs it), and the same logs broken on purpose.

What the CI runs can and cannot show: the closed mini run follows the mini recipe and must reach
the rules' mini target (harness/rules/efficientnet_b4.json "mini"), set from curves of a few
thousand images (docs/rules/efficientnet_b4.md; benchmarks/models/efficientnet_mini_tta.sh), which
CI's budget of two micro-batches does not give. So these tests assert that every check passes
except the quality target (the 'target not reached' log), and that a broken log fails more; the
refusals are in test_run_benchmark.py.

Environment as test_run_benchmark.py: RUN_BENCHMARK, IPU_SOURCE_DIR (its .venv holds the checker).
"""
import json
import os
import pathlib
import subprocess
import tempfile

import pytest

BINARY = os.environ.get("RUN_BENCHMARK", "")
SOURCE_DIR = pathlib.Path(os.environ.get("IPU_SOURCE_DIR", pathlib.Path(__file__).parents[2]))
VENV_PYTHON = SOURCE_DIR / ".venv" / "bin" / "python"
RULESET = SOURCE_DIR / "harness" / "rules" / "training_efficientnet" / "common.yaml"
CHECKER_CWD = tempfile.mkdtemp(prefix="harness_cli_effnet_checker_")
# The one check a mini log fails: the quality target (see the module docstring).
TARGET_CHECK = ("Failed checks for eval_accuracy : isinstance(v['value'], (int, float)) and "
                "s['quality_target'] <= v['value'] < 1.0")
# Two micro-batches of 32 and one evaluation of 64 images: about a minute on 2 cores.
TINY = {"mini_train_samples": 64, "mini_eval_samples": 64}


def have_checker():
    return VENV_PYTHON.exists() and subprocess.run(
        [str(VENV_PYTHON), "-c", "import mlperf_logging"], capture_output=True).returncode == 0


needs_checker = pytest.mark.skipif(
    not have_checker(), reason="mlperf-logging missing: run `bash scripts/setup.sh`")


def events(log):
    return [json.loads(l[len(":::MLLOG "):]) for l in pathlib.Path(log).read_text().splitlines()
            if l.startswith(":::MLLOG ")]


def checker(log):
    r = subprocess.run([str(VENV_PYTHON), "-m", "mlperf_logging.compliance_checker", "--usage",
                        "training", "--ruleset", "4.0.0", "--config", str(RULESET), str(log)],
                       capture_output=True, text=True, cwd=CHECKER_CWD)
    text = r.stdout + r.stderr
    failures = [l.split(" - ", 1)[-1].strip() for l in text.splitlines()
                if ("WARNING" in l or "ERROR" in l) and "FAILED" not in l]
    return r.returncode, failures, text


def mini_run(root, division, config):
    results = root / "results"
    cfg = root / "config.json"
    cfg.write_text(json.dumps(config))
    assert BINARY, "RUN_BENCHMARK is not set"
    r = subprocess.run([BINARY, "--benchmark", "efficientnet_b4", "--division", division,
                        "--scale", "mini", "--runs", "1", "--max-epochs", "1", "--threads", "2",
                        "--results-dir", str(results), "--config", str(cfg)],
                       capture_output=True, text=True, timeout=900)
    log = results / "ipu_mlperf" / "results" / "ipu-pod1-emulated" / "efficientnet_b4" / \
        "result_0.txt"
    assert log.exists(), r.stdout + r.stderr
    # 2: the run ended (epoch budget spent before the target) with a complete log; a negative
    # code is a signal (the kernel's OOM killer: the run peaks at several GB, docs/PERFORMANCE.md).
    assert r.returncode == 2, f"exit {r.returncode}\n{r.stdout}{r.stderr}"
    return r, log


@pytest.fixture(scope="module")
def closed_log(tmp_path_factory):
    return mini_run(tmp_path_factory.mktemp("effnet_closed"), "closed", TINY)


@pytest.fixture(scope="module")
def open_log(tmp_path_factory):
    # G16 with group norm (4 groups) at micro-batch 4. At 8 or 32 one group_norm did not fit a
    # tile while the planner kept each group_norm's input on one tile (602,112 B of exchange
    # buffer at features.2.0.block.0.1 for micro-batch 8); its sums are now split over tiles,
    # and the larger micro-batches have not been rechecked here.
    return mini_run(tmp_path_factory.mktemp("effnet_open"), "open",
                    {"mini_train_samples": 16, "mini_eval_samples": 16, "micro_batch_size": 4,
                     "model_bn_span": 4, "model_variant": "g16", "norm_type": "group_norm",
                     "mini_target_accuracy": 0.82})


def hyperparameters(log):
    return {e["key"]: e["value"] for e in events(log) if e["event_type"] == "POINT_IN_TIME"}


def test_mini_closed_run_logs_the_b4_recipe(closed_log):
    r, log = closed_log
    hp = hyperparameters(log)
    assert hp["submission_benchmark"] == "efficientnet_b4"
    assert hp["submission_division"] == "closed"
    # The mini recipe (docs/rules/efficientnet_b4.md, "Mini scale").
    for key, value in {"benchmark_scale": "mini", "opt_name": "rmsprop", "opt_rmsprop_decay": 0.9,
                       "opt_rmsprop_momentum": 0.9, "opt_rmsprop_epsilon": 0.001,
                       "opt_learning_rate_decay_factor": 0.97,
                       "opt_learning_rate_decay_epochs": 2.4, "label_smoothing": 0.0,
                       "opt_weight_decay": 1e-05, "opt_weight_decay_skip_norm": True,
                       "model_eval_ema_factor": 0.0, "dropout_rate": 0.0,
                       "stochastic_depth_rate": 0.0, "model_bn_momentum": 0.5,
                       "model_classifier_init_fan_out": 1000, "model_variant": "b4",
                       "norm_type": "batch_norm", "train_samples": 64, "eval_samples": 64}.items():
        assert hp[key] == value, key
    names = [e["metadata"]["tensor"] for e in events(log) if e["key"] == "weights_initialization"]
    assert len(names) == 418 and names[0] == "features.0.0.weight", names[:3]
    assert "EfficientNet-B4 (batch norm, 17565682 parameters, 28x28x1" in r.stdout


@needs_checker
def test_mini_closed_log_passes_every_check_but_the_target(closed_log):
    _, log = closed_log
    code, failures, text = checker(log)
    assert "closed_efficientnet_b4.yaml" in text, text  # our ruleset ran, not the official one
    assert code != 0 and failures == [TARGET_CHECK], text


@needs_checker
def test_mini_open_g16_log_passes_every_check_but_the_target(open_log):
    r, log = open_log
    hp = hyperparameters(log)
    assert (hp["model_variant"], hp["norm_type"]) == ("g16", "group_norm")
    assert "EfficientNet-B4-G16 (group norm" in r.stdout, r.stdout
    code, failures, text = checker(log)
    assert "open_efficientnet_b4.yaml" in text, text
    assert code != 0 and failures == [TARGET_CHECK], text


@needs_checker
@pytest.mark.parametrize("broken", ["missing_key", "tuned_fixed"])
def test_broken_closed_log_fails_more_checks(closed_log, broken, tmp_path):
    _, log = closed_log
    lines = log.read_text().splitlines(keepends=True)
    if broken == "missing_key":
        out = [l for l in lines if '"key": "opt_rmsprop_decay"' not in l]
        needle = "opt_rmsprop_decay"
    else:
        out = [l.replace('"value": 0.0,', '"value": 0.4,') if '"key": "dropout_rate"' in l else l
               for l in lines]  # the full recipe's dropout in a mini log
        needle = "dropout_rate"
    assert out != lines
    bad = tmp_path / "result_0.txt"
    bad.write_text("".join(out))
    code, failures, text = checker(bad)
    assert code != 0
    assert any(needle in f for f in failures if f != TARGET_CHECK), text
