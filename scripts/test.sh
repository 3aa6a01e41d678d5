#!/usr/bin/env bash
# Installs the dependencies, builds Release (warnings as errors) and runs every test with ctest.
# Usage: bash scripts/test.sh            (BUILD_DIR=build by default)
#        IPU_SANITIZE=address,undefined bash scripts/test.sh   (a sanitizer build in build-asan)
#        IPU_SANITIZE=thread bash scripts/test.sh              (build-tsan)
# Environment: IPU_MARCH (the -march= of the build, native by default; x86-64-v3 builds the AVX2
# code paths an AVX2-only host runs), BUILD_TARGETS (build only these, e.g. unit_tests: the test
# executables), CTEST_ARGS (e.g. "-L ." for the labelled tests only), IPU_TEST_STEPS ("build
# test": either alone skips the other), JOBS, CTEST_JOBS. ccache is used when it is installed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
STEPS="${IPU_TEST_STEPS:-build test}"
SAN="${IPU_SANITIZE:-}"
case "$SAN" in
  "") default_dir=build ;;
  address,undefined) default_dir=build-asan ;;
  thread) default_dir=build-tsan ;;
  *) default_dir="build-san-${SAN//,/-}" ;;
esac
BUILD_DIR="${BUILD_DIR:-$default_dir}"
JOBS="${JOBS:-$(nproc)}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
if [[ " $STEPS " == *" build "* ]]; then
  bash scripts/setup.sh
  launcher=()
  command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  # Paths under the checkout's parent hash as relative ones: clones elsewhere share the cache.
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(dirname "$ROOT")}"
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DIPU_SANITIZE="$SAN" \
    -DIPU_MARCH="${IPU_MARCH:-native}" \
    ${SAN:+-DIPU_BUILD_BENCHMARKS=OFF} "${launcher[@]}"
  # BUILD_TARGETS: build only these targets (e.g. the suites a sanitizer build runs).
  cmake --build "$BUILD_DIR" -j "$JOBS" ${BUILD_TARGETS:+--target $BUILD_TARGETS}
fi
if [[ " $STEPS " == *" test "* ]]; then
  ctest --test-dir "$BUILD_DIR" --output-on-failure -j "${CTEST_JOBS:-1}" ${CTEST_ARGS:-}
fi
