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

# compare_host THREADS: the host line (CPU, the ISA both sides run with, its f32 peak) and the
# load average, so that every figure says where it came from.
compare_host() {
  /usr/bin/python3 "$ROOT/benchmarks/models/host_isa.py" --text "$1"
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
}

COMPARE_TMP="$(mktemp -d)"
trap 'rm -rf "$COMPARE_TMP"' EXIT
