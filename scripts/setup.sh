#!/usr/bin/env bash
# Installs every system dependency of the project from Debian's packages (idempotent).
# Run as root (or with sudo). Safe to run repeatedly: apt-get skips what is installed.
set -euo pipefail

# clang-16, libclang-rt-16-dev, libomp-16-dev: libFuzzer, clang's sanitizer runtimes and OpenMP
# for the fuzz targets (scripts/fuzz.sh); clang 14 cannot build the project (no
# std::source_location with GCC 12's libstdc++, no lambda captures of structured bindings).
# libicu-dev: Unicode tables of the BERT tokenizer; wordnet-base: the default BERT pretraining text.
# chromium, fonts-dejavu-core: the report page's test renders it in headless Chromium.
# ocl-icd-opencl-dev: Debian's oneDNN is built with the OpenCL GPU runtime, so its CMake
# package (find_package(dnnl)) requires OpenCL's headers and library to configure.
PACKAGES=(
  build-essential cmake ninja-build pkg-config clang-format
  libdnnl-dev ocl-icd-opencl-dev libopencv-dev nlohmann-json3-dev libfmt-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev libopenmpi-dev openmpi-bin zlib1g-dev
  dataset-fashion-mnist
  libicu-dev wordnet-base
  python3 python3-pip python3-venv python3-numpy python3-pandas python3-matplotlib
  python3-scipy python3-pytest python3-pil python3-yaml
  python3-torch python3-torchvision libopenblas0-openmp libjemalloc2
  clang-16 libclang-rt-16-dev libomp-16-dev
  chromium fonts-dejavu-core
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The official MLPerf compliance checker (PyPI), in a project-local virtual environment
# that can also see Debian's Python packages.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
if [ ! -x "$VENV/bin/python" ]; then
  /usr/bin/python3 -m venv --system-site-packages "$VENV"
fi
if ! "$VENV/bin/python" -c "import mlperf_logging" 2>/dev/null; then
  "$VENV/bin/pip" install -q mlperf-logging
fi
# Hugging Face `tokenizers`: the independent tokenizer the BERT tokenizer tests compare against.
if ! "$VENV/bin/python" -c "import tokenizers" 2>/dev/null; then
  "$VENV/bin/pip" install -q tokenizers
fi
echo "setup: dependencies present"
