# What the compare_*.sh scripts share (sourced, not run): finding models_bench in a build, the
# PyTorch peer's environment (jemalloc preloaded, per ../shared/docs/PEER.md beside the
# checkout), the host line every comparison starts with, and a scratch folder. Set ROOT first.

# compare_bench BUILD_DIR: the path of that build's models_bench (exits with a hint if absent).
compare_bench() {
  local bench="$1/benchmarks/models/models_bench"
  [[ -x "$bench" ]] || bench="$(find "$1" -name models_bench -type f -perm -u+x 2>/dev/null | head -1)"
  [[ -x "$bench" ]] || {
    echo "models_bench not found under $1 (ninja -C $1 models_bench)" >&2
    exit 1
  }
  echo "$bench"
}

# peer COMMAND...: runs a PyTorch peer script the way every comparison does (jemalloc preloaded,
# no decay of its dirty pages: PyTorch's best CPU allocator setting).
PEER_JEMALLOC=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2
peer() {
  LD_PRELOAD="$PEER_JEMALLOC" MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1 "$@"
}
[[ -f "$PEER_JEMALLOC" ]] || {
  echo "missing $PEER_JEMALLOC (apt-get install libjemalloc2)" >&2
  exit 1
}

# compare_select_isa [BUILD_DIR]: for ISA=native (the host's own) or ISA=avx2 (both sides held
# to AVX2 on any host: oneDNN by ONEDNN_MAX_CPU_ISA, PyTorch's own kernels by
# ATEN_CPU_CAPABILITY, its OpenBLAS by OPENBLAS_CORETYPE), sets BUILD (BUILD_DIR, or build /
# build-avx2) and MARCH (the -march our loops were compiled for: IPU_MARCH in the build's CMake
# cache); an avx2 run of a build not made for AVX2 exits with the command that makes one.
compare_select_isa() {
  case "$ISA" in
    native) BUILD="${1:-$ROOT/build}" ;;
    avx2)
      BUILD="${1:-$ROOT/build-avx2}"
      export ONEDNN_MAX_CPU_ISA=AVX2 DNNL_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 \
        OPENBLAS_CORETYPE=Haswell
      ;;
    *)
      echo "ISA=$ISA: expected 'native' (the host's own) or 'avx2'" >&2
      exit 1
      ;;
  esac
  MARCH="$(sed -n 's/^IPU_MARCH:[A-Z]*=//p' "$BUILD/CMakeCache.txt" 2>/dev/null)"
  if [[ "$ISA" == avx2 && "$MARCH" != x86-64-v3 ]]; then
    echo "ISA=avx2 needs a build of our loops for AVX2; $BUILD has IPU_MARCH='${MARCH:-?}'." >&2
    echo "  cmake -S . -B build-avx2 -G Ninja -DCMAKE_BUILD_TYPE=Release -DIPU_MARCH=x86-64-v3 &&" \
      "ninja -C build-avx2 models_bench" >&2
    exit 1
  fi
}

# compare_host THREADS: the host line (CPU, the ISA both sides run with, its f32 peak) and the
# load average, so that every figure says where it came from.
compare_host() {
  /usr/bin/python3 "$ROOT/benchmarks/models/host_isa.py" --text "$1"
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
}

COMPARE_TMP="$(mktemp -d)"
trap 'rm -rf "$COMPARE_TMP"' EXIT
