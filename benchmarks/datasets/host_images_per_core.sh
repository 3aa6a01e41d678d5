#!/usr/bin/env bash
# Images one host core decodes and augments per CPU-second with this project's loader, for the
# full-scale projection's host side (harness/full_scale_projection.cpp, kTrainImagesPerCoreSecond
# and kEvalImagesPerCoreSecond). CPU time, not wall time, so that a shared host's load inflates
# it less; the difference of a short and a long run removes the start-up (reading the files,
# the untimed first pass).
#   usage: host_images_per_core.sh [path/to/datasets_bench] [N images] [pairs]
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BENCH="${1:-$HERE/../../build/benchmarks/datasets/datasets_bench}"
N="${2:-200}"
PAIRS="${3:-2}"
[ -x "$BENCH" ] || { echo "datasets_bench not found at $BENCH (build it first)" >&2; exit 1; }
DIR="$(mktemp -d)"
trap 'rm -rf "$DIR"' EXIT
/usr/bin/python3 "$HERE/make_jpegs.py" "$DIR" "$N"
export OMP_NUM_THREADS=1 OPENCV_FOR_THREADS_NUM=1
cpu() {  # user + system seconds of one datasets_bench run
  /usr/bin/time -f "%U %S" "$BENCH" --dir "$DIR" --repeats "$2" --transform "$1" 2>&1 >/dev/null |
    awk '{print $1 + $2}'
}
for T in train eval; do
  for _ in $(seq "$PAIRS"); do
    SHORT=$(cpu "$T" 3)
    LONG=$(cpu "$T" 23)
    awk -v t="$T" -v s="$SHORT" -v l="$LONG" -v n="$N" \
      'BEGIN { printf "%s: %.0f images per core-second (%d images in %.2f CPU-s)\n", t, 20 * n / (l - s), 20 * n, l - s }'
  done
done
