// EfficientNet on the compiler + engine against torchvision (tests/fixtures/efficientnet_b4,
// made by scripts/goldens/make_efficientnet_goldens.py from the same deterministic golden
// weights, copied into torchvision's modules by name). Also: tile mode equals fused mode, and
// training-mode stochastic depth.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <memory>

#include <fmt/format.h>

#include "ipu_backend/compiler/compiler.h"
#include "ipu_backend/engine/engine.h"
#include "models/efficientnet_b4/efficientnet.h"
#include "models/resnet50/golden_weights.h"
#include "tests/models/golden_io.h"

namespace ipu::models::efficientnet {
namespace {

using nlohmann::json;
using testing::decodeF32;
using testing::l2Rel;
using testing::maxRelToScale;

const json& goldens() {
  static const json j = [] {
    const std::string path =
        std::string(IPU_SOURCE_DIR) + "/tests/fixtures/efficientnet_b4/efficientnet_goldens.json";
    std::ifstream f(path);
    if (!f) throw std::runtime_error("cannot open " + path);
    return json::parse(f);
  }();
  return j;
}

// The golden value spec of a variable by torchvision name and our shape (the generator's
// golden_spec): convs and the classifier uniform with variance 1/fan_in, norm weights and
// running variances 1 +- 0.25, biases and running means +-0.1.
GoldenSpec specOf(const std::string& name, const Shape& s) {
  if (name.ends_with(".weight") && s.size() == 4)
    return {0.0, 2.0 * std::sqrt(3.0 / static_cast<double>(s[1] * s[2] * s[3]))};
  if (name.ends_with(".weight") && s.size() == 2)
    return {0.0, 2.0 * std::sqrt(3.0 / static_cast<double>(s[1]))};
  if (name.ends_with(".weight") || name.ends_with(".running_var")) return {1.0, 0.5};
  if (name.ends_with(".bias") || name.ends_with(".running_mean")) return {0.0, 0.2};
  throw std::runtime_error("no golden spec for " + name);
}

Config configOf(const json& c) {
  Config r = c.at("stages") == "b0" ? Config::b4() : Config::small();
  r.widthMult = c.at("width").get<double>();
  r.depthMult = c.at("depth").get<double>();
  r.inputH = r.inputW = c.at("input").get<int>();
  r.numClasses = c.at("classes").get<int>();
  r.norm = c.at("norm") == "group" ? Norm::Group : Norm::Batch;
  if (c.at("g16").get<bool>()) r.groupSize = 16, r.expandRatioOverride = 4;
  r.labelSmoothing = c.at("label_smoothing").get<double>();
  r.dropout = r.stochasticDepth = 0;  // the goldens run without them
  return r;
}

// A compiled EfficientNet graph on an engine, golden variables and inputs connected.
struct EngineRun {
  EngineRun(EfficientNetGraph g, EngineMode mode) : eg(std::move(g)) {
    CompileOptions opts;
    opts.checkMemory = false;  // B4 is not meant to fit one Mk2 here
    exe = std::make_shared<const Executable>(compile(eg.graph, Target::mk2(), opts));
    engine = std::make_unique<Engine>(exe, mode);
    for (const Tensor& t : exe->graph.tensors())
      if (t.kind == TensorKind::Variable)
        engine->writeTensor(t.name, goldenTensor(t.name, t.elements(), specOf(t.name, t.shape)));
    images = goldenImages(exe->graph.tensor(eg.images).elements());
    labels = goldenLabels(eg.batch, eg.config.numClasses);
    engine->connectInput(eg.images, images.data());
    engine->connectInput(eg.labels, labels.data());
    if (eg.dropoutKey >= 0) engine->connectInput(eg.dropoutKey, key.data());
    for (int t : exe->graph.outputs()) {
      outputs[t].assign(exe->graph.tensor(t).elements(), 0.0f);
      engine->connectOutput(t, outputs[t].data());
    }
  }
  void run() { engine->run(); }
  const std::vector<float>& out(int t) const { return outputs.at(t); }
  const std::vector<float>& grad(const std::string& name) const {
    return outputs.at(eg.grads.at(eg.graph.get(name)));
  }

  EfficientNetGraph eg;
  std::shared_ptr<const Executable> exe;
  std::unique_ptr<Engine> engine;
  std::vector<float> images;
  std::vector<std::int32_t> labels;
  std::array<std::int32_t, 2> key = {0, 0};
  std::map<int, std::vector<float>> outputs;
};

EfficientNetGraph trainingWithGrads(const Config& c, i64 batch) {
  EfficientNetGraph eg = buildForward(c, batch, Mode::Train);
  appendGradients(eg);
  for (auto [p, g] : eg.grads) eg.graph.markOutput(g);
  return eg;
}

double maxAbs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::abs(x)));
  return m;
}

double relErr(double a, double b) {
  return std::abs(a - b) / std::max(std::abs(b), 1e-30);
}

// Logits, loss, every gradient and the updated running statistics of one training step.
void checkTrainingCase(const std::string& caseName) {
  const json& gc = goldens().at("cases").at(caseName);
  EngineRun r(trainingWithGrads(configOf(gc.at("config")), gc.at("batch").get<i64>()),
              EngineMode::Fused);
  r.run();
  const double le = maxRelToScale(r.out(r.eg.logits), decodeF32(gc.at("logits")));
  EXPECT_LT(le, 1e-4);
  EXPECT_LT(relErr(r.out(r.eg.loss)[0], gc.at("loss").get<double>()), 1e-5);
  // Scale of the whole gradient: some gradients are exactly 0 in exact arithmetic (the project
  // norm's bias, when every path after it goes through a train-mode batch norm); those must be
  // rounding noise against the gradients' scale.
  double scale = 0;
  for (const auto& [name, s] : gc.at("grads").items())
    scale = std::max(scale, std::sqrt(s.at("sum_sq").get<double>()));
  ASSERT_EQ(gc.at("grads").size(), r.eg.params.size());
  double worst = 0;
  std::string worstName;
  for (const auto& [name, s] : gc.at("grads").items()) {
    const auto& g = r.grad(name);
    ASSERT_EQ(static_cast<i64>(g.size()), s.at("count").get<i64>()) << name;
    double sum = 0, sumSq = 0;
    for (float v : g) sum += v, sumSq += double(v) * v;
    const double norm = std::sqrt(s.at("sum_sq").get<double>());
    if (norm < 1e-9 * scale) {
      EXPECT_LT(std::sqrt(sumSq), 1e-6 * scale) << name << ": exactly 0 in float64";
      continue;
    }
    const double he = l2Rel(g, decodeF32(s.at("head")));
    const double se = std::abs(sum - s.at("sum").get<double>()) / s.at("sum_abs").get<double>();
    const double qe = relErr(std::sqrt(sumSq), norm);
    const double e = std::max({he, se, qe});
    EXPECT_LT(e, 1e-4) << name << ": head " << he << " sum " << se << " norm " << qe;
    if (e > worst) worst = e, worstName = name;
  }
  double worstStat = 0;
  for (const auto& [name, ref] : gc.at("running").items()) {
    const double e = maxRelToScale(r.engine->readFloats(name), decodeF32(ref));
    EXPECT_LT(e, 1e-5) << name;
    worstStat = std::max(worstStat, e);
  }
  fmt::print("{}: logits {:.2e}, worst gradient {:.2e} ({}), running stats {:.2e}\n", caseName, le,
             worst, worstName, worstStat);
}

TEST(EfficientNetGolden, SmallTrainingStepMatchesTorchvision) {
  checkTrainingCase("small");
}
TEST(EfficientNetGolden, SmallG16TrainingStepMatchesGroupConvTorchvision) {
  checkTrainingCase("small_g16");
}
TEST(EfficientNetGolden, SmallGroupNormTrainingStepMatchesTorchvision) {
  checkTrainingCase("small_gn");
}

// B4 itself (or G16) in training mode at 64x64, batch 2 (the last stage is 2x2: 8 rows per
// batch-norm channel): loss, logits and a sample of gradients against float64. float32 is
// itself only `f32_l2_rel` close to float64 on the deep gradients: allow 5x that, at least 1e-4.
void checkB4TrainingCase(const std::string& caseName) {
  const json& gc = goldens().at("cases").at(caseName);
  Config c = configOf(gc.at("config"));
  EfficientNetGraph eg = buildForward(c, gc.at("batch").get<i64>(), Mode::Train);
  appendGradients(eg);
  for (const auto& [name, _] : gc.at("grads").items())
    eg.graph.markOutput(eg.grads.at(eg.graph.get(name)));
  EngineRun r(std::move(eg), EngineMode::Fused);
  r.run();
  const json& dev = gc.at("f32_dev");
  const double le = maxRelToScale(r.out(r.eg.logits), decodeF32(gc.at("logits")));
  EXPECT_LT(le, std::max(1e-4, 5 * dev.at("logits").get<double>()));
  EXPECT_LT(relErr(r.out(r.eg.loss)[0], gc.at("loss").get<double>()),
            std::max(1e-5, 5 * dev.at("loss").get<double>()));
  double worst = 0;
  std::string worstName;
  for (const auto& [name, s] : gc.at("grads").items()) {
    const double tol = std::max(1e-4, 5 * s.at("f32_l2_rel").get<double>());
    const auto& g = r.grad(name);
    ASSERT_EQ(static_cast<i64>(g.size()), s.at("count").get<i64>()) << name;
    double sum = 0, sumSq = 0;
    for (float v : g) sum += v, sumSq += double(v) * v;
    const double he = l2Rel(g, decodeF32(s.at("head")));
    const double se = std::abs(sum - s.at("sum").get<double>()) / s.at("sum_abs").get<double>();
    const double qe = relErr(std::sqrt(sumSq), std::sqrt(s.at("sum_sq").get<double>()));
    EXPECT_LT(he, tol) << name;
    EXPECT_LT(se, tol) << name;
    EXPECT_LT(qe, tol) << name;
    if (std::max({he, se, qe}) / tol > worst)
      worst = std::max({he, se, qe}) / tol, worstName = name;
  }
  fmt::print("{}: logits {:.2e}, worst gradient at {:.2f} of its tolerance ({})\n", caseName, le,
             worst, worstName);
}

TEST(EfficientNetGolden, B4TrainingStepMatchesTorchvision) {
  checkB4TrainingCase("b4_train");
}
TEST(EfficientNetGolden, G16TrainingStepMatchesGroupConvTorchvision) {
  checkB4TrainingCase("g16_train");
}

void checkEvalCase(const std::string& caseName) {
  const json& gc = goldens().at("cases").at(caseName);
  const auto t0 = std::chrono::steady_clock::now();
  EngineRun r(buildForward(configOf(gc.at("config")), gc.at("batch").get<i64>(), Mode::Inference),
              EngineMode::Fused);
  const auto t1 = std::chrono::steady_clock::now();
  r.run();
  const auto t2 = std::chrono::steady_clock::now();
  const double le = maxRelToScale(r.out(r.eg.logits), decodeF32(gc.at("logits")));
  EXPECT_LT(le, 1e-4);
  fmt::print("{}: logits {:.2e} (compile {:.1f} s, step {:.2f} s)\n", caseName, le,
             std::chrono::duration<double>(t1 - t0).count(),
             std::chrono::duration<double>(t2 - t1).count());
}

TEST(EfficientNetGolden, B4EvalLogitsMatchTorchvision) {
  checkEvalCase("b4_eval");
}
TEST(EfficientNetGolden, G16EvalLogitsMatchGroupConvTorchvision) {
  checkEvalCase("g16_eval");
}
// 380x380, the benchmark resolution: ~4 s (3.5 s of it compiling); left to the nightly
// (.ci/run CI_NIGHTLY_ONLY, scripts/nightly.sh NIGHTLY_LONG_TESTS_REGEX).
TEST(EfficientNetNightly, B4EvalLogitsAt380MatchTorchvision) {
  checkEvalCase("b4_eval_380");
}

// Every output and updated variable of a training step, tile against fused.
void expectTileEqualsFused(const Config& c, i64 batch, std::array<std::int32_t, 2> key) {
  EngineRun fused(trainingWithGrads(c, batch), EngineMode::Fused);
  EngineRun tile(trainingWithGrads(c, batch), EngineMode::Tile);
  fused.key = tile.key = key;
  fused.run();
  tile.run();
  // Gradients that are exactly 0 in exact arithmetic (a project norm's bias when every path
  // after it goes through a train-mode batch norm) are rounding noise in both modes: they are
  // compared against the scale of all gradients.
  double gradScale = 0;
  for (auto [p, g] : fused.eg.grads) gradScale = std::max(gradScale, maxAbs(fused.out(g)));
  double worst = 0;
  std::string worstName;
  for (const auto& [t, v] : fused.outputs) {
    const double own = maxAbs(v);
    const double e =
        own < 1e-6 * gradScale ? maxAbs(tile.out(t)) / gradScale : maxRelToScale(tile.out(t), v);
    EXPECT_LT(e, 1e-4) << fused.eg.graph.tensor(t).name;
    if (e > worst) worst = e, worstName = fused.eg.graph.tensor(t).name;
  }
  for (int s : fused.eg.runningStats) {
    const std::string& name = fused.eg.graph.tensor(s).name;
    const double e = maxRelToScale(tile.engine->readFloats(name), fused.engine->readFloats(name));
    EXPECT_LT(e, 1e-5) << name;
  }
  fmt::print("tile vs fused: worst {:.2e} ({})\n", worst, worstName);
}

TEST(EfficientNetGolden, TileModeAgreesWithFusedMode) {
  Config c = configOf(goldens().at("cases").at("small").at("config"));
  expectTileEqualsFused(c, 4, {0, 0});
  c.groupSize = 16, c.expandRatioOverride = 4;
  expectTileEqualsFused(c, 4, {0, 0});
}

// Training mode with stochastic depth and dropout: tile equals fused (same counter-based
// draws), a step's draws are deterministic, and another step draws other masks.
TEST(EfficientNetGolden, StochasticDepthTileEqualsFusedAndVariesByStep) {
  Config c = Config::small();
  c.stochasticDepth = 0.5;
  c.dropout = 0.4;
  expectTileEqualsFused(c, 8, {3, 16});
  EngineRun r(trainingWithGrads(c, 8), EngineMode::Fused);
  double loss[3][2] = {};
  for (int step : {0, 1, 2})
    for (int rep : {0, 1}) {
      r.key = {step, 0};
      r.run();
      loss[step][rep] = r.out(r.eg.loss)[0];
    }
  for (int step : {0, 1, 2}) EXPECT_EQ(loss[step][0], loss[step][1]) << "step " << step;
  EXPECT_NE(loss[0][0], loss[1][0]);
  EXPECT_NE(loss[1][0], loss[2][0]);
  // Without dropout the same graph gives the deterministic loss whatever the key.
  Config off = c;
  off.stochasticDepth = off.dropout = 0;
  EngineRun d(trainingWithGrads(off, 8), EngineMode::Fused);
  d.run();
  EXPECT_EQ(d.eg.dropoutKey, -1);
  EXPECT_NE(d.out(d.eg.loss)[0], loss[0][0]);
}

// The model under 16-bit policies (bf16 and Graphcore's 16.16: depthwise and G16 convs in
// 16 bits): inference logits within 16-bit rounding of float32, tile mode equal to fused mode.
TEST(EfficientNetGolden, SixteenBitPoliciesStayCloseToFloat32) {
  for (bool g16 : {false, true}) {
    Config c = configOf(goldens().at("cases").at("small").at("config"));
    if (g16) c.groupSize = 16, c.expandRatioOverride = 4;
    EngineRun f32(buildForward(c, 4, Mode::Inference), EngineMode::Fused);
    f32.run();
    for (const char* preset : {"bf16", "16.16"}) {
      SCOPED_TRACE(fmt::format("{} {}", g16 ? "G16" : "B4-small", preset));
      const auto policy = precision::PrecisionPolicy::parse(preset);
      EngineRun fused(withPrecision(buildForward(c, 4, Mode::Inference), policy),
                      EngineMode::Fused);
      EngineRun tile(withPrecision(buildForward(c, 4, Mode::Inference), policy), EngineMode::Tile);
      fused.run();
      tile.run();
      const double e = maxRelToScale(fused.out(fused.eg.logits), f32.out(f32.eg.logits));
      // bf16 keeps 8 significant bits (2^-8 = 3.9e-3 per rounding), f16 11.
      EXPECT_LT(e, std::string(preset) == "bf16" ? 2e-2 : 5e-3);
      EXPECT_GT(e, 0.0) << "the policy changed nothing";
      const double te = maxRelToScale(tile.out(tile.eg.logits), fused.out(fused.eg.logits));
      EXPECT_LT(te, 1e-2);
      fmt::print("{} {}: logits vs f32 {:.2e}, tile vs fused {:.2e}\n", g16 ? "G16" : "small",
                 preset, e, te);
    }
  }
}

// Stochastic depth draws per sample: a block's branch is all zero for a sample with its rate,
// otherwise it is the branch scaled by 1 / (1 - rate). 8 samples x 50 steps = 400 draws.
TEST(EfficientNetGolden, StochasticDepthDropsWholeSamplesAtTheBlockRate) {
  Config c = Config::small();
  c.stochasticDepth = 0.5;
  c.dropout = 0;
  EfficientNetGraph eg = buildForward(c, 8, Mode::Train);
  const std::string name = "features.3.1.stochastic_depth";  // global block 4 of 5: rate 0.4
  const int dropped = eg.graph.get(name);
  const int branch = eg.graph.op(eg.graph.tensor(dropped).producer).inputs[0];
  eg.graph.markOutput(dropped);
  eg.graph.markOutput(branch);
  EngineRun r(std::move(eg), EngineMode::Fused);
  const double rate = 0.5 * 4 / 5;
  const i64 per = r.exe->graph.tensor(dropped).elements() / 8;
  int drops = 0, draws = 0;
  for (int step = 0; step < 50; ++step) {
    r.key = {step, 0};
    r.run();
    const auto& y = r.out(dropped);
    const auto& x = r.out(branch);
    for (i64 n = 0; n < 8; ++n, ++draws) {
      bool zero = true;
      double err = 0;
      for (i64 i = n * per; i < (n + 1) * per; ++i) {
        zero = zero && y[i] == 0.0f;
        err = std::max(err, std::abs(y[i] - x[i] / (1 - rate)));
      }
      if (zero) {
        ++drops;
      } else {
        EXPECT_LT(err, 1e-5 * (1 + maxAbs(x))) << "step " << step << " sample " << n;
      }
    }
  }
  // Binomial(400, 0.4): mean 160, sd 9.8; 4 sd either side.
  EXPECT_NEAR(drops, rate * draws, 4 * std::sqrt(draws * rate * (1 - rate)));
  fmt::print("{}: {} of {} samples dropped (rate {})\n", name, drops, draws, rate);
}

}  // namespace
}  // namespace ipu::models::efficientnet
