"""run_benchmark with a replica pipelined over several IPUs (--ipus-per-replica,
--pipeline-splits, --pipeline-stage-ipus, --pipeline-schedule, --pipeline-auto, --recompute):
the placements refused before anything runs, each with its message and exit code, and short
runs of the real ResNet-50 (mini scale) whose pipelined training gives the bits of the
unpipelined run of the same global batch, with a log the official checker accepts.

Environment (tests/harness_cli/CMakeLists.txt): RUN_BENCHMARK = the binary, IPU_SOURCE_DIR.
"""
import json

import pytest

from test_run_benchmark import (OPEN_SHORT, checker, events, files_under, have_checker,
                                result_dir, run, write_config)

# Four steps of global batch 32 (micro-batch 8 x accumulation 4), 100 images evaluated.
SHORT = {**OPEN_SHORT, "gradient_accumulation_steps": 4, "mini_train_samples": 128,
         "mini_eval_samples": 100, "mini_target_accuracy": 0.05}
OPEN = ["--division", "open", "--threads", "1"]

REFUSALS = {
    # name: (extra args, config overrides of SHORT (None: no --config), exit code, substrings)
    "more_stages_than_ipus": (
        ["--ipus-per-replica", "2", "--pipeline-splits", "stage2_unit1,stage3_unit1"], {}, 1,
        ["--pipeline-splits stage2_unit1,stage3_unit1 makes 3 stages for --ipus-per-replica 2",
         "--pipeline-stage-ipus"]),
    "stage_ipu_out_of_range": (
        ["--ipus-per-replica", "2", "--pipeline-splits", "stage3_unit1",
         "--pipeline-stage-ipus", "0,2"], {}, 1,
        ["--pipeline-stage-ipus 0,2", "'2' is not an IPU of the replica (0 to 1"]),
    "ipus_without_splits": (
        ["--ipus-per-replica", "2"], {}, 1,
        ["--ipus-per-replica 2 needs the stages' split points", "--pipeline-auto"]),
    "unknown_schedule": (
        ["--ipus-per-replica", "2", "--pipeline-splits", "stage3_unit1",
         "--pipeline-schedule", "zigzag"], {}, 1,
        ["--pipeline-schedule zigzag", "grouped, interleaved, sequential"]),
    "recompute_without_splits": (
        ["--benchmark", "efficientnet_b4", "--recompute"], None, 1,
        ["--recompute puts its checkpoints at the stage boundaries",
         "only resnet50 has published checkpoints"]),
    "accumulation_the_schedule_refuses": (
        ["--ipus-per-replica", "2", "--pipeline-splits", "stage3_unit1"],
        {"gradient_accumulation_steps": 6}, 1,
        ["grouped schedule over 2 stages", "multiple of L = 4", "smallest valid G is 4",
         "gradient_accumulation_steps is 6"]),
    "interleaved_two_stages_on_one_ipu": (
        ["--ipus-per-replica", "2", "--pipeline-splits", "stage2_unit1,stage3_unit1",
         "--pipeline-stage-ipus", "0,1,0", "--pipeline-schedule", "interleaved"], {}, 1,
        ["interleaved schedule cannot put two stages on one IPU"]),
    "split_names_no_op": (
        ["--ipus-per-replica", "2", "--pipeline-splits", "stage9_unit1"], {}, 1,
        ["pipeline placement was refused", "stage9_unit1"]),
    "stage_does_not_fit": (
        ["--ipus-per-replica", "2", "--pipeline-splits", "stage3_unit1"],
        {"micro_batch_size": 64, "model_bn_span": 64}, 3,
        ["does not fit in IPU tile memory", "pipeline hint: IPU"]),
}


@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_pipeline_refusal_writes_nothing(name, tmp_path):
    extra, overrides, code, needles = REFUSALS[name]
    results = tmp_path / "results"
    results.mkdir()
    args = [*OPEN, "--results-dir", str(results), *extra]
    if overrides is not None:  # None: the preset's settings (another benchmark's)
        args += ["--config", write_config(tmp_path / "c.json", {**SHORT, **overrides})]
    r = run(args, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == code, out
    for needle in needles:
        assert needle in out, f"{needle!r} not in:\n{out}"
    assert files_under(results) == [], f"refusal wrote {files_under(results)}"


def short_run(tmp_path, name, extra, overrides=None, pod_size=1):
    results = tmp_path / name
    config = write_config(tmp_path / f"{name}.json", {**SHORT, **(overrides or {})})
    r = run([*OPEN, "--pod-size", str(pod_size), "--results-dir", str(results), "--max-epochs",
             "1", "--config", config, "--report", str(tmp_path / f"{name}_reports"), *extra],
            timeout=600)
    assert r.returncode in (0, 2), r.stdout + r.stderr
    system = f"ipu-pod{pod_size}-emulated"
    return r, result_dir(results, system) / "result_0.txt"


def loss_curve(tmp_path, name):
    """The run page's loss after every step (--report)."""
    text = (tmp_path / f"{name}_reports" / "resnet50_mini_pod1_run0.html").read_text()
    data = json.loads(text.split("const REPORT = ", 1)[1].split(";\nwindow.onerror", 1)[0])
    return [p["loss"] for p in data["views"][0]["run"]["loss"]]


def values(log, key):
    return [e["value"] for e in events(log) if e["key"] == key]


def test_pipeline_two_ipus_and_recomputation_give_the_unpipelined_bits_and_pass_the_checker(
        tmp_path):
    _, plain = short_run(tmp_path, "plain", [])
    r, piped = short_run(tmp_path, "piped",
                         ["--ipus-per-replica", "2", "--pipeline-splits", "stage3_unit1"])
    # The placement the run uses is printed, and logged under ipu_pipeline_*.
    assert "pipeline placement (grouped schedule, splits stage3_unit1)" in r.stderr, r.stderr
    assert values(piped, "ipu_pipeline_ipus_per_replica") == [2]
    assert values(piped, "ipu_pipeline_schedule") == ["grouped"]
    assert values(piped, "ipu_pipeline_splits") == ["stage3_unit1"]
    peaks = [e for e in events(piped) if e["key"] == "ipu_pipeline_ipu_peak_tile_bytes"]
    assert [e["metadata"]["ipu"] for e in peaks] == [0, 1]
    assert all(e["value"] > 0 for e in peaks)
    assert values(plain, "ipu_pipeline_ipus_per_replica") == []
    # One report page per IPU of the pipeline, each with its own memory verdict.
    for ipu in (0, 1):
        view = tmp_path / "piped_reports" / f"resnet50_mini_pod1_training_ipu{ipu}.json"
        assert json.loads(view.read_text())["memory"]["fits"], view
    # The loss after every step: the same curve, bit for bit (4 steps of global batch 32).
    curve = loss_curve(tmp_path, "piped")
    assert len(curve) == 4 and curve == loss_curve(tmp_path, "plain")
    # Same global batch, same samples: the same accuracy and the same final weights, bit for bit.
    assert values(piped, "eval_accuracy") == values(plain, "eval_accuracy")
    crc = values(piped, "ipu_weights_crc32")
    assert crc and crc == values(plain, "ipu_weights_crc32")
    if have_checker():
        code, text, verdict = checker(piped, "4.0.0")
        assert code == 0 and "SUCCESS" in verdict, text
    # Recomputation on one IPU from Graphcore's six checkpoints (--recompute without splits):
    # the same bits again.
    r, recomputed = short_run(tmp_path, "recomputed", ["--recompute"])
    assert "recomputation checkpoints at the stage boundaries of splits stage1_unit1_relu3," \
        in r.stderr, r.stderr
    assert values(recomputed, "ipu_pipeline_recompute") == [True]
    assert values(recomputed, "ipu_weights_crc32") == crc
    assert loss_curve(tmp_path, "recomputed") == curve


def test_pipeline_replicas_over_two_mpi_processes_give_the_log_of_one(tmp_path):
    """R x S: the 4 replicas of POD4, each a 2-IPU pipeline, in threads of one process and as
    2 per process under `mpirun -np 2` write the same log (times aside), final weights included;
    and the weights of the unpipelined 4 replicas of the same global batch."""
    import subprocess
    from test_mpi import MPIRUN, env, log_of, mpirun, without_times
    if MPIRUN is None:
        pytest.skip("Open MPI missing: run scripts/setup.sh")
    from test_run_benchmark import BINARY
    cfg = write_config(tmp_path / "c.json", {**SHORT, "mini_train_samples": 256})  # 2 steps
    pipe = ["--ipus-per-replica", "2", "--pipeline-splits", "stage3_unit1"]
    common = [*OPEN, "--pod-size", "4", "--max-epochs", "1", "--config", cfg]
    one = subprocess.run([BINARY, *common, *pipe, "--results-dir", str(tmp_path / "one")],
                         capture_output=True, text=True, timeout=600, env=env())
    two = subprocess.run([*mpirun(2), BINARY, *common, *pipe, "--results-dir",
                          str(tmp_path / "two")],
                         capture_output=True, text=True, timeout=600, env=env())
    plain = subprocess.run([BINARY, *common, "--results-dir", str(tmp_path / "plain")],
                           capture_output=True, text=True, timeout=600, env=env())
    for r in (one, two, plain):
        assert r.returncode in (0, 2), r.stdout + r.stderr
    la = without_times(log_of(tmp_path / "one"))
    assert la == without_times(log_of(tmp_path / "two"))
    crc = [l for l in la if '"key": "ipu_weights_crc32"' in l]
    assert crc and crc == [l for l in without_times(log_of(tmp_path / "plain"))
                           if '"key": "ipu_weights_crc32"' in l]
