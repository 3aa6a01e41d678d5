#!/usr/bin/env bash
# BERT-Large training step (forward + backward + LAMB), ours (models_bench BM_BertTrainStep,
# fused engine) vs PyTorch (pytorch_bert_step.py) on the same shapes in the same command, 2
# threads each: full width (1024 hidden, 16 heads, FFN 4096, vocabulary 30,522, MLM + NSP
# heads), LAYERS encoder layers, batch 2, sequence 128 and 512, f32 and bf16 (ours: the bf16
# policy; PyTorch: CPU bf16 autocast). Each repetition runs ours and PyTorch back to back for
# every workload (interleaved: the shared machine's load hits both alike); the ratio
# (PyTorch step time / ours, > 1 = ours faster) is the median of the per-repetition ratios.
#   benchmarks/models/compare_bert.sh [BUILD_DIR]     (default: build)
#   REPS=3 LAYERS=4 SEQS="128 512" PRECISIONS="fp32 bf16"   (the defaults)
# The 24-layer model (LAYERS=24) fits (about 6 GB for PyTorch at sequence 512 in f32) but one
# repetition of the four workloads takes tens of minutes on 2 cores: the per-layer work is the
# same, so a few layers give the encoder's ratio; the embeddings and heads weigh more in it.
# Peer configuration per ../shared/docs/PEER.md (the team docs beside the checkout): Debian
# python3-torch, OpenBLAS (openmp) with OPENBLAS_CORETYPE=SkylakeX on AVX-512 hosts, jemalloc
# preloaded, 2 threads, warm-up 3, median of 3 timed steps (ours: the same).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
source "$ROOT/benchmarks/models/compare_common.sh"
BENCH="$(compare_bench "${1:-$ROOT/build}")" || exit 1
REPS="${REPS:-3}"
LAYERS="${LAYERS:-4}"
SEQS="${SEQS:-128 512}"
PRECISIONS="${PRECISIONS:-fp32 bf16}"
export OMP_NUM_THREADS=2
ISA="$(lscpu | grep -o 'avx512[a-z_0-9]*\|amx[a-z_]*\|avx2' | sort -u | tr '\n' ' ')"
CORETYPE=""
[[ "$ISA" == *avx512f* ]] && CORETYPE=SkylakeX  # ~1.4x for BERT over OpenBLAS's Haswell default
TMP="$COMPARE_TMP"
compare_host "$OMP_NUM_THREADS"

for ((r = 0; r < REPS; ++r)); do
  for seq in $SEQS; do
    for prec in $PRECISIONS; do
      p=0 && [[ "$prec" == bf16 ]] && p=1
      tag="${seq}_${prec}_$r"
      echo "== ours: sequence $seq, $prec, $LAYERS layers, rep $r (load $(cut -d' ' -f1 /proc/loadavg))"
      "$BENCH" --benchmark_filter="^BM_BertTrainStep/seq:$seq/batch:2/layers:$LAYERS/precision:$p/" \
        --benchmark_out="$TMP/ours_$tag.json" --benchmark_out_format=json >/dev/null ||
        echo "   ours failed (rc $?; out of memory?)"
      /usr/bin/python3 -c 'import json,sys
try: print("   median step s", json.load(open(sys.argv[1]))["benchmarks"][0]["median_s"])
except Exception: print("   no result")' "$TMP/ours_$tag.json"
      echo "== pytorch: sequence $seq, $prec, $LAYERS layers, rep $r"
      flag=() && [[ "$prec" == bf16 ]] && flag=(--bf16)
      OPENBLAS_CORETYPE="$CORETYPE" peer /usr/bin/python3 "$ROOT/benchmarks/models/pytorch_bert_step.py" \
        --seq "$seq" --batch 2 --layers "$LAYERS" --steps 3 "${flag[@]}" |
        tee "$TMP/torch_$tag.json"
    done
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

/usr/bin/python3 - "$TMP" "$REPS" "$LAYERS" "$SEQS" "$PRECISIONS" <<'PY'
import json, statistics, sys
d, reps, layers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
seqs, precs = sys.argv[4].split(), sys.argv[5].split()
def ours(path):
    try:  # a run killed for memory leaves a truncated file
        runs = json.load(open(path)).get("benchmarks", [])
        return runs[0]["median_s"] if runs else None
    except (OSError, ValueError, KeyError):
        return None
def torch(path):
    try:
        return json.load(open(path))["median_s"]
    except (OSError, ValueError, KeyError):
        return None
med = lambda xs: statistics.median(xs) if xs else None
f = lambda v, w=9: f"{v:{w}.3f}" if v is not None else f"{'failed':>{w}s}"
print(f"BERT-Large, {layers} encoder layers x 1024, batch 2: step seconds (medians of {reps} "
      "interleaved repetitions); ratio = PyTorch / ours (> 1: ours faster), median per repetition")
print(f"{'workload':22s} {'ours s':>9s} {'torch s':>9s} {'ratio':>7s} {'ours seq/s':>10s} "
      f"{'torch seq/s':>11s}  per repetition (ours / torch s)")
for seq in seqs:
    for prec in precs:
        o = [ours(f"{d}/ours_{seq}_{prec}_{r}.json") for r in range(reps)]
        t = [torch(f"{d}/torch_{seq}_{prec}_{r}.json") for r in range(reps)]
        ratios = [b / a for a, b in zip(o, t) if a and b]
        mo, mt = med([x for x in o if x]), med([x for x in t if x])
        rt = med(ratios)
        print(f"{f'seq {seq} {prec}':22s} {f(mo)} {f(mt)} {f(rt, 7)} "
              f"{f(2 / mo if mo else None, 10)} {f(2 / mt if mt else None, 11)}  "
              + ", ".join(f"{a if a else 0:.2f}/{b if b else 0:.2f}" for a, b in zip(o, t)))
PY
