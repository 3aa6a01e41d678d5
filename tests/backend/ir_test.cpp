// Graph IR: builder shape errors, text form round trip, parse errors with line and column.
#include <gtest/gtest.h>

#include "ipu_backend/compiler/autodiff.h"
#include "ipu_backend/ir/builder.h"
#include "ipu_backend/ir/text.h"
#include "ipu_backend/optimizers/optimizer.h"

namespace ipu {
namespace {

Graph smallTrainingGraph() {
  Graph g("tiny_cnn");
  Builder b(g);
  int x = b.input("x", {4, 8, 8, 1});
  int labels = b.input("labels", {4}, DType::I32);
  int lr = b.input("lr", {});
  int w = b.variable("conv0_weight", {8, 3, 3, 1});
  int gm = b.variable("bn0_gamma", {8}), bt = b.variable("bn0_beta", {8});
  int y = b.conv2d(x, w, Conv2dOptions::make(1, 1), "conv0");
  auto bn = b.batchNormTrain(y, gm, bt, 1e-5, "bn0");
  int r = b.relu(bn.y, "relu0");
  int p = b.maxPool(r, Pool2dOptions::make(2, 2, 0), "pool0");
  int gap = b.globalAvgPool(p, "gap");
  int fw = b.variable("fc_weight", {8, 10}), fb = b.variable("fc_bias", {10});
  int logits = b.dense(gap, fw, fb, "logits");
  int loss = b.reduceMean(b.softmaxCrossEntropy(logits, labels, 0.1), {0}, false, "loss");
  g.markOutput(loss);
  g.markOutput(logits);
  auto grads = appendBackward(g, loss, trainableVariables(g)).grads;
  SgdOptions o;
  o.weightDecay = 5e-5;
  appendSgdUpdate(g, grads, lr, o);
  return g;
}

TEST(TextIr, RoundTripIsIdentical) {
  Graph g = smallTrainingGraph();
  std::string t1 = printGraph(g);
  Graph g2 = parseGraph(t1);
  std::string t2 = printGraph(g2);
  EXPECT_EQ(t1, t2);
  EXPECT_EQ(g.ops().size(), g2.ops().size());
  EXPECT_NE(t1.find("conv2d_backward_filter"), std::string::npos);
  EXPECT_NE(t1.find("optimizer_update(%conv0_weight, %"), std::string::npos) << t1;
}

TEST(TextIr, FloatsKeepTheirType) {
  Graph g = parseGraph(R"(graph f {
  variable %x: f32[2]
  %y: f32[2] = unary(%x) {alpha=1.0, fn="scale"}
})");
  EXPECT_DOUBLE_EQ(g.op(0).attrs.getFloat("alpha"), 1.0);
  EXPECT_NE(printGraph(g).find("alpha=1.0"), std::string::npos);
}

void expectParseError(const std::string& text, int line, int col, const std::string& sub) {
  try {
    parseGraph(text, "model.ir");
    FAIL() << "expected a parse error for:\n" << text;
  } catch (const ParseError& e) {
    EXPECT_EQ(e.line(), line) << e.what();
    EXPECT_EQ(e.column(), col) << e.what();
    EXPECT_NE(std::string(e.what()).find(sub), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("model.ir:"), std::string::npos) << e.what();
  }
}

TEST(TextIr, MalformedTextNamesLineAndColumn) {
  expectParseError("graph g {\n  input %x: f33[2]\n}\n", 2, 13, "unknown dtype 'f33'");
  expectParseError("graph g {\n  input %x: f32[2]\n  %y: f32[2] = relu(%x)\n}\n", 3, 16,
                   "unknown op 'relu'");
  expectParseError("graph g {\n  input %x: f32[2]\n  %y: f32[2] = unary(%z) {fn=\"relu\"}\n}\n", 3,
                   22, "unknown tensor '%z'");
  expectParseError("graph g {\n  input %x: f32[2]\n  %y: f32[3] = unary(%x) {fn=\"relu\"}\n}\n", 3,
                   16, "declared type of '%y' is f32[3], but unary produces f32[2]");
  expectParseError("graph g {\n  input %x: f32[2,\n}\n", 3, 1, "expected an integer");
  expectParseError("graph g {\n  input %x: f32[2]\n", 3, 1, "missing '}'");
  expectParseError(
      "graph g {\n  input %x: f32[2]\n  %y: f32[2] = unary(%x) {fn=\"relu\", beta=2}\n}\n", 3, 16,
      "unknown attribute 'beta'");
}

TEST(Builder, ShapeErrorsNameTheOpAndBothShapes) {
  Graph g;
  Builder b(g);
  int x = b.input("images", {2, 8, 8, 3});
  int w = b.variable("conv1_weight", {16, 3, 3, 4});
  try {
    b.conv2d(x, w, Conv2dOptions::make(1, 1), "conv1");
    FAIL();
  } catch (const GraphError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("conv2d 'conv1'"), std::string::npos) << m;
    EXPECT_NE(m.find("[16,3,3,4]"), std::string::npos) << m;
    EXPECT_NE(m.find("[2,8,8,3]"), std::string::npos) << m;
  }
  int a = b.variable("a", {5, 7}), c = b.variable("c", {6, 3});
  try {
    b.matmul(a, c, false, false, "fc");
    FAIL();
  } catch (const GraphError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("matmul 'fc'"), std::string::npos) << m;
    EXPECT_NE(m.find("[5,7]"), std::string::npos) << m;
    EXPECT_NE(m.find("[6,3]"), std::string::npos) << m;
  }
  int p = b.variable("p", {4, 5}), q = b.variable("q", {3, 5});
  try {
    b.add(p, q, "sum");
    FAIL();
  } catch (const GraphError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("binary 'sum'"), std::string::npos) << m;
    EXPECT_NE(m.find("[4,5] and [3,5]"), std::string::npos) << m;
  }
}

TEST(Autodiff, GradientsOnlyForVariablesOnThePath) {
  Graph g;
  Builder b(g);
  int w = b.variable("w", {3}), unused = b.variable("unused", {3});
  int loss = b.reduceSum(b.mul(w, w), {0});
  auto r = appendBackward(g, loss, {w, unused});
  EXPECT_EQ(r.grads.count(w), 1u);
  EXPECT_EQ(r.grads.count(unused), 0u);
  EXPECT_GT(r.opsAdded, 0);
}

}  // namespace
}  // namespace ipu
