// ResNet on the compiler + engine against PyTorch goldens (tests/fixtures/resnet50, made by
// scripts/goldens/make_resnet_goldens.py from the same deterministic golden weights).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <memory>

#include <fmt/format.h>

#include "ipu_backend/compiler/compiler.h"
#include "ipu_backend/engine/engine.h"
#include "models/resnet50/golden_weights.h"
#include "models/resnet50/resnet50.h"
#include "tests/models/golden_io.h"

namespace ipu::models {
namespace {

using nlohmann::json;
using testing::decodeF32;
using testing::l2Rel;
using testing::maxRelToScale;

ResNetConfig configOf(const json& c) {
  ResNetConfig r;
  r.blocks = c.at("blocks").get<std::vector<int>>();
  r.baseWidth = c.at("base_width").get<int>();
  r.inputH = c.at("input_h").get<int>();
  r.inputW = c.at("input_w").get<int>();
  r.inputC = c.at("input_c").get<int>();
  r.numClasses = c.at("classes").get<int>();
  r.stem =
      c.at("stem") == "imagenet" ? ResNetConfig::Stem::ImageNet : ResNetConfig::Stem::SmallImage;
  r.labelSmoothing = c.at("label_smoothing").get<double>();
  return r;
}

// A compiled ResNet graph on an engine, with golden variables and golden inputs connected.
struct EngineRun {
  EngineRun(ResNetGraph g, EngineMode mode) : rg(std::move(g)) {
    CompileOptions opts;
    opts.checkMemory = false;  // the full model at batch 2 is not meant to fit one Mk2 here
    exe = std::make_shared<const Executable>(compile(rg.graph, Target::mk2(), opts));
    engine = std::make_unique<Engine>(exe, mode);
    const Graph& graph = exe->graph;
    for (const Tensor& t : graph.tensors()) {
      if (t.kind != TensorKind::Variable) continue;
      // Momentum buffers start at zero; everything else is golden.
      if (t.name.ends_with("/momentum"))
        engine->writeTensor(t.name, std::vector<float>(t.elements(), 0.0f));
      else
        engine->writeTensor(t.name,
                            goldenTensor(t.name, t.elements(), goldenSpecFor(t.name, t.shape)));
    }
    const Tensor& img = graph.tensor(rg.images);
    images = goldenImages(img.elements());
    labels = goldenLabels(rg.batch, rg.config.numClasses);
    engine->connectInput(rg.images, images.data());
    engine->connectInput(rg.labels, labels.data());
    if (rg.lr >= 0) engine->connectInput(rg.lr, &lr);
    for (int t : graph.outputs()) {
      outputs[t].assign(graph.tensor(t).elements(), 0.0f);
      engine->connectOutput(t, outputs[t].data());
    }
  }
  void run() { engine->run(); }
  const std::vector<float>& out(int t) const { return outputs.at(t); }
  const std::vector<float>& grad(const std::string& name) const {
    return outputs.at(rg.grads.at(rg.graph.get(name)));
  }

  ResNetGraph rg;
  std::shared_ptr<const Executable> exe;
  std::unique_ptr<Engine> engine;
  std::vector<float> images;
  std::vector<std::int32_t> labels;
  float lr = 0.0f;
  std::map<int, std::vector<float>> outputs;
};

// Training graph with every gradient streamed out (so the test can read them).
ResNetGraph trainingWithGrads(const ResNetConfig& c, i64 batch, const json& sgd) {
  ResNetGraph rg = buildForward(c, batch, BnMode::Train);
  appendGradients(rg);
  for (auto [p, g] : rg.grads) rg.graph.markOutput(g);
  appendSgd(
      rg, resnetSgdOptions(sgd.at("momentum").get<double>(), sgd.at("weight_decay").get<double>()));
  return rg;
}

ResNetGraph forwardWithGrads(const ResNetConfig& c, i64 batch,
                             const std::vector<std::string>& names) {
  ResNetGraph rg = buildForward(c, batch, BnMode::Train);
  appendGradients(rg);
  for (const auto& n : names) rg.graph.markOutput(rg.grads.at(rg.graph.get(n)));
  return rg;
}

double relErr(double a, double b) {
  return std::abs(a - b) / std::max(std::abs(b), 1e-30);
}

TEST(ResNetGolden, SmallTrainingMatchesPyTorch) {
  const json& gc = testing::resnetGoldens().at("cases").at("small");
  const json& sgd = gc.at("sgd");
  EngineRun r(trainingWithGrads(configOf(gc.at("config")), gc.at("batch").get<i64>(), sgd),
              EngineMode::Fused);
  r.lr = sgd.at("lr").get<float>();
  // Host fusions (engine/host_fusion.h): per unit bn1 + relu, bn2 + relu, the residual add +
  // relu and the backward of the first two; the stem's bn + relu and its backward; and the
  // gradient sum at each later unit's input (skip + first conv) with the ReLU backward of the
  // unit before it.
  int units = 0;
  for (int b : r.rg.config.blocks) units += b;
  EXPECT_EQ(r.engine->hostFusedOps(), 2 + 5 * units + (units - 1));
  const auto stepLosses = gc.at("step_losses").get<std::vector<double>>();
  double worstGrad = 0;
  std::string worstName;
  for (size_t step = 0; step < stepLosses.size(); ++step) {
    r.run();
    const double loss = r.out(r.rg.loss)[0];
    EXPECT_LT(relErr(loss, stepLosses[step]), 1e-4)
        << "step " << step << ": " << loss << " vs " << stepLosses[step];
    if (step != 0) continue;
    const double le = maxRelToScale(r.out(r.rg.logits), decodeF32(gc.at("logits")));
    EXPECT_LT(le, 1e-4);
    EXPECT_LT(relErr(loss, gc.at("loss").get<double>()), 1e-5);
    for (const auto& [name, ref] : gc.at("grads").items()) {
      const double e = maxRelToScale(r.grad(name), decodeF32(ref));
      EXPECT_LT(e, 1e-3) << name;
      if (e > worstGrad) worstGrad = e, worstName = name;
    }
    fmt::print("small: logits {:.2e}, worst grad {:.2e} ({})\n", le, worstGrad, worstName);
  }
  double worstStat = 0;
  for (const auto& [name, ref] : gc.at("final_running").items()) {
    const double e = maxRelToScale(r.engine->readFloats(name), decodeF32(ref));
    EXPECT_LT(e, 1e-4) << name;
    worstStat = std::max(worstStat, e);
  }
  const double be =
      maxRelToScale(r.engine->readFloats("fc1_bias"), decodeF32(gc.at("final_fc1_bias")));
  EXPECT_LT(be, 1e-4);

  // The trained weights move to the inference graph by name.
  EngineRun inf(buildInference(r.rg.config, r.rg.batch), EngineMode::Fused);
  EXPECT_EQ(inf.engine->hostFusedOps(), 1 + 3 * units) << "inference: the forward fusions";
  for (const Tensor& t : inf.exe->graph.tensors())
    if (t.kind == TensorKind::Variable)
      inf.engine->writeTensor(t.name, r.engine->readFloats(t.name));
  inf.run();
  const double ee = maxRelToScale(inf.out(inf.rg.logits), decodeF32(gc.at("eval_logits")));
  EXPECT_LT(ee, 1e-3);
  fmt::print("small after {} steps: running stats {:.2e}, fc1_bias {:.2e}, eval logits {:.2e}\n",
             stepLosses.size(), worstStat, be, ee);
}

TEST(ResNetGolden, SmallImageStemMatchesPyTorch) {
  const json& gc = testing::resnetGoldens().at("cases").at("small_mnist");
  std::vector<std::string> names;
  for (const auto& [name, _] : gc.at("grads").items()) names.push_back(name);
  EngineRun r(forwardWithGrads(configOf(gc.at("config")), gc.at("batch").get<i64>(), names),
              EngineMode::Fused);
  r.run();
  EXPECT_LT(maxRelToScale(r.out(r.rg.logits), decodeF32(gc.at("logits"))), 1e-4);
  EXPECT_LT(relErr(r.out(r.rg.loss)[0], gc.at("loss").get<double>()), 1e-5);
  for (const auto& [name, s] : gc.at("grads").items()) {
    const auto& g = r.grad(name);
    double sum = 0, sumSq = 0;
    for (float v : g) sum += v, sumSq += double(v) * v;
    EXPECT_EQ(static_cast<i64>(g.size()), s.at("count").get<i64>()) << name;
    const std::vector<float> head(g.begin(), g.begin() + std::min<size_t>(g.size(), 256));
    EXPECT_LT(maxRelToScale(head, decodeF32(s.at("head"))), 1e-3) << name;
    EXPECT_LT(std::abs(sum - s.at("sum").get<double>()), 1e-4 * s.at("sum_abs").get<double>())
        << name;
    EXPECT_LT(relErr(sumSq, s.at("sum_sq").get<double>()), 1e-3) << name;
  }
}

TEST(ResNetGolden, TileModeAgreesWithFusedMode) {
  const json& gc = testing::resnetGoldens().at("cases").at("small");
  const json& sgd = gc.at("sgd");
  const ResNetConfig c = configOf(gc.at("config"));
  // The golden batch (8). Not 2: the tile engine would be quicker, but
  // with 2 rows per channel (stage 4 is 1x1) batch norm outputs +-1 whatever its input, so the
  // gradient into it is exactly 0 and both modes return only rounding noise there.
  const i64 batch = 8;
  EngineRun fused(trainingWithGrads(c, batch, sgd), EngineMode::Fused);
  EngineRun tile(trainingWithGrads(c, batch, sgd), EngineMode::Tile);
  fused.lr = tile.lr = sgd.at("lr").get<float>();
  fused.run();
  tile.run();
  double worst = 0;
  std::string worstName;
  for (const auto& [t, v] : fused.outputs) {
    const double e = maxRelToScale(tile.out(t), v);
    EXPECT_LT(e, 1e-4) << fused.rg.graph.tensor(t).name;
    if (e > worst) worst = e, worstName = fused.rg.graph.tensor(t).name;
  }
  // Updated weights, momentum and running statistics.
  for (const Tensor& t : fused.exe->graph.tensors()) {
    if (t.kind != TensorKind::Variable) continue;
    const double e =
        maxRelToScale(tile.engine->readFloats(t.name), fused.engine->readFloats(t.name));
    EXPECT_LT(e, 1e-4) << t.name;
    if (e > worst) worst = e, worstName = t.name;
  }
  fmt::print("tile vs fused: worst {:.2e} ({})\n", worst, worstName);
}

TEST(ResNetGolden, FullResNet50MatchesTorchvision) {
  const json& gc = testing::resnetGoldens().at("cases").at("full");
  const json& tr = gc.at("train");
  const ResNetConfig c = configOf(gc.at("config"));
  std::vector<std::string> names;
  for (const auto& [name, _] : tr.at("grads").items()) names.push_back(name);
  const auto t0 = std::chrono::steady_clock::now();
  {
    EngineRun r(forwardWithGrads(c, tr.at("batch").get<i64>(), names), EngineMode::Fused);
    const auto t1 = std::chrono::steady_clock::now();
    r.run();
    const auto t2 = std::chrono::steady_clock::now();
    fmt::print("full train: compile+prepare {:.1f} s, step {:.1f} s\n",
               std::chrono::duration<double>(t1 - t0).count(),
               std::chrono::duration<double>(t2 - t1).count());
    const double le = maxRelToScale(r.out(r.rg.logits), decodeF32(tr.at("logits")));
    EXPECT_LT(le, 1e-4);
    EXPECT_LT(relErr(r.out(r.rg.loss)[0], tr.at("loss").get<double>()), 1e-5);
    fmt::print("full train: logits {:.2e}\n", le);
    for (const auto& [name, s] : tr.at("grads").items()) {
      // The reference is float64; float32 itself is only `f32_l2_rel` close to it (a few relu
      // inputs within rounding of zero flip): allow 5x that, and at least 1e-4.
      const double tol = std::max(1e-4, 5 * s.at("f32_l2_rel").get<double>());
      const auto& g = r.grad(name);
      double sum = 0, sumSq = 0;
      for (float v : g) sum += v, sumSq += double(v) * v;
      ASSERT_EQ(static_cast<i64>(g.size()), s.at("count").get<i64>()) << name;
      const double he = l2Rel(g, decodeF32(s.at("head")));
      const double se = std::abs(sum - s.at("sum").get<double>()) / s.at("sum_abs").get<double>();
      const double qe = relErr(sumSq, s.at("sum_sq").get<double>());
      EXPECT_LT(he, tol) << name;
      EXPECT_LT(se, tol) << name;
      EXPECT_LT(qe, 2 * tol) << name;
      fmt::print("  {:32s} head l2 {:.2e}  sum {:.2e}  sum_sq {:.2e}  (tol {:.1e})\n", name, he, se,
                 qe, tol);
    }
  }
  const json& ev = gc.at("eval");
  EngineRun e(buildInference(c, ev.at("batch").get<i64>()), EngineMode::Fused);
  e.run();
  const double ee = maxRelToScale(e.out(e.rg.logits), decodeF32(ev.at("logits")));
  EXPECT_LT(ee, 1e-4);
  fmt::print("full eval: logits {:.2e}\n", ee);
}

}  // namespace
}  // namespace ipu::models
