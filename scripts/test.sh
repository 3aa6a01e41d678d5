#!/usr/bin/env bash
# Installs the dependencies, builds Release (warnings as errors) and runs every test with ctest.
# Usage: bash scripts/test.sh            (BUILD_DIR=build by default)
#        IPU_SANITIZE=address,undefined bash scripts/test.sh   (a sanitizer build in build-asan)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/setup.sh
SAN="${IPU_SANITIZE:-}"
BUILD_DIR="${BUILD_DIR:-build${SAN:+-san}}"
JOBS="${JOBS:-$(nproc)}"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DIPU_SANITIZE="$SAN" \
  ${SAN:+-DIPU_BUILD_BENCHMARKS=OFF}
# BUILD_TARGETS: build only these targets (e.g. the suites a sanitizer build runs).
cmake --build "$BUILD_DIR" -j "$JOBS" ${BUILD_TARGETS:+--target $BUILD_TARGETS}
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "${CTEST_JOBS:-1}" ${CTEST_ARGS:-}
