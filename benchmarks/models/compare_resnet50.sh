#!/usr/bin/env bash
# ResNet-50 training step, ours (models_bench, fused engine) vs PyTorch on the same machine in
# the same command, 2 threads each: batch 32 at 224x224, batch 8 at 224x224, batch 32 at 32x32.
# Prints img/s of both and the ratio (ours / PyTorch).
#   benchmarks/models/compare_resnet50.sh [BUILD_DIR]          (default: build); REPS=n
#       interleaved repetitions, CONFIGS="224 32;32 32" to select workloads
#   benchmarks/models/compare_resnet50.sh --bf16 [BUILD_DIR]   ours bf16 vs PyTorch bf16 autocast,
#       batch 32 and 8 at 224x224, interleaved repetitions (REPS, default 3), medians; plus our
#       f16 step (f16 via conversion: no f16 conv kernel on CPUs) next to our f32 step
#       (BATCHES, F32_BATCHES select the batches)
#   ISA=avx2 ...   both sides held to AVX2 on any host (an AVX-512 host then behaves as an
#       AVX2-only one): oneDNN limited by ONEDNN_MAX_CPU_ISA=AVX2 (ours and PyTorch's), PyTorch's
#       own kernels by ATEN_CPU_CAPABILITY=avx2 and its OpenBLAS by OPENBLAS_CORETYPE=Haswell; ours
#       from a build configured with -DIPU_MARCH=x86-64-v3 (default BUILD_DIR: build-avx2), e.g.
#       ISA=avx2 REPS=3 CONFIGS="224 32;32 32" bash benchmarks/models/compare_resnet50.sh
#   BASELINE=OTHER_BUILD ...   also runs OTHER_BUILD's models_bench (e.g. a build of an earlier
#       commit) in every repetition, next to ours and PyTorch, and prints after/before: a
#       before-and-after check of a change in the same command (f32 and --bf16 modes)
# Every run first prints the ISA both sides run with and its f32 peak (host_isa.py: threads x
# clock x flop per cycle), and the summary the fraction of that peak each side reaches.
# Peer configuration per ../shared/docs/PEER.md (the team docs beside the checkout): Debian python3-torch, jemalloc preloaded,
# channels_last, 2 threads, warm-up 3, median of 10.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
MODE=fp32
if [[ "${1:-}" == "--bf16" ]]; then MODE=bf16; shift; fi
ISA="${ISA:-native}"
[[ "$ISA" == avx2 && "$MODE" == bf16 ]] && { echo "ISA=avx2 has no bf16 mode (no bf16 kernels at AVX2)" >&2; exit 1; }
source "$ROOT/benchmarks/models/compare_common.sh"
compare_select_isa "${1:-}"
BENCH="$(compare_bench "$BUILD")" || exit 1
BASE_BENCH=""
[[ -n "${BASELINE:-}" ]] && { BASE_BENCH="$(compare_bench "$BASELINE")" || exit 1; }
export OMP_NUM_THREADS=2
TMP="$COMPARE_TMP"

# Where the figures come from: the ISA and its peak, our build's -march, and the ISA oneDNN
# reports inside PyTorch (its verbose mode names it as it creates the first primitive).
compare_host "$OMP_NUM_THREADS"
/usr/bin/python3 "$ROOT/benchmarks/models/host_isa.py" "$OMP_NUM_THREADS" >"$TMP/host.json"
TORCH_ISA="$(DNNL_VERBOSE=1 /usr/bin/python3 -c 'import torch
cl = torch.channels_last  # a convolution PyTorch hands to oneDNN
torch.nn.functional.conv2d(torch.ones(2, 64, 16, 16).to(memory_format=cl),
                           torch.ones(64, 64, 3, 3).to(memory_format=cl), padding=1)' 2>/dev/null |
  grep -m1 -o 'isa:[^,]*')"
[[ -n "$BASE_BENCH" ]] && echo "before (BASELINE): $BASE_BENCH"
echo "ours: $BENCH (IPU_MARCH=${MARCH:-?}); PyTorch's oneDNN: ${TORCH_ISA:-unknown}" \
  "ATEN_CPU_CAPABILITY=${ATEN_CPU_CAPABILITY:-default} OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-default}"

# Prints the img/s of a models_bench JSON as it is written (a partial run still reports).
show() {
  /usr/bin/python3 -c 'import json,sys
try: print("   img/s", json.load(open(sys.argv[1]))["benchmarks"][0]["images/s"])
except Exception: print("   no result")' "$1"
}

if [[ "$MODE" == bf16 ]]; then
  exec_bf16() { # $1 = batch, $2 = rep
    local b="$1" r="$2"
    for p in 0 1; do
      echo "== ours ($( ((p == 0)) && echo bf16 || echo f16)): 224x224 batch $b, rep $r"
      "$BENCH" --benchmark_filter="^BM_ResNet50TrainStepPrecision/hw:224/batch:$b/precision:$p/" \
        --benchmark_out="$TMP/ours_p${p}_${b}_$r.json" \
        --benchmark_out_format=json >/dev/null || echo "   ours failed (rc $?; out of memory?)"
      show "$TMP/ours_p${p}_${b}_$r.json"
    done
    if [[ -n "$BASE_BENCH" ]]; then
      echo "== before (bf16): 224x224 batch $b, rep $r"
      "$BASE_BENCH" --benchmark_filter="^BM_ResNet50TrainStepPrecision/hw:224/batch:$b/precision:0/" \
        --benchmark_out="$TMP/base_p0_${b}_$r.json" --benchmark_out_format=json >/dev/null ||
        echo "   before failed (rc $?)"
      show "$TMP/base_p0_${b}_$r.json"
    fi
    if [[ " $F32_BATCHES " == *" $b "* ]]; then
      echo "== ours (f32): 224x224 batch $b, rep $r"
      "$BENCH" --benchmark_filter="^BM_ResNet50TrainStep/hw:224/batch:$b/" \
        --benchmark_out="$TMP/ours_f32_${b}_$r.json" --benchmark_out_format=json >/dev/null ||
        echo "   ours failed (rc $?; out of memory?)"
      show "$TMP/ours_f32_${b}_$r.json"
    fi
    echo "== pytorch (bf16 autocast): 224x224 batch $b, rep $r"
    peer /usr/bin/python3 "$ROOT/benchmarks/models/pytorch_resnet50_step.py" --hw 224 --batch "$b" \
      --bf16 --steps 5 | tee "$TMP/torch_bf16_${b}_$r.json"
  }
  REPS="${REPS:-3}"
  BATCHES="${BATCHES:-32 8}"
  # Our f32 step next to the f16 one (f16 converts around f32 kernels: its cost over f32).
  F32_BATCHES="${F32_BATCHES:-$BATCHES}"
  for b in $BATCHES; do
    for ((r = 0; r < REPS; ++r)); do exec_bf16 "$b" "$r"; done
  done
  /usr/bin/python3 - "$TMP" "$REPS" "$BATCHES" "$BASE_BENCH" <<'PY'
import json, statistics, sys
d, reps, batches = sys.argv[1], int(sys.argv[2]), [int(b) for b in sys.argv[3].split()]
baseline = bool(sys.argv[4])
def ours(path):
    try:  # a run killed for memory leaves a truncated file
        runs = json.load(open(path)).get("benchmarks", [])
        return runs[0]["images/s"] if runs else None
    except (OSError, ValueError):
        return None
def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None
fmt = lambda v: f"{v:10.2f}" if v is not None else f"{'failed':>10s}"
# The machine is shared and noisy: each repetition runs ours and PyTorch back to back, so the
# ratio is taken per repetition and the median of those ratios is reported.
def ratios(num, den):
    return [a / b for a, b in zip(num, den) if a and b]
print(f"{'ResNet-50 224x224':18s} {'ours bf16':>10s} {'torch bf16':>10s} {'ratio':>7s} "
      f"{'ours f32':>10s} {'ours f16':>10s} {'f16/f32':>8s}   (img/s and ratios: medians of "
      f"{reps} interleaved repetitions)")
for b in batches:
    ob = [ours(f"{d}/ours_p0_{b}_{r}.json") for r in range(reps)]
    of = [ours(f"{d}/ours_p1_{b}_{r}.json") for r in range(reps)]
    o32 = [ours(f"{d}/ours_f32_{b}_{r}.json") for r in range(reps)]
    t = [json.load(open(f"{d}/torch_bf16_{b}_{r}.json"))["images_per_s"] for r in range(reps)]
    rt, rc = med(ratios(ob, t)), med(ratios(of, o32))
    print(f"{'batch ' + str(b):18s} {fmt(med(ob))} {fmt(med(t))} "
          f"{(f'{rt:7.3f}' if rt else f'{chr(45):>7s}')} {fmt(med(o32))} {fmt(med(of))} "
          f"{(f'{rc:8.3f}' if rc else f'{chr(45):>8s}')}")
    for r in range(reps):
        print(f"  rep {r}: ours bf16 {ob[r]}, torch bf16 {t[r]:.3f}, ours f32 {o32[r]}, "
              f"ours f16 {of[r]}")
    if baseline:
        bb = [ours(f"{d}/base_p0_{b}_{r}.json") for r in range(reps)]
        ra = med(ratios(ob, bb))
        print(f"  bf16 before {fmt(med(bb))} img/s, after/before {ra:.3f}" if ra else
              "  bf16 before: failed")
PY
  exit 0
fi

# f32: REPS interleaved repetitions (default 1) of CONFIGS ("hw batch" pairs, ';'-separated;
# default all three); the direct-only variant runs in the first repetition. The ratio is the
# median of the per-repetition ratios.
REPS="${REPS:-1}"
IFS=';' read -r -a CONFIGS <<<"${CONFIGS:-224 32;224 8;32 32}"
for ((r = 0; r < REPS; ++r)); do
  for cfg in "${CONFIGS[@]}"; do
    read -r hw b <<<"$cfg"
    filter="^BM_ResNet50TrainStep/hw:$hw/batch:$b/"
    ((r == 0)) && filter="^BM_ResNet50TrainStep(DirectConv)?/hw:$hw/batch:$b/"
    echo "== ours: ${hw}x${hw} batch $b, rep $r$( ((r == 0)) && echo ' (Winograd 3x3 and direct-only)')"
    "$BENCH" --benchmark_filter="$filter" --benchmark_out="$TMP/ours_${hw}_${b}_$r.json" \
      --benchmark_out_format=json >/dev/null || echo "   ours failed (rc $?; out of memory?)"
    show "$TMP/ours_${hw}_${b}_$r.json"
    if [[ -n "$BASE_BENCH" ]]; then
      echo "== before: ${hw}x${hw} batch $b, rep $r"
      "$BASE_BENCH" --benchmark_filter="^BM_ResNet50TrainStep/hw:$hw/batch:$b/" \
        --benchmark_out="$TMP/base_${hw}_${b}_$r.json" --benchmark_out_format=json >/dev/null ||
        echo "   before failed (rc $?)"
      show "$TMP/base_${hw}_${b}_$r.json"
    fi
    echo "== pytorch: ${hw}x${hw} batch $b, rep $r"
    peer /usr/bin/python3 "$ROOT/benchmarks/models/pytorch_resnet50_step.py" --hw "$hw" --batch "$b" \
      | tee "$TMP/torch_${hw}_${b}_$r.json"
  done
done

/usr/bin/python3 - "$TMP" "$REPS" "$BASE_BENCH" "${CONFIGS[@]}" <<'PY'
import json, statistics, sys
d, reps, configs = sys.argv[1], int(sys.argv[2]), [tuple(map(int, c.split())) for c in sys.argv[4:]]
baseline = bool(sys.argv[3])
host = json.load(open(f"{d}/host.json"))
peak = host["peak_gflops"]
print(f"{'workload':26s} {'ours img/s':>10s} {'GFLOP/s':>8s} {'%peak':>6s} {'peak GB':>8s} "
      f"{'direct':>8s} {'torch img/s':>11s} {'GFLOP/s':>8s} {'%peak':>6s} {'peak GB':>8s} "
      f"{'ratio':>6s} {'direct':>6s}")
def load(path):
    runs = {}
    try:  # a run killed for memory leaves a truncated file
        for r in json.load(open(path)).get("benchmarks", []):
            runs["direct" if "DirectConv" in r["name"] else "auto"] = r
    except (OSError, ValueError):
        pass
    return runs
for hw, b in configs:
    t = [json.load(open(f"{d}/torch_{hw}_{b}_{r}.json")) for r in range(reps)]
    o = [load(f"{d}/ours_{hw}_{b}_{r}.json").get("auto") for r in range(reps)]
    dc = load(f"{d}/ours_{hw}_{b}_0.json").get("direct")
    ratios = [x["images/s"] / y["images_per_s"] for x, y in zip(o, t) if x]
    ours = [x for x in o if x]
    mid = sorted(ours, key=lambda x: x["images/s"])[len(ours) // 2] if ours else None
    tm = sorted(t, key=lambda x: x["images_per_s"])[len(t) // 2]
    # Both sides' GFLOP/s from our exact count of the step (6 x forward MACs x 2 flop) where
    # ours ran; PyTorch's own figure scales 224x224's by the pixels (the stem's rounding aside).
    flop_per_image = mid["GFLOP/s"] / mid["images/s"] if mid else None
    torch_gflops = (tm["images_per_s"] * flop_per_image if flop_per_image
                    else tm["gflops_approx"])
    cell = lambda r, k, f: format(r[k], f) if r else "failed"
    pct = lambda g: format(100 * g / peak, "6.1f") if g and peak else "-"
    ratio = statistics.median(ratios) if ratios else None
    print(f"{f'ResNet-50 {hw}x{hw} batch {b}':26s} {cell(mid, 'images/s', '10.2f'):>10s} "
          f"{cell(mid, 'GFLOP/s', '8.1f'):>8s} {pct(mid['GFLOP/s'] if mid else None):>6s} "
          f"{cell(mid, 'peak_rss_GB', '8.2f'):>8s} "
          f"{cell(dc, 'images/s', '8.2f'):>8s} {tm['images_per_s']:11.2f} "
          f"{torch_gflops:8.1f} {pct(torch_gflops):>6s} {tm.get('peak_rss_gb', 0):8.2f} "
          f"{(format(ratio, '6.3f') if ratio else '-'):>6s} "
          f"{(format(dc['images/s'] / t[0]['images_per_s'], '6.3f') if dc else '-'):>6s}")
    if reps > 1:
        print("  per repetition: " + ", ".join(
            f"{x['images/s']:.2f} vs {y['images_per_s']:.2f} ({x['images/s'] / y['images_per_s']:.3f})"
            if x else "failed" for x, y in zip(o, t)))
    if baseline:
        bs = [load(f"{d}/base_{hw}_{b}_{r}.json").get("auto") for r in range(reps)]
        after = [x["images/s"] / y["images/s"] for x, y in zip(o, bs) if x and y]
        print("  before (BASELINE): " + ", ".join(
            f"{y['images/s']:.2f}" if y else "failed" for y in bs) +
            (f" img/s; after/before {statistics.median(after):.3f} (median of per-repetition "
             "ratios)" if after else ""))
names = {"avx2": "AVX2", "avx512": "AVX-512", "amx": "AMX", "sse41": "SSE4.1"}
print(f"ratio: ours (the kernel rule of {names[host['isa']]}, the default) / PyTorch, the median of "
      f"{reps} interleaved repetition(s); direct: ours with direct convolutions only / PyTorch "
      "(first repetition). img/s: medians. %peak: of the f32 peak of "
      f"{names[host['isa']]} on {host['threads']} threads ({peak} GFLOP/s; host_isa.py). "
      "peak GB: peak resident memory of each process.")
PY
