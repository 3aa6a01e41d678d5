// Host time of run_benchmark's fit verdict for full ResNet-50 at the published POD16
// configuration (micro-batch 20, FP16.16, accumulation 10, IPU-Mk2): the training program with
// the published recomputation checkpoints, or without them, then the evaluation program; what
// `run_benchmark --project-only` spends before pricing. Counters: whether it fits, the training
// program's worst tile (KiB of 624) and its all-tile peak (MB); the compiler's verdict (the
// worst tile and its occupants at its peak) goes to stderr.
#include <benchmark/benchmark.h>

#include <cstdio>

#include "harness/full_scale_projection.h"
#include "harness/pod_presets.h"

namespace {

using ipu::harness::FitOptions;
using ipu::harness::FitVerdict;

void BM_ResNet50FitVerdictMk2(benchmark::State& state) {
  const ipu::harness::PodPreset& preset =
      ipu::harness::findPreset(ipu::harness::Benchmark::kResNet50, 16, ipu::harness::Scale::kFull);
  FitOptions options;
  options.recompute = state.range(0) != 0;
  FitVerdict v;
  for (auto _ : state) v = ipu::harness::checkFit(preset, options);
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
