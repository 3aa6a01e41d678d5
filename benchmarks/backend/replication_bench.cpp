// Host time of one data-parallel training step of the small CNN for R = 1, 2, 4, 8, 16 replicas
// at a fixed micro-batch: R engines (one thread each, 1 OpenMP thread per replica) joined by the
// in-process ring collective. The emulator does R replicas' work on one host, so the time should
// grow linearly with R; "ms/replica" shows how close (flat = linear). span:1 runs the same step
// with batch norm over all R replicas (model_bn_span = R x micro-batch): the cost of the
// cross-replica statistics.
#include <benchmark/benchmark.h>

#include <chrono>

#include "datasets/image_dataset.h"
#include "harness/image_task.h"
#include "ipu_backend/kernels/fused.h"
#include "models/small_cnn/small_cnn.h"

namespace {

using namespace ipu;

constexpr std::int64_t kMicroBatch = 16;

void BM_ReplicatedSmallCnnStep(benchmark::State& state) {
  const int replicas = static_cast<int>(state.range(0));
  kernels::fused::setNumThreads(1);  // R = 1 too: one thread per replica
  models::SmallCnnConfig cfg;
  if (state.range(1) != 0) cfg.bnSpanReplicas = replicas;
  harness::TrainerOptions opts;
  opts.batch = kMicroBatch;
  opts.replicas = replicas;
  opts.threadsPerReplica = 1;
  harness::Trainer trainer(models::buildSmallCnnTraining(cfg, kMicroBatch, SgdOptions{}),
                           models::buildSmallCnnInference(cfg, kMicroBatch), opts);
  trainer.initialise(models::initSmallCnn(trainer.trainExecutable().graph, 1));
  // Exactly one global batch: one step per trainEpoch.
  auto data = datasets::makeSyntheticDataset({kMicroBatch * replicas, 28, 28, 1, 10, 1});
  auto norm = datasets::Normalization::fashionMnist();
  double seconds = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    trainImageEpoch(trainer, data, norm, 1, [](std::int64_t) { return 0.01f; });
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  const double steps = static_cast<double>(state.iterations());
  state.counters["ms_per_replica"] = 1000.0 * seconds / steps / replicas;
  state.counters["images/s"] =
      benchmark::Counter(kMicroBatch * replicas * steps, benchmark::Counter::kIsRate);
}

BENCHMARK(BM_ReplicatedSmallCnnStep)
    ->ArgsProduct({{1, 2, 4, 8, 16}, {0, 1}})
    ->ArgNames({"replicas", "span"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
