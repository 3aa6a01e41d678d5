#!/usr/bin/env bash
# Nightly performance-regression job.
#
#   scripts/nightly.sh            # build Release, run every *_bench suite, mini TTA runs,
#                                 # compare against benchmarks/baseline/
#
# Steps:
#   1. bash scripts/setup.sh && cmake -S . -B build-nightly -G Ninja -DCMAKE_BUILD_TYPE=Release
#      && cmake --build build-nightly -j2
#   2. every executable named *_bench under build-nightly/benchmarks/ is run with
#      --benchmark_repetitions=N and writes OUT/<name>.json (Google Benchmark JSON)
#   3. the mini time-to-accuracy runs (build-nightly/harness/run_benchmark --scale mini ...),
#      when the harness binary exists, summarised into OUT/tta.json
#   4. scripts/bench_regression.py benchmarks/baseline OUT  -> OUT/comparison.{json,md}
#
# Exit status: 0 pass (or no baseline yet), 1 performance/convergence regression,
# 3 build failed, 4 a benchmark suite or TTA run crashed (and no regression).
# The baseline is never updated here; see scripts/update_baseline.py.
#
# Environment (all optional):
#   NIGHTLY_BUILD_DIR    build folder (build-nightly)
#   NIGHTLY_SKIP_BUILD   1: use the existing build folder as is
#   NIGHTLY_OUT          output folder (out/nightly/<UTC timestamp>)
#   NIGHTLY_BASELINE     baseline folder (benchmarks/baseline)
#   NIGHTLY_REPETITIONS  Google Benchmark repetitions (10)
#   NIGHTLY_BENCH_ARGS   extra arguments for every *_bench (e.g. --benchmark_min_time=0.2)
#   NIGHTLY_BENCH_TIMEOUT seconds per suite (3600)
#   NIGHTLY_ALPHA / NIGHTLY_THRESHOLD   Mann-Whitney significance (0.05) / median slowdown (0.05)
#   NIGHTLY_COMPARE_ARGS extra arguments for bench_regression.py
#   NIGHTLY_HARNESS      harness binary (BUILD/harness/run_benchmark)
#   NIGHTLY_TTA_BENCHMARKS  mini time-to-accuracy runs to do ("resnet50")
#   NIGHTLY_TTA_TIMEOUT  seconds per TTA run (7200)
#   NIGHTLY_GIT_REV      revision recorded in run_manifest.json (GITHUB_SHA or git rev-parse)
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY=/usr/bin/python3
BUILD="${NIGHTLY_BUILD_DIR:-build-nightly}"
OUT="${NIGHTLY_OUT:-out/nightly/$(date -u +%Y%m%dT%H%M%SZ)}"
BASELINE="${NIGHTLY_BASELINE:-benchmarks/baseline}"
REPS="${NIGHTLY_REPETITIONS:-10}"
BENCH_TIMEOUT="${NIGHTLY_BENCH_TIMEOUT:-3600}"
HARNESS="${NIGHTLY_HARNESS:-$BUILD/harness/run_benchmark}"
TTA_BENCHMARKS="${NIGHTLY_TTA_BENCHMARKS:-resnet50}"
TTA_TIMEOUT="${NIGHTLY_TTA_TIMEOUT:-7200}"
read -r -a BENCH_ARGS <<< "${NIGHTLY_BENCH_ARGS:-}"
read -r -a COMPARE_ARGS <<< "${NIGHTLY_COMPARE_ARGS:-}"

log() { echo "nightly: $*"; }
mkdir -p "$OUT"
log "output folder $OUT"

# 1. Build ------------------------------------------------------------------------------
if [ "${NIGHTLY_SKIP_BUILD:-0}" != "1" ]; then
  log "building Release in $BUILD"
  if ! { bash scripts/setup.sh && cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
         && cmake --build "$BUILD" -j2; } 2>&1 | tee "$OUT/build.log"; then
    log "BUILD FAILED (see $OUT/build.log)"
    exit 3
  fi
else
  log "NIGHTLY_SKIP_BUILD=1: using $BUILD as is"
fi

# 2. Google Benchmark suites --------------------------------------------------------------
crashed=()
suites=()
if [ -d "$BUILD/benchmarks" ]; then
  while IFS= read -r exe; do suites+=("$exe"); done \
    < <(find "$BUILD/benchmarks" -type f -name '*_bench' -perm -u+x | sort)
fi
if [ ${#suites[@]} -eq 0 ]; then
  log "no *_bench executables under $BUILD/benchmarks; no benchmark figures this run"
fi
for exe in "${suites[@]}"; do
  name="$(basename "$exe")"
  log "running $name ($REPS repetitions)"
  start=$(date +%s)
  timeout "$BENCH_TIMEOUT" "$exe" --benchmark_repetitions="$REPS" \
      --benchmark_out="$OUT/$name.json" --benchmark_out_format=json \
      "${BENCH_ARGS[@]}" > "$OUT/$name.log" 2>&1
  rc=$?
  log "$name finished in $(( $(date +%s) - start )) s, exit $rc"
  if [ $rc -ne 0 ]; then
    crashed+=("$name (exit $rc)")
    tail -n 20 "$OUT/$name.log" | sed 's/^/    /'
    # A partial JSON file would be misread as a complete run: keep it aside.
    [ -f "$OUT/$name.json" ] && mv "$OUT/$name.json" "$OUT/$name.json.partial"
  fi
done

# 3. Mini time-to-accuracy runs -----------------------------------------------------------
if [ -x "$HARNESS" ]; then
  tta_dirs=()
  for b in $TTA_BENCHMARKS; do
    dir="$OUT/tta_results/$b"
    mkdir -p "$dir"
    log "time-to-accuracy run: $b (mini, open, pod 1)"
    start=$(date +%s)
    timeout "$TTA_TIMEOUT" "$HARNESS" --benchmark "$b" --scale mini --division open \
        --pod-size 1 --results-dir "$dir" > "$OUT/tta_$b.log" 2>&1
    rc=$?
    log "$b finished in $(( $(date +%s) - start )) s wall, exit $rc"
    [ $rc -ne 0 ] && crashed+=("run_benchmark $b (exit $rc)")
    tta_dirs+=("$dir")
  done
  if [ ${#tta_dirs[@]} -gt 0 ]; then
    "$PY" scripts/record_tta.py "${tta_dirs[@]}" -o "$OUT/tta.json" --label mini \
      || crashed+=("record_tta (no readable result log)")
  fi
else
  log "harness binary $HARNESS does not exist yet; skipping the time-to-accuracy runs"
fi

# 4. Manifest and comparison --------------------------------------------------------------
rev="${NIGHTLY_GIT_REV:-${GITHUB_SHA:-$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)}}"
"$PY" - "$OUT/run_manifest.json" "$rev" "$REPS" "${crashed[@]+"${crashed[@]}"}" <<'EOF'
import json, sys, platform, datetime
out, rev, reps, crashed = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
json.dump({"git_rev": rev, "repetitions": reps, "host": platform.node(),
           "date_utc": datetime.datetime.utcnow().isoformat() + "Z", "crashed": crashed},
          open(out, "w"), indent=1)
EOF

status=0
if compgen -G "$BASELINE/*.json" > /dev/null; then
  log "comparing against $BASELINE"
  "$PY" scripts/bench_regression.py "$BASELINE" "$OUT" \
      --alpha "${NIGHTLY_ALPHA:-0.05}" --threshold "${NIGHTLY_THRESHOLD:-0.05}" \
      --json-out "$OUT/comparison.json" "${COMPARE_ARGS[@]}" > "$OUT/comparison.md"
  status=$?
  cat "$OUT/comparison.md"
  [ -n "${GITHUB_STEP_SUMMARY:-}" ] && cat "$OUT/comparison.md" >> "$GITHUB_STEP_SUMMARY"
  if [ $status -eq 1 ]; then
    log "PERFORMANCE REGRESSION (details above and in $OUT/comparison.json)"
  elif [ $status -ne 0 ]; then
    log "comparison failed to run (exit $status)"
  fi
else
  log "no baseline in $BASELINE yet: nothing to compare. Review this run, then record it with"
  log "  $PY scripts/update_baseline.py $OUT"
  echo '{"status": "no_baseline", "failing": [], "benchmarks": [], "tta": []}' \
    > "$OUT/comparison.json"
fi

if [ ${#crashed[@]} -gt 0 ]; then
  log "crashed: ${crashed[*]}"
  [ $status -eq 0 ] && status=4
fi
log "done, exit $status (results in $OUT)"
exit $status
