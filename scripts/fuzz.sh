#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz, clang, ASan+UBSan) and runs each for a bounded time.
#
#   bash scripts/fuzz.sh                    # every target, FUZZ_SECONDS (30) each
#   FUZZ_SECONDS=1800 bash scripts/fuzz.sh  # the nightly's long runs
#   bash scripts/fuzz.sh idx config         # only these targets
#
# Each target starts from its committed seeds (tests/fuzz/corpus/<name>) and crash inputs
# (tests/fuzz/regressions/<name>); what it learns goes to a working corpus in the build folder,
# kept between runs. A crash, a sanitizer report, a leak, a timeout (FUZZ_TIMEOUT s per input) or
# running out of memory (FUZZ_RSS_MB) stops that target and fails the script; the input is saved
# under FUZZ_OUT/<name>/ (copy it to tests/fuzz/regressions/<name>/ once the reader is fixed, and
# ctest replays it for good). Prints executions and crashes per target.
#
# Environment: FUZZ_BUILD_DIR (build-fuzz), FUZZ_OUT (FUZZ_BUILD_DIR/fuzz-out), FUZZ_SECONDS (30),
# FUZZ_TIMEOUT (10), FUZZ_RSS_MB (2048), FUZZ_SKIP_BUILD=1 (use the build folder as is),
# FUZZ_CXX (clang++-16), JOBS (nproc).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD="${FUZZ_BUILD_DIR:-build-fuzz}"
OUT="${FUZZ_OUT:-$BUILD/fuzz-out}"
SECONDS_EACH="${FUZZ_SECONDS:-30}"
TARGETS=("$@")

if [ "${FUZZ_SKIP_BUILD:-0}" != "1" ]; then
  CXX_BIN="${FUZZ_CXX:-clang++-16}"
  if ! command -v "$CXX_BIN" > /dev/null; then
    echo "fuzz: $CXX_BIN not found; install clang-16 and libclang-rt-16-dev (scripts/setup.sh)" >&2
    exit 3
  fi
  launcher=()
  command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  # Paths under the checkout's parent hash as relative ones: clones elsewhere share the cache.
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(dirname "$ROOT")}"
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$CXX_BIN" \
    -DIPU_FUZZ=ON -DIPU_BUILD_BENCHMARKS=OFF "${launcher[@]}" > /dev/null
  build_targets=(fuzz_targets)
  [ ${#TARGETS[@]} -gt 0 ] && build_targets=("${TARGETS[@]/#/fuzz_}")  # only those asked for
  cmake --build "$BUILD" -j "${JOBS:-$(nproc)}" --target "${build_targets[@]}"
fi

# Every libFuzzer binary the build made (the BERT ones exist when datasets/bert does).
ALL_TARGETS=()
for exe in "$BUILD"/tests/fuzz/fuzz_*; do
  name="$(basename "$exe")"
  case "$name" in fuzz_replay_* | fuzz_findings_test | *.*) continue ;; esac
  [ -x "$exe" ] && [ -f "$exe" ] && ALL_TARGETS+=("${name#fuzz_}")
done
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=("${ALL_TARGETS[@]}")
mkdir -p "$OUT"
summary=()
failed=0
for t in "${TARGETS[@]}"; do
  exe="$BUILD/tests/fuzz/fuzz_$t"
  if [ ! -x "$exe" ]; then
    echo "fuzz: $exe missing (targets: ${ALL_TARGETS[*]})" >&2
    exit 2
  fi
  work="$BUILD/fuzz-corpus/$t"
  mkdir -p "$work" "$OUT/$t"
  seeds=("tests/fuzz/corpus/$t")
  [ -d "tests/fuzz/regressions/$t" ] && seeds+=("tests/fuzz/regressions/$t")
  [ "$t" = image_decode ] && seeds+=(tests/fixtures/datasets)
  log="$OUT/$t.log"
  echo "fuzz: $t for ${SECONDS_EACH} s (log $log)"
  stamp="$OUT/.$t.start"
  touch "$stamp"
  rc=0
  # -close_fd_mask=1: the readers' warnings on stdout would drown the fuzzer's own lines.
  "$exe" -max_total_time="$SECONDS_EACH" -timeout="${FUZZ_TIMEOUT:-10}" \
    -rss_limit_mb="${FUZZ_RSS_MB:-2048}" -print_final_stats=1 -close_fd_mask=1 \
    -artifact_prefix="$OUT/$t/" "$work" "${seeds[@]}" > "$log" 2>&1 || rc=$?
  execs=$(awk '/stat::number_of_executed_units/ {print $2}' "$log" | tail -1)
  crashes=$(find "$OUT/$t" -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' \
            -o -name 'oom-*' \) -newer "$stamp" | wc -l)
  if [ $rc -ne 0 ]; then
    failed=1
    echo "fuzz: $t FAILED (exit $rc); input(s) in $OUT/$t/; the report:"
    grep -E "ERROR:|runtime error|SUMMARY|property violated|terminate called|what\(\)" "$log" \
      | head -20 | sed 's/^/    /'
  fi
  summary+=("$(printf '%-14s %8s %12s %6s %s' "$t" "$SECONDS_EACH" "${execs:-?}" "$crashes" \
               "$([ $rc -eq 0 ] && echo ok || echo "FAILED (exit $rc)")")")
done
printf '\n%-14s %8s %12s %6s %s\n' target seconds executions crashes status
printf '%s\n' "${summary[@]}"
exit $failed
