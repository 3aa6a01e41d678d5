// One training step of the small CNN (forward, backward, SGD update) through the backend, in
// fused mode and in tile mode, plus the compile time of the same graph for one Mk2 IPU.
#include <benchmark/benchmark.h>

#include "datasets/image_dataset.h"
#include "harness/image_task.h"
#include "ipu_backend/kernels/fused.h"
#include "models/small_cnn/small_cnn.h"

namespace {

using namespace ipu;

void smallCnnStep(benchmark::State& state, EngineMode mode) {
  const std::int64_t batch = state.range(0);
  models::SmallCnnConfig cfg;
  harness::TrainerOptions opts;
  opts.batch = batch;
  opts.mode = mode;
  harness::Trainer trainer(models::buildSmallCnnTraining(cfg, batch, SgdOptions{}),
                           models::buildSmallCnnInference(cfg, batch), opts);
  trainer.initialise(models::initSmallCnn(trainer.trainExecutable().graph, 1));
  auto data = datasets::makeSyntheticDataset({batch, 28, 28, 1, 10, 1});
  auto norm = datasets::Normalization::fashionMnist();
  for (auto _ : state)
    trainImageEpoch(trainer, data, norm, 1,
                    [](std::int64_t) { return 0.01f; });  // exactly one step
  state.counters["images/s"] =
      benchmark::Counter(double(batch) * double(state.iterations()), benchmark::Counter::kIsRate);
}

void BM_SmallCnnStepFused(benchmark::State& state) {
  smallCnnStep(state, EngineMode::Fused);
}
void BM_SmallCnnStepTile(benchmark::State& state) {
  smallCnnStep(state, EngineMode::Tile);
}

void BM_CompileSmallCnnTraining(benchmark::State& state) {
  models::SmallCnnConfig cfg;
  auto cg = models::buildSmallCnnTraining(cfg, state.range(0), SgdOptions{});
  for (auto _ : state) benchmark::DoNotOptimize(compile(cg.graph, Target::mk2()));
}

BENCHMARK(BM_SmallCnnStepFused)->Arg(64)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SmallCnnStepTile)->Arg(64)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CompileSmallCnnTraining)->Arg(64)->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  kernels::fused::setNumThreads(2);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
