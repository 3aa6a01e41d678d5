// End to end: the small CNN trained through the backend on real Fashion-MNIST, and one training
// step of the same model in tile mode against fused mode.
#include <gtest/gtest.h>

#include <filesystem>

#include "datasets/fashion_mnist.h"
#include "harness/image_task.h"
#include "ipu_backend/kernels/fused.h"
#include "models/small_cnn/small_cnn.h"

namespace ipu::harness {
namespace {

bool haveFashionMnist() {
  return std::filesystem::exists(std::string(datasets::kDefaultFashionMnistDir) +
                                 "/train-images-idx3-ubyte.gz");
}

TEST(SmallCnnEndToEnd, ReachesEightyFivePercentOnFashionMnist) {
  ASSERT_TRUE(haveFashionMnist())
      << "Debian's dataset-fashion-mnist is required (scripts/setup.sh)";
  kernels::fused::setNumThreads(2);
  auto train =
      datasets::loadFashionMnist(datasets::kDefaultFashionMnistDir, datasets::Split::kTrain);
  auto test = datasets::loadFashionMnist(datasets::kDefaultFashionMnistDir, datasets::Split::kTest);
  const std::int64_t batch = 64;
  models::SmallCnnConfig cfg;
  SgdOptions sgd;
  sgd.momentum = 0.9;
  sgd.weightDecay = 5e-4;
  TrainerOptions opts;
  opts.batch = batch;
  Trainer trainer(models::buildSmallCnnTraining(cfg, batch, sgd),
                  models::buildSmallCnnInference(cfg, batch), opts);
  EXPECT_TRUE(trainer.trainExecutable().report()["memory"]["fits"].get<bool>());
  trainer.initialise(models::initSmallCnn(trainer.trainExecutable().graph, 1));
  auto norm = datasets::Normalization::fashionMnist();
  double before = evaluateImageTopOne(trainer, test, norm, 2000);
  const std::int64_t steps = train.count / batch;
  auto lr = [&](std::int64_t s) { return static_cast<float>(0.05 * (1.0 - double(s) / steps)); };
  EpochStats st = trainImageEpoch(trainer, train, norm, 1, lr);
  ASSERT_TRUE(st.finite);
  double acc = evaluateImageTopOne(trainer, test, norm);
  std::printf("untrained accuracy %.4f, after one epoch %.4f (loss %.4f, %.1f s)\n", before, acc,
              st.meanLoss, st.seconds);
  EXPECT_LT(before, 0.3);
  EXPECT_GE(acc, 0.85);
}

TEST(SmallCnnEndToEnd, TileModeTrainingStepEqualsFusedMode) {
  kernels::fused::setNumThreads(2);
  auto data = datasets::makeSyntheticDataset({64, 28, 28, 1, 10, 3});
  models::SmallCnnConfig cfg;
  cfg.conv1Channels = 4;
  cfg.conv2Channels = 8;
  SgdOptions sgd;
  std::vector<std::vector<float>> weights[2];
  double losses[2] = {0, 0};
  for (int m = 0; m < 2; ++m) {
    TrainerOptions opts;
    opts.batch = 8;
    opts.mode = m == 0 ? EngineMode::Fused : EngineMode::Tile;
    opts.target = Target::small(64, 256 * 1024);
    Trainer trainer(models::buildSmallCnnTraining(cfg, 8, sgd),
                    models::buildSmallCnnInference(cfg, 8), opts);
    trainer.initialise(models::initSmallCnn(trainer.trainExecutable().graph, 5));
    auto st = trainImageEpoch(
        trainer, data, datasets::Normalization::unit(1), 1, [](std::int64_t) { return 0.1f; },
        16);  // two steps
    losses[m] = st.meanLoss;
    for (const Tensor& t : trainer.trainExecutable().graph.tensors())
      if (t.kind == TensorKind::Variable)
        weights[m].push_back(trainer.trainEngine().readFloats(t.id));
  }
  EXPECT_NEAR(losses[0], losses[1], 1e-4 * std::max(1.0, std::abs(losses[0])));
  ASSERT_EQ(weights[0].size(), weights[1].size());
  for (size_t v = 0; v < weights[0].size(); ++v) {
    double scale = 1e-6;
    for (float x : weights[0][v]) scale = std::max(scale, static_cast<double>(std::abs(x)));
    for (size_t i = 0; i < weights[0][v].size(); ++i)
      ASSERT_NEAR(weights[0][v][i], weights[1][v][i], 1e-4 * scale) << "variable " << v;
  }
}

// f16 compute with static loss scaling ("16.32": f16 activations and gradients, f32 master
// weights, stochastic rounding, loss scale 128) against f32: one epoch each from the same
// initial weights and data order; the f16 run must reach the f32 accuracy within one point.
TEST(SmallCnnEndToEnd, SixteenBitTrainingWithLossScalingMatchesFloat32Accuracy) {
  ASSERT_TRUE(haveFashionMnist())
      << "Debian's dataset-fashion-mnist is required (scripts/setup.sh)";
  kernels::fused::setNumThreads(2);
  auto train =
      datasets::loadFashionMnist(datasets::kDefaultFashionMnistDir, datasets::Split::kTrain);
  auto test = datasets::loadFashionMnist(datasets::kDefaultFashionMnistDir, datasets::Split::kTest);
  const std::int64_t batch = 64;
  models::SmallCnnConfig cfg;
  SgdOptions sgd;
  sgd.momentum = 0.9;
  sgd.weightDecay = 5e-4;
  const std::int64_t steps = train.count / batch;
  auto lr = [&](std::int64_t s) { return static_cast<float>(0.05 * (1.0 - double(s) / steps)); };
  auto norm = datasets::Normalization::fashionMnist();
  double acc[2] = {0, 0};
  const char* presets[2] = {"fp32", "16.32"};
  for (int k = 0; k < 2; ++k) {
    auto policy = precision::PrecisionPolicy::parse(presets[k]);
    TrainerOptions opts;
    opts.batch = batch;
    Trainer trainer(models::buildSmallCnnTraining(cfg, batch, sgd, policy),
                    models::buildSmallCnnInference(cfg, batch, policy), opts);
    trainer.initialise(models::initSmallCnn(trainer.trainExecutable().graph, 1));
    EpochStats st = trainImageEpoch(trainer, train, norm, 1, lr);
    ASSERT_TRUE(st.finite) << presets[k];
    acc[k] = evaluateImageTopOne(trainer, test, norm);
    std::printf(
        "%s: accuracy %.4f after one epoch (loss %.4f, %.1f s, loss scale %g, %lld "
        "skipped steps)\n",
        presets[k], acc[k], st.meanLoss, st.seconds, st.lossScale,
        static_cast<long long>(st.skippedSteps));
    if (k == 1) {
      const Graph& g = trainer.trainExecutable().graph;
      EXPECT_EQ(g.tensor(g.get("conv1")).dtype, DType::F16) << "f16 activations";
      EXPECT_EQ(st.lossScale, 128.0f) << "static loss scale";
    }
  }
  EXPECT_GE(acc[1], acc[0] - 0.01) << "16.32 must reach the f32 accuracy within one point";
}

}  // namespace
}  // namespace ipu::harness
