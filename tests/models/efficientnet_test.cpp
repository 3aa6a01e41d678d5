// EfficientNet builder: torchvision's names, shapes and parameter counts, the block table after
// scaling, the stochastic-depth schedule, config errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "ipu_backend/ops/op_info.h"
#include "models/efficientnet_b4/efficientnet.h"
#include "models/resnet50/resnet50.h"  // forwardMacs (any graph)

namespace ipu::models::efficientnet {
namespace {

std::map<std::string, Shape> shapesOf(const EfficientNetGraph& eg) {
  std::map<std::string, Shape> m;
  for (int t : eg.params) m[eg.graph.tensor(t).name] = eg.graph.tensor(t).shape;
  return m;
}

TEST(EfficientNet, B4ParameterCountAndNamesMatchTorchvision) {
  const EfficientNetGraph eg = buildForward(Config::b4(), 1, Mode::Inference);
  EXPECT_EQ(eg.parameterCount(), 19'341'616);  // torchvision EfficientNet_B4_Weights num_params
  // 706 state_dict entries = 416 parameters + 96 x (running_mean, running_var,
  // num_batches_tracked); we keep no num_batches_tracked.
  EXPECT_EQ(eg.params.size(), 706u - 3 * 96);
  EXPECT_EQ(eg.runningStats.size(), 2u * 96);
  const auto s = shapesOf(eg);
  // torchvision [K,C/G,R,S] as our [K,R,S,C/G]; Linear as torch's [out, in].
  const std::map<std::string, Shape> expected = {
      {"features.0.0.weight", {48, 3, 3, 3}},
      {"features.0.1.weight", {48}},
      {"features.1.0.block.0.0.weight", {48, 3, 3, 1}},
      {"features.1.0.block.1.fc1.weight", {12, 1, 1, 48}},
      {"features.1.1.block.1.fc1.weight", {6, 1, 1, 24}},
      {"features.1.1.block.2.0.weight", {24, 1, 1, 24}},
      {"features.2.0.block.0.0.weight", {144, 1, 1, 24}},
      {"features.2.0.block.1.0.weight", {144, 3, 3, 1}},
      {"features.2.0.block.2.fc1.weight", {6, 1, 1, 144}},
      {"features.2.0.block.2.fc1.bias", {6}},
      {"features.2.0.block.2.fc2.weight", {144, 1, 1, 6}},
      {"features.2.0.block.3.0.weight", {32, 1, 1, 144}},
      {"features.2.3.block.3.1.bias", {32}},
      {"features.3.0.block.1.0.weight", {192, 5, 5, 1}},
      {"features.6.7.block.1.0.weight", {1632, 5, 5, 1}},
      {"features.7.1.block.3.0.weight", {448, 1, 1, 2688}},
      {"features.8.0.weight", {1792, 1, 1, 448}},
      {"features.8.1.bias", {1792}},
      {"classifier.1.weight", {1000, 1792}},
      {"classifier.1.bias", {1000}},
  };
  for (const auto& [name, shape] : expected) {
    ASSERT_TRUE(s.count(name)) << name;
    EXPECT_EQ(s.at(name), shape) << name;
  }
  EXPECT_FALSE(s.count("features.1.0.block.3.0.weight"));  // stage 1 has no expand conv
  EXPECT_FALSE(s.count("features.2.4.block.0.0.weight"));  // stage 2 has ceil(1.8 * 2) = 4
  EXPECT_EQ(eg.graph.tensor(eg.runningStats[0]).name, "features.0.1.running_mean");
  // torchvision's state_dict order: first and last names.
  EXPECT_EQ(eg.paramNames().front(), "features.0.0.weight");
  EXPECT_EQ(eg.paramNames()[3], "features.1.0.block.0.0.weight");
  EXPECT_EQ(eg.paramNames().back(), "classifier.1.bias");
  // 4.394 G forward MACs per image at 380 (probe of torchvision's model: conv + FC).
  EXPECT_NEAR(models::forwardMacs(eg.graph) / 1e9, 4.394, 0.0005);
}

TEST(EfficientNet, B4BlockTable) {
  const auto bs = blocks(Config::b4());
  ASSERT_EQ(bs.size(), 32u);
  EXPECT_EQ(stemChannels(Config::b4()), 48);
  EXPECT_EQ(headChannels(Config::b4()), 1792);
  // [stage] = {blocks, out, first expanded, squeeze of the first}
  const std::map<int, std::array<i64, 4>> stages = {{1, {2, 24, 48, 12}},   {2, {4, 32, 144, 6}},
                                                    {3, {4, 56, 192, 8}},   {4, {6, 112, 336, 14}},
                                                    {5, {6, 160, 672, 28}}, {6, {8, 272, 960, 40}},
                                                    {7, {2, 448, 1632, 68}}};
  std::map<int, int> count;
  for (const BlockSpec& b : bs) {
    ++count[b.stage];
    const auto& st = stages.at(b.stage);
    EXPECT_EQ(b.out, st[1]);
    if (b.index == 0) {
      EXPECT_EQ(b.expanded, st[2]) << b.prefix;
      EXPECT_EQ(b.squeeze, st[3]) << b.prefix;
    }
    EXPECT_EQ(b.groups, b.expanded) << "depthwise: " << b.prefix;
    // Stochastic depth: 0.2 * i / 32 on residual blocks only (stride 1, in == out).
    EXPECT_DOUBLE_EQ(b.dropProb, b.residual() ? 0.2 * b.globalIndex / 32 : 0.0) << b.prefix;
  }
  for (const auto& [st, v] : stages) EXPECT_EQ(count[st], v[0]) << "stage " << st;
  EXPECT_DOUBLE_EQ(bs.back().dropProb, 0.19375);
}

TEST(EfficientNet, G16ParameterCountAndGroups) {
  const EfficientNetGraph eg = buildForward(Config::b4G16(), 1, Mode::Inference);
  EXPECT_EQ(eg.parameterCount(), 19'328'168);  // probe: torchvision B4 with e 4, groups C/16
  EXPECT_NEAR(models::forwardMacs(eg.graph) / 1e9, 6.183, 0.0005);
  const auto s = shapesOf(eg);
  EXPECT_EQ(s.at("features.1.0.block.0.0.weight"), (Shape{48, 3, 3, 16}));  // 3 groups
  EXPECT_EQ(s.at("features.1.1.block.0.0.weight"), (Shape{24, 3, 3, 24}));  // 24 < 32: 1 group
  EXPECT_EQ(s.at("features.2.0.block.0.0.weight"), (Shape{96, 1, 1, 24}));  // expansion 4
  EXPECT_EQ(s.at("features.2.0.block.1.0.weight"), (Shape{96, 3, 3, 16}));
}

TEST(EfficientNet, TrainingGraphHasStochasticDepthAndDropout) {
  Config c = Config::small();
  c.stochasticDepth = 0.5;
  c.dropout = 0.3;
  const EfficientNetGraph eg = buildForward(c, 2, Mode::Train);
  ASSERT_GE(eg.dropoutKey, 0);
  std::map<std::string, double> rates;
  const OpKind dropout = ops::kindNamed("dropout");
  for (const Op& op : eg.graph.ops())
    if (op.kind == dropout) rates[eg.graph.tensor(op.outputs[0]).name] = op.attrs.getFloat("rate");
  // small: 5 blocks, residual ones are features.2.1 (global 2) and features.3.1 (global 4).
  const std::map<std::string, double> expected = {{"features.2.1.stochastic_depth", 0.5 * 2 / 5},
                                                  {"features.3.1.stochastic_depth", 0.5 * 4 / 5},
                                                  {"classifier.0", 0.3}};
  EXPECT_EQ(rates, expected);
  const EfficientNetGraph inf = buildForward(c, 2, Mode::Inference);
  EXPECT_EQ(inf.dropoutKey, -1);
}

TEST(EfficientNet, GroupNormHasNoRunningStatistics) {
  Config c = Config::small();
  c.norm = Norm::Group;
  const EfficientNetGraph eg = buildForward(c, 2, Mode::Train);
  EXPECT_TRUE(eg.runningStats.empty());
  EXPECT_EQ(eg.parameterCount(), buildForward(Config::small(), 2, Mode::Train).parameterCount());
}

// torchvision's head init U(+-1/sqrt(classes)) by default; classifierInitFanOut (the mini runs'
// 1000) narrows it to the 1000-class head's range at 10 classes. Other tensors are unchanged.
TEST(EfficientNet, ClassifierInitRangeFollowsItsFanOut) {
  Config c = Config::small();  // 10 classes
  const EfficientNetGraph torchvisionInit = buildForward(c, 2, Mode::Train);
  c.classifierInitFanOut = 1000;
  const EfficientNetGraph reference1000 = buildForward(c, 2, Mode::Train);
  const auto a = initWeights(torchvisionInit, 7);
  const auto b = initWeights(reference1000, 7);
  const auto maxAbs = [](const std::vector<float>& v) {
    float m = 0;
    for (float x : v) m = std::max(m, std::abs(x));
    return m;
  };
  const std::vector<float>& wa = a.at("classifier.1.weight");
  const std::vector<float>& wb = b.at("classifier.1.weight");
  EXPECT_LE(maxAbs(wa), 1 / std::sqrt(10.0f));
  EXPECT_GT(maxAbs(wa), 0.8f / std::sqrt(10.0f));  // the range is used, not a smaller one
  EXPECT_LE(maxAbs(wb), 1 / std::sqrt(1000.0f));
  EXPECT_GT(maxAbs(wb), 0.8f / std::sqrt(1000.0f));
  for (const auto& [name, values] : a) {
    if (name != "classifier.1.weight") {
      EXPECT_EQ(values, b.at(name)) << name;
    }
  }
}

TEST(EfficientNet, BadConfigsNameTheField) {
  Config c = Config::small();
  c.stages[1].kernel = 4;
  EXPECT_THROW(
      {
        try {
          buildForward(c, 2, Mode::Train);
        } catch (const GraphError& e) {
          EXPECT_NE(std::string(e.what()).find("stage 2"), std::string::npos) << e.what();
          throw;
        }
      },
      GraphError);
  c = Config::small();
  c.norm = Norm::Group;
  c.normGroups = 3;  // 16 stem channels
  EXPECT_THROW(buildForward(c, 2, Mode::Train), GraphError);
  c = Config::small();
  c.stochasticDepth = 1.0;
  EXPECT_THROW(buildForward(c, 2, Mode::Train), GraphError);
  EXPECT_THROW(buildForward(Config::small(), 0, Mode::Train), GraphError);
}

}  // namespace
}  // namespace ipu::models::efficientnet
