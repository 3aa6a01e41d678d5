#!/usr/bin/env bash
# Tokenising + creating pretraining instances from WikiText-2 (test + valid), side by side:
# prepare_bert_data (C++) against the reference's Python logic (bert_reference.py: google-research
# /bert's tokenization.py + create_pretraining_data.py), same text, vocabulary and settings
# (max_seq_length 128, dupe factor DUPE, WikiText articles as documents). Both are single-threaded;
# the figure compared is CPU seconds per process (one core each), median of REPEATS runs, which a
# busy shared machine disturbs less than wall time.
#   benchmarks/datasets/bench_bert_data.sh            (BUILD=build, IPU_SHARED_DIR=../shared)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${BUILD:-$ROOT/build}"
SHARED="${IPU_SHARED_DIR:-$ROOT/../shared}"
REPEATS="${REPEATS:-3}"
DUPE="${DUPE:-1}"
VOCAB="$SHARED/data/bert/vocab-uncased.txt"
TEXT=("$SHARED/data/wikitext-2/test.txt" "$SHARED/data/wikitext-2/valid.txt")
for f in "$VOCAB" "${TEXT[@]}"; do
  [ -f "$f" ] || { echo "bench_bert_data: $f absent (set IPU_SHARED_DIR)" >&2; exit 2; }
done
CLI="$BUILD/datasets/bert/prepare_bert_data"
[ -x "$CLI" ] || { echo "bench_bert_data: build prepare_bert_data first ($CLI)" >&2; exit 2; }

cpp=() py=()
for i in $(seq "$REPEATS"); do
  out=$("$CLI" --input "${TEXT[@]}" --format paragraphs --vocab "$VOCAB" --dupe-factor "$DUPE" --no-shards)
  [ "$i" = 1 ] && echo "$out" | sed 's/^/  c++: /'
  cpp+=("$(echo "$out" | sed -n 's/^time: tokenize + instances .* s wall, \(.*\) s CPU$/\1/p')")
  out=$(/usr/bin/python3 "$ROOT/benchmarks/datasets/bert_reference.py" create "$VOCAB" "${TEXT[@]}" \
        --paragraphs --dupe-factor "$DUPE")
  [ "$i" = 1 ] && echo "$out" | sed 's/^/  python: /'
  py+=("$(echo "$out" | sed -n 's/^time: tokenize + instances .* s wall, \(.*\) s CPU$/\1/p')")
done
/usr/bin/python3 - "${cpp[*]}" "${py[*]}" <<'PY'
import statistics, sys, platform
cpp = [float(x) for x in sys.argv[1].split()]
py = [float(x) for x in sys.argv[2].split()]
mc, mp = statistics.median(cpp), statistics.median(py)
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.machine())
print(f"host: {cpu}")
print(f"tokenize + instances, CPU s (median of {len(cpp)}): C++ {mc:.3f}  Python reference {mp:.3f}  "
      f"ratio {mp / mc:.1f}x per core")
PY
