// Host time of run_benchmark's fit verdict for full ResNet-50 at the published POD16
// configuration (micro-batch 20, FP16.16, accumulation 10, IPU-Mk2): the training program with
// the published recomputation checkpoints, or without them, then the evaluation program; what
// `run_benchmark --project-only` spends before pricing. Counters: whether it fits, the training
// program's worst tile (KiB of 624) and its all-tile peak (MB); the compiler's verdict (the
// worst tile and its occupants at its peak) goes to stderr.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "harness/full_scale_projection.h"
#include "harness/pod_presets.h"
#include "ipu_backend/compiler/executable.h"

namespace {

using ipu::harness::FitOptions;
using ipu::harness::FitVerdict;

void BM_ResNet50FitVerdictMk2(benchmark::State& state) {
  const ipu::harness::PodPreset& preset =
      ipu::harness::findPreset(ipu::harness::Benchmark::kResNet50, 16, ipu::harness::Scale::kFull);
  FitOptions options;
  options.recompute = state.range(0) != 0;
  // FIT_BENCH_DETAIL=N: the training program's N compute sets with the most live bytes (all
  // tiles) and its fullest tiles' always-live split, to stderr.
  const char* detail = std::getenv("FIT_BENCH_DETAIL");
  ipu::harness::ProgramReportSink sink;
  if (detail)
    sink = [n = std::atoi(detail)](const std::string& program, const ipu::Executable& exe, bool,
                                   const std::string&, const ipu::cost::CostOptions&) {
      const ipu::MemoryDetail& d = exe.memoryDetail;
      std::vector<int> order(exe.computeSets.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
      const size_t shown = std::min<size_t>(static_cast<size_t>(n), order.size());
      std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(shown),
                        order.end(), [&](int a, int b) { return d.liveBytes[a] > d.liveBytes[b]; });
      std::fprintf(stderr, "%s: compute sets with the most live bytes (all tiles)\n",
                   program.c_str());
      for (size_t i = 0; i < shown; ++i)
        std::fprintf(stderr, "  %.1f MB  %s\n", static_cast<double>(d.liveBytes[order[i]]) / 1e6,
                     exe.computeSets[order[i]].name.c_str());
      // The largest peak of what is not always live (the part the plans decide; code and
      // vertex state are always live), whichever tile holds it.
      size_t most = 0;
      for (size_t t = 1; t < exe.tileMemory.size(); ++t)
        if (exe.tileMemory[t].peakNotAlwaysLive > exe.tileMemory[most].peakNotAlwaysLive) most = t;
      if (!exe.tileMemory.empty())
        std::fprintf(stderr,
                     "  largest peak not always live: tile %zu, %lld B (%lld always live)\n", most,
                     static_cast<long long>(exe.tileMemory[most].peakNotAlwaysLive),
                     static_cast<long long>(exe.tileMemory[most].alwaysLive));
      for (const ipu::TileDetail& t : d.worstTiles)
        std::fprintf(stderr, "  tile %d: %lld B (%lld always live, %lld code+vertex), peak at %s\n",
                     t.tile, static_cast<long long>(t.memory.total()),
                     static_cast<long long>(t.memory.alwaysLive),
                     static_cast<long long>(t.codeAndVertexState),
                     t.peakComputeSet >= 0 ? exe.computeSets[t.peakComputeSet].name.c_str() : "-");
      return nlohmann::json();
    };
  FitVerdict v;
  for (auto _ : state) v = ipu::harness::checkFit(preset, options, sink);
  // The compiler's verdict (the worst tile and its occupants) goes beside the counters.
  if (!v.message.empty()) std::fprintf(stderr, "%s\n", v.message.c_str());
  state.counters["fits"] = v.fits() ? 1 : 0;
  state.counters["train_fits"] = v.train_fits ? 1 : 0;
  state.counters["worst_tile_kib"] = static_cast<double>(v.training.worst_tile_bytes) / 1024.0;
  state.counters["peak_MB"] = static_cast<double>(v.training.peak_live_bytes) / 1e6;
  state.counters["tiles_over"] = v.training.tiles_over;
  state.SetLabel(options.recompute ? "published checkpoints" : "no recomputation");
}
BENCHMARK(BM_ResNet50FitVerdictMk2)
    ->Arg(1)
    ->Arg(0)
    ->ArgName("recompute")
    ->Unit(benchmark::kSecond)
    ->UseRealTime()
    ->Iterations(1);

}  // namespace

BENCHMARK_MAIN();
