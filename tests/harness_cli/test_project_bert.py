"""run_benchmark --project-only --benchmark bert_large: BERT-Large's full-scale projection on
Graphcore's published POD16 pipeline (4 replicas x 4 IPUs, the att_ffn placement, micro-batch 2
packs x accumulation 192). It compiles every IPU's program of the full model and prices the
pipelined step: minutes and ~5 GB, so it runs nightly (ProjectionNightly.bert_large).

The samples to converge come from MLPerf's reference convergence point for global batch 3,072
(2,764,499 sequences, ../shared/docs/BERT_FACTS.md section 1), rounded up to the rules'
evaluation interval (175,000): 16 evaluations, 2,800,000 sequences, 912 steps.

Environment (tests/harness_cli/CMakeLists.txt): RUN_BENCHMARK = the binary.
"""
import json
import math
import os
import re
import subprocess

BINARY = os.environ.get("RUN_BENCHMARK", "")


def test_bert_large_pod16_projection(tmp_path):
    assert BINARY, "RUN_BENCHMARK is not set"
    r = subprocess.run([BINARY, "--project-only", "--benchmark", "bert_large", "--pod-size", "16",
                        "--json"], capture_output=True, text=True, timeout=1700, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    p = json.loads(r.stdout)
    text = r.stderr
    c = p["configuration"]
    assert (c["replicas"], c["ipus_per_replica"], c["micro_batch"],
            c["gradient_accumulation"], c["global_batch"]) == (4, 4, 2, 192, 3072)
    assert c["published"] is True
    # The samples: the reference convergence point, whole evaluation intervals.
    s = p["samples"]
    assert s["rcp_samples"] == 2764499
    assert s["eval_interval"] == 175000
    assert s["evaluations"] == 16 and s["trained_samples"] == 2800000
    ttt = p["time_to_train"]
    assert ttt["steps"] == 912
    # Graphcore's pipeline: 5 stages on 4 IPUs, IPU0 twice; the optimizer state off-chip.
    pl = p["pipeline"]
    assert pl["stages"] == 5 and len(pl["ipus"]) == 4
    assert pl["optimizer_state_off_chip"] is True
    assert all(i["off_chip_state_bytes"] > 0 for i in pl["ipus"])
    assert p["fit"]["fits"] == all(i["fits"] for i in pl["ipus"])
    # The step: (G + 2N - 2) cycles of the slowest IPU's cycle, then the update.
    step = pl["step"]
    assert step["cycles"] == 192 + 2 * 5 - 2
    assert math.isclose(step["seconds"], step["cycles"] * step["cycle_seconds"]
                        + step["update_seconds"], rel_tol=1e-9)
    assert math.isclose(ttt["step_seconds"], step["seconds"], rel_tol=1e-12)
    assert math.isclose(ttt["total_seconds"], ttt["steps"] * ttt["step_seconds"]
                        + ttt["eval_seconds"], rel_tol=1e-9)
    assert math.isclose(ttt["eval_seconds"], 16 * pl["evaluation_seconds"], rel_tol=1e-9)
    assert math.isclose(ttt["images_per_second"], 3072 / ttt["step_seconds"], rel_tol=1e-9)
    parts = p["step_breakdown_seconds"]
    assert math.isclose(sum(parts.values()), p["step_seconds"], rel_tol=1e-9)
    # Beside the published result and Graphcore's logged throughput (comparisons, not inputs);
    # nothing is fitted to them, so only a broad band is checked.
    assert p["published_minutes"] == 32.70
    assert p["logged_samples_per_second"] == 1524
    assert 0.2 < p["modeled_over_published"] < 5.0
    assert f'modeled time-to-train {p["modeled_minutes"]:.2f} min = 912 steps' in text, text
    assert re.search(r"32\.70 min \(ratio [0-9.]+\)", text), text
    assert "steady-state throughput in those logs: 1524 sequences/s" in text
