#!/usr/bin/env bash
# The embedded default job: installs the dependencies, builds Release, and trains the small CNN
# on Fashion-MNIST (Debian's dataset-fashion-mnist) through the emulated IPU backend.
# Extra arguments go to train_small_cnn (see --help).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$(nproc)" --target train_small_cnn
OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}" ./build/harness/train_small_cnn "$@"
