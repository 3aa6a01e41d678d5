"""run_benchmark --project-only: the full-scale projection without runs, for every ResNet-50 pod
size, checked against the published MLPerf Training v1.1 configurations.

The published values are a committed fixture (tests/fixtures/mlperf_v1.1), itself checked against
Graphcore's raw logs when ../shared (or IPU_SHARED_DIR) holds them. POD1 and POD4 were never
published: their presets keep POD16's global batch (3,200) and schedule.

Environment (tests/harness_cli/CMakeLists.txt): RUN_BENCHMARK = the binary.
"""
import json
import math
import os
import pathlib
import re
import subprocess

import pytest

BINARY = os.environ.get("RUN_BENCHMARK", "")
SOURCE_DIR = pathlib.Path(os.environ.get("IPU_SOURCE_DIR", pathlib.Path(__file__).parents[2]))
FIXTURE = SOURCE_DIR / "tests" / "fixtures" / "mlperf_v1.1" / "graphcore_resnet_closed.json"
SHARED = pathlib.Path(os.environ.get("IPU_SHARED_DIR", SOURCE_DIR.parent / "shared"))
GRAPHCORE = SHARED / "data" / "mlperf_training_v1.1" / "Graphcore"
IMAGENET_TRAIN = 1281167
POD_SIZES = [1, 4, 16, 64, 128, 256]
REFUSED = 1  # run_benchmark's "refused before running" exit code


def run(args, cwd, timeout=900):
    assert BINARY, "RUN_BENCHMARK is not set"
    return subprocess.run([BINARY, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=cwd)


def published():
    return json.loads(FIXTURE.read_text())["systems"]


def expected_configuration(pod):
    """Replicas, micro-batch, accumulation, global batch, epochs of the published run (POD16's
    for the unpublished POD1 and POD4, at the same global batch)."""
    pub = published()
    if str(pod) in pub:
        s = pub[str(pod)]
        replicas = s["accelerators"]
        accumulation = s["gradient_accumulation_steps"]
        gb = s["global_batch_size"]
        return dict(replicas=replicas, micro_batch=gb // (replicas * accumulation),
                    gradient_accumulation=accumulation, global_batch=gb,
                    epochs=s["lars_opt_learning_rate_decay_steps"], published=True)
    base = pub["16"]
    gb = base["global_batch_size"]
    micro = gb // (base["accelerators"] * base["gradient_accumulation_steps"])
    return dict(replicas=pod, micro_batch=micro, gradient_accumulation=gb // (pod * micro),
                global_batch=gb, epochs=base["lars_opt_learning_rate_decay_steps"],
                published=False)


@pytest.fixture(scope="module")
def all_pods(tmp_path_factory):
    """One process projects all six pod sizes: JSON on stdout, the text on stderr; with
    --report, each program's report page and view go to a folder of their own."""
    cwd = tmp_path_factory.mktemp("project_all")
    reports = tmp_path_factory.mktemp("project_reports")
    r = run(["--project-only", "--all-pod-sizes", "--json", "--threads", "2",
             "--report", str(reports)], cwd)
    assert r.returncode == 0, r.stderr
    ALL_POD_REPORTS.append(reports)
    return cwd, json.loads(r.stdout), r.stderr


ALL_POD_REPORTS = []  # the --report folder of all_pods
CHROMIUM = next((c for c in ("/usr/bin/chromium", "/usr/bin/chromium-browser")
                 if os.path.exists(c)), None)


def test_project_only_report_pages_show_the_verdict_of_each_program(all_pods):
    """--report: a page and a view per pod size and program; the view's fullest tile is the
    verdict's (the compiler's own numbers), and the page renders in Chromium without errors."""
    _, projections, text = all_pods
    reports = ALL_POD_REPORTS[0]
    for p in projections:
        pod = p["pod_size"]
        fit = p["fit"]
        for program in ("training", "evaluation"):
            stem = reports / f"resnet50_full_pod{pod}_{program}"
            assert f"report: {stem}.html" in text
            view = json.loads(stem.with_suffix(".json").read_text())
            fits = fit[f"{program}_program_fits"]
            assert view["memory"]["fits"] == fits, (pod, program)
            if not fits and fit["program"] == program:
                assert view["memory"]["max_tile"] == fit["worst_tile"]
                assert view["memory"]["max_tile_bytes"] == fit["worst_tile_bytes"]
                assert "does not fit" in view["title"]
    if CHROMIUM is None:
        pytest.skip("SKIPPED LOUDLY: no chromium (scripts/setup.sh installs it): the page is "
                    "not rendered")
    page = reports / "resnet50_full_pod16_training.html"
    dom = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                          "--disable-dev-shm-usage", "--virtual-time-budget=8000", "--dump-dom",
                          page.as_uri()], capture_output=True, text=True, timeout=120).stdout
    assert 'data-rendered="1"' in dom and '<div id="errors"></div>' in dom
    view = json.loads(page.with_suffix(".json").read_text())
    assert f'id="v0-max-tile-bytes" data-value="{view["memory"]["max_tile_bytes"]}"' in dom


def test_fixture_matches_the_raw_graphcore_logs():
    if not GRAPHCORE.is_dir():
        pytest.skip(f"published MLPerf v1.1 packages not present at {GRAPHCORE}")
    for pod, s in published().items():
        sysjson = json.loads((GRAPHCORE / "systems" / f'{s["system"]}.json').read_text())
        assert int(sysjson["number_of_nodes"]) * int(sysjson["accelerators_per_node"]) == \
            s["accelerators"] == int(pod)
        for i in range(5):
            logged = {}
            log = GRAPHCORE / "results" / s["system"] / "resnet" / f"result_{i}.txt"
            for line in log.read_text().splitlines():
                if ":::MLLOG " in line:
                    e = json.loads(line.split(":::MLLOG ", 1)[1])
                    logged.setdefault(e["key"], e["value"])
            for key in ("global_batch_size", "gradient_accumulation_steps",
                        "lars_opt_learning_rate_decay_steps"):
                assert logged[key] == s[key], (log, key)


def test_project_only_prints_the_published_configuration_of_every_pod_size(all_pods):
    cwd, projections, text = all_pods
    assert [p["pod_size"] for p in projections] == POD_SIZES
    assert list(pathlib.Path(cwd).iterdir()) == []  # no results package, nothing written
    for p in projections:
        pod = p["pod_size"]
        want = expected_configuration(pod)
        c = p["configuration"]
        got = {k: c[k] for k in want}
        assert got == want, (pod, got, want)
        assert c["ipus_per_replica"] == 1 and c["precision"] == "FP16.16"
        assert c["global_batch"] == c["replicas"] * c["micro_batch"] * c["gradient_accumulation"]
        # The printed line says the same.
        line = (f'full-scale projection for IPU-POD{pod} (cost model, not a measurement): '
                f'ResNet-50 v1.5 at 224x224 on ImageNet, the '
                f'{"published" if want["published"] else "unpublished (see below)"} '
                f'configuration {want["replicas"]} replicas x micro-batch {want["micro_batch"]} '
                f'x accumulation {want["gradient_accumulation"]} = global batch '
                f'{want["global_batch"]}, {want["epochs"]} epochs, FP16.16')
        assert line in text, (pod, text)


def test_project_only_verdict_breakdown_and_time_to_train(all_pods):
    _, projections, text = all_pods
    blocks = text.split("full-scale projection for ")[1:]
    assert len(blocks) == len(POD_SIZES)
    pub = published()
    for p, block in zip(projections, blocks):
        pod = p["pod_size"]
        fit = p["fit"]
        # The verdict is the compiler's: not fitting is said and priced "as if", never hidden.
        assert fit["fits"] == (fit["training_program_fits"] and fit["evaluation_program_fits"])
        if fit["fits"]:
            assert "fits one IPU-Mk2" in block and not fit["priced_as_if_fitting"]
        else:
            assert fit["priced_as_if_fitting"]
            assert fit["worst_tile_bytes"] > fit["tile_capacity_bytes"] > 0
            assert "DOES NOT FIT one IPU-Mk2" in block and "AS IF THEY FIT" in block
            assert f'needs {fit["worst_tile_bytes"]} B of {fit["tile_capacity_bytes"]} B' in block
        # The training program recomputes from Graphcore's six checkpoints (a block's output
        # ReLU after [b1/0,b1/2,b2/0,b2/2,b3/0,b3/3]), about two thirds of the forward pass.
        assert fit["recomputation_checkpoints"] == [
            "stage1_unit1_relu3", "stage1_unit3_relu3", "stage2_unit1_relu3",
            "stage2_unit3_relu3", "stage3_unit1_relu3", "stage3_unit4_relu3"]
        assert 0.5 < fit["recomputed_forward_fraction"] < 0.8
        assert "recomputation: checkpoints stage1_unit1_relu3" in block
        for program in ("training", "evaluation"):
            mem = fit[f"{program}_memory"]
            assert mem["fits"] == fit[f"{program}_program_fits"]
            assert mem["tile_capacity_bytes"] == 638976
            assert 0 < mem["code_and_vertex_state_bytes"] < mem["always_live_bytes"]
            assert mem["worst_tile_bytes"] == (mem["always_live_bytes"]
                                               + mem["peak_not_always_live_bytes"])
            assert f'{program} program: worst tile {mem["worst_tile"]} ' \
                   f'{mem["worst_tile_bytes"]} B of 638976 B' in block
        if not fit["training_program_fits"]:
            assert fit["training_memory"]["worst_tile_bytes"] == fit["worst_tile_bytes"]
        # The breakdown adds up to the step; single-IPU replicas have no pipeline ramp.
        parts = p["step_breakdown_seconds"]
        assert set(parts) == {"compute", "exchange", "sync", "bn_statistics", "host_io",
                              "weight_update", "collectives", "pipeline_ramp"}
        assert all(v >= 0 for v in parts.values())
        assert math.isclose(sum(parts.values()), p["step_seconds"], rel_tol=1e-9)
        assert parts["pipeline_ramp"] == 0
        assert (parts["collectives"] > 0) == (pod > 1)
        # model_bn_span 40 = 2 replicas x micro-batch 20 (POD1's preset: 20, its one replica).
        assert (parts["bn_statistics"] > 0) == (pod > 1)
        assert parts["compute"] > 0 and parts["exchange"] > 0 and parts["sync"] > 0
        ttt = p["time_to_train"]
        c = p["configuration"]
        assert ttt["steps"] == -(-c["epochs"] * IMAGENET_TRAIN // c["global_batch"])
        assert math.isclose(p["modeled_minutes"] * 60, ttt["total_seconds"], rel_tol=1e-12)
        assert re.search(rf'modeled time-to-train {p["modeled_minutes"]:.2f} min = '
                         rf'{ttt["steps"]} steps', block), block
        if str(pod) in pub:
            assert p["published_minutes"] == pytest.approx(pub[str(pod)]["score_minutes"],
                                                           abs=0.006)
            assert p["modeled_over_published"] == pytest.approx(
                p["modeled_minutes"] / p["published_minutes"])
            # Nothing is fitted to the published times: only a broad band is checked.
            assert 0.33 < p["modeled_over_published"] < 3.0
            # Graphcore's logged steady-state throughput is set beside the modeled one.
            assert p["logged_samples_per_second"] > 0
            assert p["modeled_over_logged_throughput"] == pytest.approx(
                ttt["images_per_second"] / p["logged_samples_per_second"])
            assert "steady-state throughput in those logs" in block
        else:
            assert p["published_minutes"] is None and "none for this pod size" in block
            assert p["logged_samples_per_second"] is None
    # Larger pods train faster under this model.
    minutes = [p["modeled_minutes"] for p in projections]
    assert minutes == sorted(minutes, reverse=True)


def test_project_only_single_pod_text_matches_all_pods(all_pods, tmp_path):
    _, projections, _ = all_pods
    r = run(["--project-only", "--pod-size", "64", "--threads", "2"], tmp_path)
    assert r.returncode == 0, r.stderr
    p64 = next(p for p in projections if p["pod_size"] == 64)
    assert "full-scale projection for IPU-POD64" in r.stdout
    assert f'modeled time-to-train {p64["modeled_minutes"]:.2f} min' in r.stdout, r.stdout
    assert f'modeled step {p64["step_seconds"] * 1e3:.2f} ms' in r.stdout, r.stdout


@pytest.mark.parametrize("benchmark", ["efficientnet_b4"])
def test_project_only_refusal_without_a_full_scale_model(benchmark, tmp_path):
    r = run(["--project-only", "--benchmark", benchmark, "--pod-size", "16", "--json"], tmp_path)
    assert r.returncode == REFUSED, r.stderr
    assert r.stdout == ""
    assert f"no full-scale projection for {benchmark}: it has no full-scale model yet" in r.stderr


@pytest.mark.parametrize("args,message", [
    (["--project-only", "--config", "x.json"], "--config does not apply to --project-only"),
    (["--project-only", "--runs", "2"], "--runs does not apply to --project-only"),
    (["--project-only", "--division", "open"], "--division does not apply to --project-only"),
    (["--project-only", "--scale", "mini"], "--project-only projects the full scale"),
    (["--json"], "apply to --project-only (add it)"),
    (["--project-only", "--all-pod-sizes", "--pod-size", "16"], "drop --pod-size"),
])
def test_project_only_refusal_of_options_it_would_ignore(args, message, tmp_path):
    r = run(args, tmp_path)
    assert r.returncode == REFUSED, r.stderr
    assert message in r.stderr, r.stderr
    assert list(tmp_path.iterdir()) == []


def test_help_documents_the_projection_flags(tmp_path):
    r = run(["--help"], tmp_path)
    assert r.returncode == 0
    for flag in ["--project-only", "--all-pod-sizes", "--json", "--project-full-scale"]:
        assert flag in r.stdout, flag
