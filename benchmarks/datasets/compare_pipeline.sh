#!/usr/bin/env bash
# Side-by-side decode + train-augment throughput, one thread each: datasets_bench (OpenCV) vs
# torchvision (PIL). Usage: compare_pipeline.sh [path/to/datasets_bench] [N images] [repeats]
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BENCH="${1:-$HERE/../../build/benchmarks/datasets/datasets_bench}"
N="${2:-200}"
REPEATS="${3:-5}"
[ -x "$BENCH" ] || { echo "datasets_bench not found at $BENCH (build it first)" >&2; exit 1; }
DIR="$(mktemp -d)"
trap 'rm -rf "$DIR"' EXIT
/usr/bin/python3 "$HERE/make_jpegs.py" "$DIR" "$N"
echo "images: $N in $DIR ($(du -sh "$DIR" | cut -f1))"
export OMP_NUM_THREADS=1 OPENCV_FOR_THREADS_NUM=1
for T in train eval; do
  CV=$(taskset -c 0 "$BENCH" --dir "$DIR" --repeats "$REPEATS" --transform "$T")
  CV_FULL=$(taskset -c 0 "$BENCH" --dir "$DIR" --repeats "$REPEATS" --transform "$T" --reduced 0)
  TV=$(taskset -c 0 /usr/bin/python3 "$HERE/torchvision_pipeline.py" --dir "$DIR" \
       --repeats "$REPEATS" --transform "$T")
  echo "$CV"
  echo "$CV_FULL"
  echo "$TV"
  /usr/bin/python3 - "$T" "$CV" "$CV_FULL" "$TV" <<'PY'
import json, sys
t, cv, full, tv = sys.argv[1], *(json.loads(a) for a in sys.argv[2:])
a, b, c = cv["median_images_per_s"], full["median_images_per_s"], tv["median_images_per_s"]
print(f"{t}: opencv {a:.1f} img/s (no reduced decode: {b:.1f}), torchvision {c:.1f} img/s, "
      f"ratio {a / c:.2f}x (no reduced decode: {b / c:.2f}x) per core")
PY
done
