"""EfficientNet-B4 rules of our own (docs/rules/efficientnet_b4.md): the official mlperf_logging
checker with our ruleset (harness/rules/training_efficientnet/) on logs in the harness's format,
the JSON form of the rules against the YAML, and broken rule files. The harness's pre-run check
of the JSON form is tests/harness/efficientnet_rules_test.cpp."""

import json
import os
import shutil
import subprocess

import pytest
import yaml

import efficientnet_log as L  # tests/scripts: pytest puts the test's folder on sys.path
import efficientnet_rules as R  # scripts/: conftest puts it on sys.path
from conftest import REPO

VENV_PYTHON = os.path.join(REPO, ".venv", "bin", "python")
CLOSED_YAML = os.path.join(R.RULESET_DIR, "closed_efficientnet_b4.yaml")
OPEN_YAML = os.path.join(R.RULESET_DIR, "open_efficientnet_b4.yaml")


def records(path):
    with open(path) as f:
        return yaml.load(f, Loader=yaml.BaseLoader)


def key_records(path):
    return {r["KEY"]["NAME"]: r["KEY"] for r in records(path) if "KEY" in r}


def begin_state(path):
    """s after the file's BEGIN record, as the checker runs it (config_file in its locals)."""
    code = [r["BEGIN"]["CODE"] for r in records(path) if "BEGIN" in r][0]
    s = {}
    exec(code.strip(), {"s": s}, {"config_file": path})
    return s


def expected_tensor_names():
    """The weights_initialization names committed in the closed ruleset."""
    end = [r["END"] for r in records(CLOSED_YAML) if "END" in r][0]
    state = {"s": {"global_batch_size": None, "opt_base_learning_rate": None, "eval_epochs": [1],
                   "eval_values": [0.9], "eval_period_epochs": 4, "quality_target": 0.82},
             "initialized_tensors": []}
    exec(end["PRE"].strip(), state)
    return state["expected_tensors"]


def check_eval(test, value, scale=None):
    s = {} if scale is None else {"scale": scale}
    return eval(test.strip(), {"s": s, "is_integer": lambda x: abs(round(x) - x) < 1e-5},
                {"v": {"value": value, "metadata": {}}})


def perturbed(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value * 1.1
    return value + "_x"


# ---------------------------------------------------------------- JSON == YAML, no checker needed

def test_fixed_values_of_json_and_closed_yaml_agree():
    rules = R.load_json_rules()
    keys = key_records(CLOSED_YAML)
    for key, value in rules["closed"]["fixed"].items():
        assert key in keys, f"{key} fixed in the JSON, absent from {CLOSED_YAML}"
        assert keys[key]["REQ"] == "EXACTLY_ONE", key
        assert check_eval(keys[key]["CHECK"], value), f"{key}: the YAML refuses the JSON's {value}"
        assert not check_eval(keys[key]["CHECK"], perturbed(value)), \
            f"{key}: the YAML accepts {perturbed(value)!r}, not the fixed {value!r}"
    # Every value CHECK (== literal) in the YAML is a fixed key of the JSON.
    for key, record in keys.items():
        if "==" in str(record.get("CHECK", "")):
            assert key in rules["closed"]["fixed"], f"{key} fixed in the YAML, not in the JSON"
    for key in rules["closed"]["tunable"]:
        assert keys[key]["REQ"] == "EXACTLY_ONE", key


def test_mini_values_of_json_and_closed_yaml_agree():
    """Under benchmark_scale "mini" the closed YAML takes the JSON's mini values, not the full
    recipe's; every other fixed key keeps its full value."""
    rules = R.load_json_rules()
    keys = key_records(CLOSED_YAML)
    full, mini = rules["closed"]["fixed"], rules["mini"]["closed_fixed"]
    assert set(mini) <= set(full)
    for key, value in dict(full, **mini).items():
        assert check_eval(keys[key]["CHECK"], value, "mini"), f"{key}: mini refuses {value!r}"
        if key in mini and mini[key] != full[key] and key != "benchmark_scale":
            assert not check_eval(keys[key]["CHECK"], full[key], "mini"), \
                f"{key}: a mini log may carry the full value {full[key]!r}"
            assert not check_eval(keys[key]["CHECK"], mini[key]), \
                f"{key}: a full log may carry the mini value {mini[key]!r}"
    assert L.CLOSED_MINI_HPARAMS["benchmark_scale"] == "mini"
    assert {k: L.CLOSED_MINI_HPARAMS[k] for k in mini} == mini


def test_target_cadence_and_lr_rule_agree():
    rules = R.load_json_rules()
    target = rules["quality"]["target"]
    assert target == 0.82
    for path in (os.path.join(R.RULESET_DIR, "common.yaml"), CLOSED_YAML, OPEN_YAML):
        assert begin_state(path)["quality_target"] == target, path
        assert begin_state(path)["mini_quality_target"] == rules["mini"]["target"], path
    closed = begin_state(CLOSED_YAML)
    assert closed["eval_period_epochs"] == rules["evaluation"]["period_epochs"]
    assert closed["lr_per_256_multiple_of"] == rules["closed"]["learning_rate_per_256_multiple_of"]
    opened = key_records(OPEN_YAML)
    for key in rules["open"]["required"]:
        assert opened[key]["REQ"] == "EXACTLY_ONE", key
    assert {k for k, r in opened.items() if r.get("REQ") == "EXACTLY_ONE"} == \
        set(rules["open"]["required"])
    for key in ("model_variant", "norm_type"):
        for value in rules["open"][key]:
            assert check_eval(opened[key]["CHECK"], value), (key, value)
        assert not check_eval(opened[key]["CHECK"], "resnet"), key


def test_weights_initialization_names_are_torchvisions():
    names = expected_tensor_names()
    assert len(names) == 418 and len(set(names)) == 418
    assert names[0] == "features.0.0.weight" and names[-1] == "classifier.1.bias"
    assert not any("running_" in n or "num_batches" in n for n in names)
    pytest.importorskip("torchvision")
    assert names == R.names_from_torchvision()


def test_all_rule_files_load():
    R.check_rules()


# ---------------------------------------------------------------- broken rule files

def broken_copy(tmp_path, name, old, new):
    d = tmp_path / "rules"
    shutil.copytree(R.RULESET_DIR, d)
    text = (d / name).read_text()
    assert old in text
    (d / name).write_text(text.replace(old, new, 1))
    return d


def test_yaml_syntax_error_names_the_file_and_line(tmp_path):
    d = broken_copy(tmp_path, "closed_efficientnet_b4.yaml",
                    "    NAME:  opt_rmsprop_decay", "    NAME:  [opt_rmsprop_decay")
    with pytest.raises(R.RulesError) as e:
        R.check_rules(str(d))
    msg = str(e.value)
    assert f"{d}/closed_efficientnet_b4.yaml:" in msg and "YAML syntax error" in msg, msg


def test_bad_check_expression_and_req_name_the_key(tmp_path):
    d = broken_copy(tmp_path, "open_efficientnet_b4.yaml",
                    "\" v['value'] in ['b4', 'g16'] \"", "\" v['value'] in ['b4', 'g16' \"")
    with pytest.raises(R.RulesError, match=r"open_efficientnet_b4.yaml: KEY model_variant CHECK"):
        R.check_rules(str(d))
    d2 = tmp_path / "b"
    shutil.copytree(R.RULESET_DIR, d2)
    text = (d2 / "open_efficientnet_b4.yaml").read_text().replace("REQ:   EXACTLY_ONE",
                                                                  "REQ:   EXACTLY_1", 1)
    (d2 / "open_efficientnet_b4.yaml").write_text(text)
    with pytest.raises(R.RulesError, match=r"KEY model_variant: REQ 'EXACTLY_1'"):
        R.check_rules(str(d2))


def test_bad_json_names_the_file_and_line(tmp_path):
    p = tmp_path / "efficientnet_b4.json"
    p.write_text('{\n  "benchmark": "efficientnet_b4",\n  "quality": {"target": 0.82,}\n}\n')
    with pytest.raises(R.RulesError, match=rf"{p}:3:"):
        R.load_json_rules(str(p))


# ---------------------------------------------------------------- the official checker

@pytest.fixture
def checker(tmp_path):
    if not os.path.exists(VENV_PYTHON) or subprocess.run(
            [VENV_PYTHON, "-c", "import mlperf_logging"], capture_output=True).returncode:
        pytest.skip(f"the MLPerf checker is not installed: run `bash scripts/setup.sh` "
                    f"(creates {os.path.join(REPO, '.venv')} with mlperf-logging)")

    def run(lines, config=None):
        log = L.write_log(str(tmp_path / "result_0.txt"), lines)
        if config is None:
            r = R.run_checker(log, VENV_PYTHON)
        else:
            r = subprocess.run([VENV_PYTHON, "-m", "mlperf_logging.compliance_checker",
                                "--ruleset", R.CHECKER_RULESET, "--config", config,
                                "--log_output", os.devnull, log], capture_output=True, text=True)
        return r.returncode, r.stdout + r.stderr
    return run


def closed_log(**kw):
    return L.make_log(L.CLOSED_HPARAMS, expected_tensor_names(), **kw)


def assert_passes(result):
    rc, out = result
    assert rc == 0 and out.rstrip().endswith("SUCCESS"), out


def assert_fails(result, *needles):
    rc, out = result
    assert rc == 1 and "FAILED" in out, out
    for needle in needles:
        assert needle in out, f"{needle!r} not in:\n{out}"


def test_closed_log_passes_and_runs_all_three_files(checker):
    rc, out = checker(closed_log())
    assert_passes((rc, out))
    for name in ("common.yaml", "closed_common.yaml", "closed_efficientnet_b4.yaml"):
        assert os.path.join(R.RULESET_DIR, name) in out, out


def test_closed_log_with_offset_3_passes(checker):
    assert_passes(checker(closed_log(eval_offset=3)))


def test_open_g16_log_passes_open_and_fails_closed(checker):
    open_lines = L.make_log(L.OPEN_G16_HPARAMS, [], division="open")
    rc, out = checker(open_lines)
    assert_passes((rc, out))
    assert "open_efficientnet_b4.yaml" in out
    # The same run entered as closed, and the open log under the closed benchmark file alone.
    relabelled = L.make_log(L.OPEN_G16_HPARAMS, expected_tensor_names(), division="closed")
    assert_fails(checker(relabelled), "CHECK for 'model_variant' failed",
                 "CHECK for 'norm_type' failed", "CHECK for 'opt_rmsprop_decay' failed",
                 "'model_bn_span' but found 0")
    assert_fails(checker(open_lines, CLOSED_YAML), "CHECK for 'model_variant' failed")


def test_missing_required_key_fails_naming_it(checker):
    assert_fails(checker(closed_log(drop_keys=("opt_rmsprop_epsilon",))),
                 "Required EXACTLY_ONE occurrence of 'opt_rmsprop_epsilon' but found 0")
    assert_fails(checker(L.make_log(L.OPEN_G16_HPARAMS, [], division="open",
                                    drop_keys=("model_variant",))),
                 "Required EXACTLY_ONE occurrence of 'model_variant' but found 0")


@pytest.mark.parametrize("key", sorted(R.load_json_rules()["closed"]["fixed"]))
def test_tuned_fixed_hyperparameter_fails_naming_it(checker, key):
    hp = dict(L.CLOSED_HPARAMS, **{key: perturbed(L.CLOSED_HPARAMS[key])})
    assert_fails(checker(L.make_log(hp, expected_tensor_names())), f"CHECK for '{key}' failed")


def test_success_below_target_fails(checker):
    assert_fails(checker(closed_log(accuracies={4: 0.61, 8: 0.8199}, status="success")),
                 "CHECK for 'run_stop' failed", "Failed checks for eval_accuracy")
    # The open division has the same target.
    assert_fails(checker(L.make_log(L.OPEN_G16_HPARAMS, [], division="open",
                                    accuracies={4: 0.61, 8: 0.8199}, status="success")),
                 "CHECK for 'run_stop' failed", "Failed checks for eval_accuracy")


def test_closed_mini_log_passes_at_the_mini_target(checker):
    target = R.load_json_rules()["mini"]["target"]
    mini = lambda hp, acc: L.make_log(hp, expected_tensor_names(), accuracies={4: 0.15, 8: acc},
                                      target=target)
    assert_passes(checker(mini(L.CLOSED_MINI_HPARAMS, target)))
    # Below the mini target, and the full target's check on a mini log that reached it.
    assert_fails(checker(mini(L.CLOSED_MINI_HPARAMS, round(target - 0.01, 4))),
                 "Failed checks for eval_accuracy")
    full_scale = dict(L.CLOSED_MINI_HPARAMS, benchmark_scale="full")
    assert_fails(checker(mini(full_scale, target)), "CHECK for 'dropout_rate' failed",
                 "CHECK for 'model_bn_momentum' failed", "Failed checks for eval_accuracy")
    # The full recipe's regularisation in a mini log: closed mini fixes the mini values.
    regularised = dict(L.CLOSED_MINI_HPARAMS, dropout_rate=0.4)
    assert_fails(checker(mini(regularised, target)), "CHECK for 'dropout_rate' failed")
    # The open division has the mini target too.
    assert_passes(checker(L.make_log(dict(L.CLOSED_MINI_HPARAMS, model_variant="g16"), [],
                                     division="open", accuracies={4: 0.15, 8: target},
                                     target=target)))


def test_non_numeric_accuracy_fails_without_a_traceback(checker):
    lines = [line.replace('"value": 0.83,', '"value": "0.83",')
             for line in closed_log(accuracies={4: 0.5, 8: 0.83}, status="success")]
    rc, out = checker(lines)
    assert_fails((rc, out), "CHECK for 'eval_accuracy' failed", "isinstance(v['value']")
    assert "Traceback" not in out, out


def test_learning_rate_off_the_scaling_rule_fails(checker):
    hp = dict(L.CLOSED_HPARAMS, opt_base_learning_rate=0.05)  # k = 0.01667 per 256
    assert_fails(checker(L.make_log(hp, expected_tensor_names())), "opt_base_learning_rate_per_256")


def test_evaluation_off_the_cadence_fails(checker):
    assert_fails(checker(closed_log(accuracies={4: 0.5, 8: 0.7, 10: 0.83})),
                 "eval_accuracy_cadence_ok")
    assert_fails(checker(closed_log(accuracies={5: 0.5, 9: 0.83})), "eval_accuracy_cadence_ok")


def test_wrong_weights_initialization_names_fail(checker):
    names = expected_tensor_names()
    lines = L.make_log(L.CLOSED_HPARAMS, names[:-1] + ["classifier.1.bias_x"])
    assert_fails(checker(lines), "weights_initialization_missing", "classifier.1.bias_x")


def test_other_benchmark_name_fails_without_crashing(checker):
    assert_fails(checker(closed_log(benchmark="resnet")), "CHECK for 'submission_benchmark'")


def test_checker_on_a_broken_ruleset_names_the_file(checker, tmp_path):
    # What the official checker itself does with a syntax error: a traceback naming the file.
    d = broken_copy(tmp_path, "closed_efficientnet_b4.yaml",
                    "    NAME:  opt_rmsprop_decay", "    NAME:  [opt_rmsprop_decay")
    rc, out = checker(closed_log(), os.path.join(d, "common.yaml"))
    assert rc != 0 and f'in "{d}/closed_efficientnet_b4.yaml", line' in out, out


def test_check_log_cli_refuses_a_broken_ruleset_before_the_checker(checker, tmp_path):
    log = L.write_log(str(tmp_path / "log.txt"), closed_log())
    cli = ["/usr/bin/python3", "-B", os.path.join(REPO, "scripts", "efficientnet_rules.py"),
           "check-log", log]
    r = subprocess.run(cli, capture_output=True, text=True)
    assert r.returncode == 0 and "SUCCESS" in r.stderr, r.stdout + r.stderr
    d = broken_copy(tmp_path, "open_common.yaml", "- KEY:", "- KEY: [")
    r = subprocess.run(cli + ["--rules-dir", str(d)], capture_output=True, text=True)
    assert r.returncode == 1 and r.stderr.startswith(f"error: {d}/open_common.yaml:") \
        and "Traceback" not in r.stderr, r.stderr


def test_generator_matches_the_harness_format():
    """The generated lines have the harness's key order and metadata layout."""
    line = closed_log()[0]
    assert line.startswith(':::MLLOG {"namespace": "", "time_ms": ')
    event = json.loads(line[len(":::MLLOG "):])
    assert list(event) == ["namespace", "time_ms", "event_type", "key", "value", "metadata"]
    assert list(event["metadata"]) == ["file", "lineno"]
