// ResNet-50 graph structure: canonical names, parameter count, shapes, the text round trip,
// host initialisation and the golden generator. Needs only the IR and autodiff.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "harness/mlperf_events.h"
#include "ipu_backend/ir/text.h"
#include "models/resnet50/golden_weights.h"
#include "models/resnet50/resnet50.h"
#include "tests/models/golden_io.h"

namespace ipu::models {
namespace {

int countOps(const Graph& g, OpKind k) {
  return static_cast<int>(
      std::count_if(g.ops().begin(), g.ops().end(), [&](const Op& op) { return op.kind == k; }));
}

TEST(ResNet50, ParameterNamesAreTheMlperfCanonicalNames) {
  const ResNetGraph rg = buildForward(ResNetConfig::resnet50(), 1, BnMode::Train);
  const auto& canonical = harness::resnet50CanonicalTensorNames();
  ASSERT_EQ(canonical.size(), 161u);
  EXPECT_EQ(rg.paramNames(), canonical);
  EXPECT_EQ(resnetParameterNames(ResNetConfig::resnet50()), canonical);
  // The Fashion-MNIST adaptation changes shapes, not names.
  EXPECT_EQ(buildForward(ResNetConfig::fashionMnist(), 1, BnMode::Train).paramNames(), canonical);
}

TEST(ResNet50, ParameterCountIsTorchvisions) {
  EXPECT_EQ(buildForward(ResNetConfig::resnet50(), 1, BnMode::Train).parameterCount(), 25'557'032);
}

TEST(ResNet50, Shapes) {
  const ResNetGraph rg = buildForward(ResNetConfig::resnet50(), 2, BnMode::Train);
  const Graph& g = rg.graph;
  auto shape = [&](const std::string& n) { return g.tensor(g.get(n)).shape; };
  EXPECT_EQ(shape("images"), (Shape{2, 224, 224, 3}));
  EXPECT_EQ(g.tensor(rg.labels).dtype, DType::I32);
  EXPECT_EQ(shape("conv0_weight"), (Shape{64, 7, 7, 3}));  // OHWI
  EXPECT_EQ(shape("conv0"), (Shape{2, 112, 112, 64}));
  EXPECT_EQ(shape("pool0"), (Shape{2, 56, 56, 64}));
  EXPECT_EQ(shape("stage1_unit1_conv1_weight"), (Shape{64, 1, 1, 64}));
  EXPECT_EQ(shape("stage1_unit1_conv1sc_weight"), (Shape{256, 1, 1, 64}));
  // v1.5: the stride-2 is on conv2 of the first unit of stages 2-4.
  EXPECT_EQ(shape("stage2_unit1_conv1"), (Shape{2, 56, 56, 128}));
  EXPECT_EQ(shape("stage2_unit1_conv2_weight"), (Shape{128, 3, 3, 128}));
  EXPECT_EQ(shape("stage2_unit1_conv2"), (Shape{2, 28, 28, 128}));
  EXPECT_EQ(shape("stage2_unit1_conv1sc"), (Shape{2, 28, 28, 512}));
  EXPECT_EQ(shape("stage4_unit1_conv1sc_weight"), (Shape{2048, 1, 1, 1024}));
  EXPECT_EQ(shape("stage4_unit3_conv3_weight"), (Shape{2048, 1, 1, 512}));
  EXPECT_EQ(shape("stage4_unit3_relu3"), (Shape{2, 7, 7, 2048}));
  EXPECT_EQ(shape("fc1_weight"), (Shape{2048, 1000}));
  EXPECT_EQ(shape("fc1_bias"), (Shape{1000}));
  EXPECT_EQ(g.tensor(rg.logits).shape, (Shape{2, 1000}));
  EXPECT_EQ(g.tensor(rg.loss).shape, Shape{});
  EXPECT_EQ(g.outputs(), (std::vector<int>{rg.logits, rg.loss}));
  EXPECT_EQ(countOps(g, OpKind::Conv2d), 53);
  EXPECT_EQ(countOps(g, OpKind::BatchNormTrain), 53);
  EXPECT_EQ(countOps(g, OpKind::MaxPool), 1);
}

TEST(ResNet50, ForwardMacs) {
  // 4.09 GMAC per 224x224 image (convs + fc).
  const ResNetGraph rg = buildInference(ResNetConfig::resnet50(), 1);
  EXPECT_NEAR(forwardMacs(rg.graph) / 1e9, 4.09, 0.02);
}

TEST(ResNet50, TrainingGraph) {
  const ResNetGraph rg = buildTraining(ResNetConfig::resnet50(), 4, resnetSgdOptions(0.9, 5e-5));
  const Graph& g = rg.graph;
  EXPECT_EQ(trainableVariables(g), rg.params);
  EXPECT_EQ(rg.grads.size(), 161u);
  EXPECT_EQ(rg.optimizerState.size(), 161u);
  EXPECT_EQ(rg.runningStats.size(), 106u);
  EXPECT_EQ(g.tensor(rg.lr).shape, Shape{});
  EXPECT_EQ(countOps(g, OpKind::OptimizerUpdate), 161);
  EXPECT_EQ(countOps(g, OpKind::EmaUpdate), 106);
  int decayed = 0;
  for (const Op& op : g.ops()) {
    if (op.kind == OpKind::OptimizerUpdate) {
      EXPECT_EQ(op.attrs.getString("optimizer"), "sgd");
      const std::string& w = g.tensor(op.inputs[0]).name;
      const bool isWeight = w.ends_with("_weight");
      EXPECT_EQ(op.attrs.getFloat("weight_decay"), isWeight ? 5e-5 : 0.0) << w;
      decayed += isWeight;
    }
    if (op.kind == OpKind::EmaUpdate) {
      EXPECT_EQ(op.attrs.getFloat("momentum"), 0.9);
      const Tensor& running = g.tensor(op.inputs[0]);
      if (running.name == "stage4_unit3_bn3_running_var") {  // rows = 4*7*7
        EXPECT_DOUBLE_EQ(op.attrs.getFloat("scale"), 196.0 / 195.0);
      }
      if (running.name.ends_with("_running_mean")) {
        EXPECT_FALSE(op.attrs.has("scale"));
      }
    }
  }
  EXPECT_EQ(decayed, 54);  // 53 convs + fc
}

TEST(ResNet50, InferenceGraphSharesVariableNames) {
  const ResNetGraph tr = buildForward(ResNetConfig::resnet50(), 1, BnMode::Train);
  const ResNetGraph inf = buildInference(ResNetConfig::resnet50(), 1);
  auto variables = [](const Graph& g) {
    std::vector<std::string> v;
    for (const Tensor& t : g.tensors())
      if (t.kind == TensorKind::Variable) v.push_back(t.name);
    return v;
  };
  EXPECT_EQ(variables(tr.graph), variables(inf.graph));
  EXPECT_EQ(countOps(inf.graph, OpKind::BatchNormInference), 53);
  EXPECT_EQ(countOps(inf.graph, OpKind::EmaUpdate), 0);
  EXPECT_EQ(inf.graph.tensor(inf.graph.get("bn0_running_var")).shape, Shape{64});
}

TEST(ResNet50, FashionMnistAdaptation) {
  const ResNetGraph rg = buildForward(ResNetConfig::fashionMnist(), 2, BnMode::Train);
  const Graph& g = rg.graph;
  auto shape = [&](const std::string& n) { return g.tensor(g.get(n)).shape; };
  EXPECT_EQ(shape("images"), (Shape{2, 28, 28, 1}));
  EXPECT_EQ(shape("conv0_weight"), (Shape{64, 3, 3, 1}));
  EXPECT_EQ(countOps(g, OpKind::MaxPool), 0);
  EXPECT_EQ(shape("relu0"), (Shape{2, 14, 14, 64}));  // the stride-2 small stem
  EXPECT_EQ(shape("stage1_unit3_relu3"), (Shape{2, 14, 14, 256}));
  EXPECT_EQ(shape("stage4_unit3_relu3"), (Shape{2, 2, 2, 2048}));
  EXPECT_EQ(g.tensor(rg.logits).shape, (Shape{2, 10}));
}

TEST(ResNet50, SmallPreset) {
  const ResNetGraph rg = buildForward(ResNetConfig::small(), 3, BnMode::Train);
  EXPECT_EQ(rg.params.size(), 3u + 4 * 12 + 2);
  const Graph& g = rg.graph;
  EXPECT_EQ(g.tensor(g.get("stage4_unit1_relu3")).shape, (Shape{3, 1, 1, 256}));
  EXPECT_EQ(g.tensor(rg.logits).shape, (Shape{3, 10}));
}

TEST(ResNet50, TextRoundTripOfTheTrainingGraph) {
  ResNetConfig c = ResNetConfig::small();
  c.labelSmoothing = 0.1;
  const ResNetGraph rg = buildTraining(c, 4, resnetSgdOptions(0.9, 1e-4));
  const std::string text = printGraph(rg.graph);
  const Graph parsed = parseGraph(text, "small_train");
  EXPECT_EQ(printGraph(parsed), text);
  EXPECT_EQ(parsed.ops().size(), rg.graph.ops().size());
  EXPECT_NE(text.find("ema_update(%stage1_unit1_bn1_running_var"), std::string::npos);
  EXPECT_NE(text.find("optimizer_update(%fc1_bias"), std::string::npos);
}

TEST(ResNet50, BuildErrors) {
  EXPECT_THROW(buildForward(ResNetConfig::small(), 0, BnMode::Train), GraphError);
  ResNetConfig c = ResNetConfig::small();
  c.blocks.clear();
  EXPECT_THROW(buildForward(c, 1, BnMode::Train), GraphError);
}

TEST(ResNet50, InitWeights) {
  ResNetConfig c = ResNetConfig::resnet50();
  c.zeroInitLastBnGamma = true;
  const ResNetGraph rg = buildTraining(c, 1, resnetSgdOptions());
  const auto w = initWeights(rg, 42);
  const auto again = initWeights(rg, 42);
  const auto other = initWeights(rg, 43);
  EXPECT_EQ(w, again);
  EXPECT_NE(w.at("conv0_weight"), other.at("conv0_weight"));
  // Every variable, at its size.
  for (const Tensor& t : rg.graph.tensors())
    if (t.kind == TensorKind::Variable) {
      ASSERT_TRUE(w.count(t.name)) << t.name;
      EXPECT_EQ(static_cast<i64>(w.at(t.name).size()), t.elements()) << t.name;
    }
  auto moments = [](const std::vector<float>& v) {
    double s = 0, s2 = 0;
    for (float x : v) s += x, s2 += double(x) * x;
    const double m = s / v.size();
    return std::pair{m, std::sqrt(s2 / v.size() - m * m)};
  };
  // Kaiming normal, fan_out = K*R*S = 256*3*3 for stage3 conv2 ([256,3,3,256]).
  auto [m, sd] = moments(w.at("stage3_unit1_conv2_weight"));
  EXPECT_NEAR(m, 0.0, 1e-3);
  EXPECT_NEAR(sd, std::sqrt(2.0 / (256 * 9)), 2e-3 * std::sqrt(2.0 / (256 * 9)) * 10);
  const auto& fc = w.at("fc1_weight");
  const float bound = 1.0f / std::sqrt(2048.0f);
  EXPECT_LE(*std::max_element(fc.begin(), fc.end()), bound);
  EXPECT_GE(*std::min_element(fc.begin(), fc.end()), -bound);
  EXPECT_GT(*std::max_element(fc.begin(), fc.end()), 0.99f * bound);
  EXPECT_EQ(w.at("stage2_unit3_bn3_gamma"), std::vector<float>(512, 0.0f));
  EXPECT_EQ(w.at("stage2_unit3_bn2_gamma"), std::vector<float>(128, 1.0f));
  EXPECT_EQ(w.at("stage2_unit3_bn2_beta"), std::vector<float>(128, 0.0f));
  EXPECT_EQ(w.at("stage2_unit3_bn2_running_var"), std::vector<float>(128, 1.0f));
  EXPECT_EQ(w.at("fc1_weight/momentum"), std::vector<float>(2048 * 1000, 0.0f));
}

TEST(GoldenWeights, MatchThePythonGenerator) {
  const auto& small = testing::resnetGoldens().at("cases").at("small");
  const auto& cfg = small.at("config");
  const i64 n = small.at("batch").get<i64>();
  const i64 count = n * cfg.at("input_h").get<i64>() * cfg.at("input_w").get<i64>() *
                    cfg.at("input_c").get<i64>();
  const auto images = goldenImages(count);
  const auto head = small.at("images_head").get<std::vector<float>>();
  for (size_t i = 0; i < head.size(); ++i) EXPECT_EQ(images[i], head[i]) << i;  // bit-exact
  EXPECT_EQ(goldenLabels(n, cfg.at("classes").get<int>()),
            small.at("labels").get<std::vector<std::int32_t>>());
  // Known values (also asserted by hand in golden_weights.py's formula).
  EXPECT_EQ(fnv1a32(""), 2166136261u);
  EXPECT_EQ(fnv1a32("a"), 0xe40c292cu);
  const GoldenSpec s = goldenSpecFor("stage1_unit1_conv2_weight", {64, 3, 3, 64});
  EXPECT_DOUBLE_EQ(s.scale, 2.0 * std::sqrt(3.0 / 576.0));
  EXPECT_EQ(goldenSpecFor("stage1_unit1_bn3_gamma", {256}).offset, 0.2);
  EXPECT_THROW(goldenSpecFor("lr", {}), std::invalid_argument);
}

}  // namespace
}  // namespace ipu::models
