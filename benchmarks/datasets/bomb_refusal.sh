#!/usr/bin/env bash
# A JPEG whose frame header claims 60000x60000 pixels (64x48 of real data), through
# datasets_bench's train and eval transforms and through PIL (Image.open().load(), torchvision's
# reader), side by side: wall time and peak memory, median of REPEATS runs of each.
# Usage: bomb_refusal.sh [path/to/datasets_bench ...] (several binaries: e.g. before and after)
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPEATS="${REPEATS:-5}"
[ $# -gt 0 ] || set -- "$HERE/../../build/benchmarks/datasets/datasets_bench"
DIR="$(mktemp -d)"
trap 'rm -rf "$DIR"' EXIT
/usr/bin/python3 - "$DIR/bomb.JPEG" <<'PY'
import io, sys
import numpy as np
from PIL import Image
b = io.BytesIO()
Image.fromarray(np.zeros((48, 64, 3), np.uint8)).save(b, "JPEG")
d = bytearray(b.getvalue())
i = d.index(b"\xff\xc0")  # SOF0: length(2) precision(1) height(2) width(2)
d[i + 5:i + 9] = (60000).to_bytes(2, "big") * 2
open(sys.argv[1], "wb").write(d)
PY
measure() {  # label, command...: median seconds and KB of peak RSS over REPEATS runs, exit code
  local label="$1"; shift
  local rows=()
  for _ in $(seq "$REPEATS"); do
    /usr/bin/time -o "$DIR/t" -f "%e %M %x" "$@" >/dev/null 2>&1 || true
    rows+=("$(tail -1 "$DIR/t")")
  done
  printf '%s\n' "${rows[@]}" | /usr/bin/python3 -c "
import statistics, sys
r = [l.split() for l in sys.stdin if l.strip()]
print(f'$label: {statistics.median(float(x[0]) for x in r):.3f} s, '
      f'peak {statistics.median(int(x[1]) for x in r) / 1024:.0f} MB, exit {r[-1][2]}')"
}
for BENCH in "$@"; do
  for T in train eval; do
    measure "$BENCH --transform $T" "$BENCH" --dir "$DIR" --repeats 1 --transform "$T"
  done
done
measure "PIL Image.open().load()" /usr/bin/python3 -c \
  "from PIL import Image; Image.open('$DIR/bomb.JPEG').load()"
