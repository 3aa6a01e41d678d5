#!/usr/bin/env bash
# BERT-Large training step (forward + backward + LAMB), ours (models_bench BM_BertTrainStep,
# fused engine) vs PyTorch (pytorch_bert_step.py) on the same shapes in the same command, 2
# threads each: full width (1024 hidden, 16 heads, FFN 4096, vocabulary 30,522, MLM + NSP
# heads), LAYERS encoder layers, batch 2, sequence 128 and 512, f32 and bf16 (ours: the bf16
# policy; PyTorch: CPU bf16 autocast). Each repetition runs ours and PyTorch back to back for
# every workload (interleaved: the shared machine's load hits both alike); the ratio
# (PyTorch step time / ours, > 1 = ours faster) is the median of the per-repetition ratios.
#   benchmarks/models/compare_bert.sh [BUILD_DIR]     (default: build)
#   REPS=3 LAYERS=4 SEQS="128 512" PRECISIONS="fp32 bf16" CPU_TIME=0   (the defaults)
# The 24-layer model (LAYERS=24) fits (about 6 GB for PyTorch at sequence 512 in f32) but one
# repetition of the four workloads takes tens of minutes on 2 cores: the per-layer work is the
# same, so a few layers give the encoder's ratio; the embeddings and heads weigh more in it.
# Peer configuration per ../shared/docs/PEER.md (the team docs beside the checkout): Debian
# python3-torch, OpenBLAS (openmp) with OPENBLAS_CORETYPE=SkylakeX on AVX-512 hosts, jemalloc
# preloaded, 2 threads, warm-up 3, median of 3 timed steps (ours: the same).
# CPU_TIME=1 compares ONE thread's CPU time per step instead (on a loaded shared host the CPU
# time a process spends is far less inflated than its wall time, as in compare_resnet50_cpu.sh):
# ours MODELS_BENCH_THREADS=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive, models_bench's
# median_cpu_s (the median of its timed steps' process CPU time); PyTorch --threads 1
# --cpu-time. BASELINE=OTHER_BUILD also times OTHER_BUILD's models_bench in every repetition
# (a before / after of our side).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
source "$ROOT/benchmarks/models/compare_common.sh"
BENCH="$(compare_bench "${1:-$ROOT/build}")" || exit 1
BASE_BENCH=""
[[ -n "${BASELINE:-}" ]] && { BASE_BENCH="$(compare_bench "$BASELINE")" || exit 1; }
REPS="${REPS:-3}"
LAYERS="${LAYERS:-4}"
SEQS="${SEQS:-128 512}"
PRECISIONS="${PRECISIONS:-fp32 bf16}"
CPU_TIME="${CPU_TIME:-0}"
THREADS=2
TORCH_CLOCK=()
if [[ "$CPU_TIME" == 1 ]]; then
  THREADS=1
  TORCH_CLOCK=(--cpu-time)
  export MODELS_BENCH_THREADS=1 OMP_WAIT_POLICY=passive
fi
export OMP_NUM_THREADS=$THREADS
ISA="$(lscpu | grep -o 'avx512[a-z_0-9]*\|amx[a-z_]*\|avx2' | sort -u | tr '\n' ' ')"
CORETYPE=""
[[ "$ISA" == *avx512f* ]] && CORETYPE=SkylakeX  # ~1.4x for BERT over OpenBLAS's Haswell default
TMP="$COMPARE_TMP"
compare_host "$OMP_NUM_THREADS"
echo "clock: $([[ "$CPU_TIME" == 1 ]] && echo "one thread's process CPU time" || echo wall)," \
  "ours: $BENCH${BASE_BENCH:+, before: $BASE_BENCH}"
run_ours() { # $1 = bench, $2 = out, $3 = seq, $4 = precision (0 / 1)
  "$1" --benchmark_filter="^BM_BertTrainStep/seq:$3/batch:2/layers:$LAYERS/precision:$4/" \
    --benchmark_out="$2" --benchmark_out_format=json >/dev/null ||
    echo "   $1 failed (rc $?; out of memory?)"
}

for ((r = 0; r < REPS; ++r)); do
  for seq in $SEQS; do
    for prec in $PRECISIONS; do
      p=0 && [[ "$prec" == bf16 ]] && p=1
      tag="${seq}_${prec}_$r"
      echo "== ours: sequence $seq, $prec, $LAYERS layers, rep $r (load $(cut -d' ' -f1 /proc/loadavg))"
      run_ours "$BENCH" "$TMP/ours_$tag.json" "$seq" "$p"
      [[ -n "$BASE_BENCH" ]] && run_ours "$BASE_BENCH" "$TMP/base_$tag.json" "$seq" "$p"
      /usr/bin/python3 -c 'import json,sys
for f in sys.argv[2:]:
  try: print("  ", f.split("/")[-1], "median step s", json.load(open(f))["benchmarks"][0][sys.argv[1]])
  except Exception: pass' "$([[ "$CPU_TIME" == 1 ]] && echo median_cpu_s || echo median_s)" \
        "$TMP/ours_$tag.json" "$TMP/base_$tag.json"
      echo "== pytorch: sequence $seq, $prec, $LAYERS layers, rep $r"
      flag=() && [[ "$prec" == bf16 ]] && flag=(--bf16)
      OPENBLAS_CORETYPE="$CORETYPE" peer /usr/bin/python3 "$ROOT/benchmarks/models/pytorch_bert_step.py" \
        --seq "$seq" --batch 2 --layers "$LAYERS" --steps 3 --threads "$THREADS" \
        "${TORCH_CLOCK[@]}" "${flag[@]}" | tee "$TMP/torch_$tag.json"
    done
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

/usr/bin/python3 - "$TMP" "$REPS" "$LAYERS" "$SEQS" "$PRECISIONS" "$CPU_TIME" <<'PY'
import json, statistics, sys
d, reps, layers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
seqs, precs, cpu = sys.argv[4].split(), sys.argv[5].split(), sys.argv[6] == "1"
def ours(path):
    try:  # a run killed for memory leaves a truncated file
        runs = json.load(open(path)).get("benchmarks", [])
        return runs[0]["median_cpu_s" if cpu else "median_s"] if runs else None
    except (OSError, ValueError, KeyError):
        return None
def torch(path):
    try:
        t = json.load(open(path))
        assert t["clock"] == ("process_cpu" if cpu else "wall")
        return t["median_s"]
    except (OSError, ValueError, KeyError, AssertionError):
        return None
med = lambda xs: statistics.median(xs) if xs else None
f = lambda v, w=9: f"{v:{w}.3f}" if v is not None else f"{'failed':>{w}s}"
clock = "one thread's CPU seconds" if cpu else "wall seconds, 2 threads"
print(f"BERT-Large, {layers} encoder layers x 1024, batch 2: step {clock} (medians of {reps} "
      "interleaved repetitions); ratio = PyTorch / ours (> 1: ours faster), median per repetition")
print(f"{'workload':22s} {'ours s':>9s} {'torch s':>9s} {'ratio':>7s} {'before s':>9s} "
      f"{'before ratio':>12s}  per repetition (ours / torch s)")
for seq in seqs:
    for prec in precs:
        o = [ours(f"{d}/ours_{seq}_{prec}_{r}.json") for r in range(reps)]
        b = [ours(f"{d}/base_{seq}_{prec}_{r}.json") for r in range(reps)]
        t = [torch(f"{d}/torch_{seq}_{prec}_{r}.json") for r in range(reps)]
        ratios = [y / x for x, y in zip(o, t) if x and y]
        before = [y / x for x, y in zip(b, t) if x and y]
        mo, mt, mb = (med([x for x in v if x]) for v in (o, t, b))
        dash = lambda v, w: f(v, w) if v is not None else f"{'-':>{w}s}"  # no BASELINE
        print(f"{f'seq {seq} {prec}':22s} {f(mo)} {f(mt)} {f(med(ratios), 7)} {dash(mb, 9)} "
              f"{dash(med(before), 12)}  "
              + ", ".join(f"{x if x else 0:.2f}/{y if y else 0:.2f}" for x, y in zip(o, t)))
PY
