// Batch norm whose statistics span replicas (Graphcore's bn_span): R replicas of micro-batch b
// with statistics over groups of G replicas train as R/G replicas of G x b with ordinary batch
// norm; tile mode agrees with fused mode; replicas stay bit-identical; a group that does not
// divide the replicas is refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "ipu_backend/compiler/autodiff.h"
#include "ipu_backend/compiler/compiler.h"
#include "ipu_backend/cost/cost_model.h"
#include "ipu_backend/ir/builder.h"
#include "ipu_backend/optimizers/optimizer.h"
#include "ipu_backend/replication/replica_group.h"
#include "ipu_backend/replication/replicate.h"

namespace ipu {
namespace {

using replication::ReplicaGroup;
using replication::ReplicaGroupOptions;
using replication::ReplicationOptions;

constexpr i64 kH = 6, kC = 3, kK = 4, kClasses = 5;

// x[b,6,6,3] -> conv 3x3 (4) -> batch norm (over `group` replicas) -> relu -> mean over H, W ->
// dense 5 -> mean softmax cross-entropy; SGD with momentum; running statistics by EMA with the
// unbiased variance over every sample the statistics span.
Graph convBnTraining(i64 batch, i64 group) {
  Graph g("conv_bn_train");
  Builder b(g);
  int x = b.input("x", {batch, kH, kH, kC});
  int y = b.input("labels", {batch}, DType::I32);
  int lr = b.input("lr", {});
  int w = b.variable("conv_weight", {kK, 3, 3, kC});
  int gamma = b.variable("bn_gamma", {kK}), beta = b.variable("bn_beta", {kK});
  int runMean = b.variable("bn_running_mean", {kK}), runVar = b.variable("bn_running_var", {kK});
  int wd = b.variable("fc_weight", {kK, kClasses}), bd = b.variable("fc_bias", {kClasses});
  int c = b.conv2d(x, w, Conv2dOptions::make(1, 1), "conv");
  BatchNormOutputs bn = b.batchNormTrainAcrossReplicas(c, gamma, beta, 1e-5, group, "bn");
  const double samples = static_cast<double>(batch * kH * kH * group);
  g.addOp(OpKind::EmaUpdate, {runMean, bn.mean}, Attrs{{"momentum", 0.9}});
  g.addOp(OpKind::EmaUpdate, {runVar, bn.var},
          Attrs{{"momentum", 0.9}, {"scale", samples / (samples - 1)}});
  int logits = b.dense(b.globalAvgPool(b.relu(bn.y)), wd, bd, "logits");
  int loss = b.reduceMean(b.softmaxCrossEntropy(logits, y), {0}, false, "loss");
  g.markOutput(loss);
  auto grads = appendBackward(g, loss, {w, gamma, beta, wd, bd}).grads;
  SgdOptions sgd;
  sgd.momentum = 0.9;
  appendSgdUpdate(g, grads, lr, sgd);
  return g;
}

const std::vector<std::string> kState = {"conv_weight",     "bn_gamma",       "bn_beta",
                                         "bn_running_mean", "bn_running_var", "fc_weight",
                                         "fc_bias"};

std::vector<float> initialValue(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.elements()), 0.0f);
  if (t.name.find('/') != std::string::npos || t.name == "bn_running_mean") return v;
  if (t.name == "bn_gamma" || t.name == "bn_running_var") return std::vector<float>(v.size(), 1);
  std::mt19937 rng(static_cast<unsigned>(std::hash<std::string>{}(t.name)));
  std::normal_distribution<float> d(0.0f, 0.4f);
  for (float& x : v) x = d(rng);
  return v;
}

struct Layout {
  int replicas = 1;
  i64 microBatch = 4;
  i64 group = 1;  // replicas per batch-norm group
  EngineMode mode = EngineMode::Fused;
};

constexpr i64 kSample = kH * kH * kC;

// `steps` steps; replica k of step s reads samples [(s*R + k) * b, ...), so a group of G
// consecutive replicas reads what one replica of G x b reads. Returns [replica][state tensor].
std::vector<std::vector<std::vector<float>>> train(const Layout& l, int steps) {
  auto rg = replication::replicate(convBnTraining(l.microBatch, l.group),
                                   ReplicationOptions{l.replicas, 1, false});
  CompileOptions co;
  rg.configure(co, 1);
  auto exe = std::make_shared<Executable>(compile(rg.graph, Target::mk2(), co));
  ReplicaGroupOptions o;
  o.mode = l.mode;
  o.replicas = l.replicas;
  ReplicaGroup group(exe, o);
  const Graph& g = exe->graph;
  for (const Tensor& t : g.tensors())
    if (t.kind == TensorKind::Variable) {
      auto v = initialValue(t);
      group.writeAll(t.id, v.data(), v.size() * sizeof(float));
    }
  const i64 b = l.microBatch, rows = static_cast<i64>(steps) * l.replicas * b;
  std::mt19937 rng(11);
  std::normal_distribution<float> nx(0.5f, 1.5f);  // a mean away from 0: centring matters
  std::uniform_int_distribution<int> ny(0, kClasses - 1);
  std::vector<float> xAll(static_cast<size_t>(rows * kSample));
  std::vector<std::int32_t> yAll(static_cast<size_t>(rows));
  for (float& v : xAll) v = nx(rng);
  for (auto& v : yAll) v = ny(rng);
  std::vector<std::vector<float>> xs(l.replicas, std::vector<float>(b * kSample));
  std::vector<std::vector<std::int32_t>> ys(l.replicas, std::vector<std::int32_t>(b));
  float lr = 0.1f;
  std::vector<float> losses(l.replicas);
  for (int k = 0; k < l.replicas; ++k) {
    Engine& e = group.engine(k);
    e.connectInput(g.get("x"), xs[k].data());
    e.connectInput(g.get("labels"), ys[k].data());
    e.connectInput(g.get("lr"), &lr);
    e.connectOutput(g.get("loss"), &losses[k]);
  }
  for (int s = 0; s < steps; ++s) {
    for (int k = 0; k < l.replicas; ++k) {
      const i64 row0 = (static_cast<i64>(s) * l.replicas + k) * b;
      std::memcpy(xs[k].data(), xAll.data() + row0 * kSample, b * kSample * sizeof(float));
      std::memcpy(ys[k].data(), yAll.data() + row0, b * sizeof(std::int32_t));
    }
    group.run();
  }
  std::vector<std::vector<std::vector<float>>> out(l.replicas);
  for (int k = 0; k < l.replicas; ++k)
    for (const std::string& name : kState) out[k].push_back(group.engine(k).readFloats(name));
  return out;
}

double maxRelDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 1;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
  }
  return diff / scale;
}

void expectClose(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b,
                 double tol, const std::string& what) {
  for (size_t i = 0; i < kState.size(); ++i)
    EXPECT_LE(maxRelDiff(a[i], b[i]), tol) << what << ": " << kState[i];
}

constexpr int kSteps = 5;

TEST(BnSpan, GroupOfReplicasTrainsAsOneReplicaOfTheGroupBatch) {
  Layout spanned{2, 4, 2, EngineMode::Fused}, one{1, 8, 1, EngineMode::Fused};
  auto a = train(spanned, kSteps), b = train(one, kSteps);
  expectClose(a[0], b[0], 2e-5, "2 replicas x 4, span 2 vs 1 replica x 8");
  for (size_t i = 0; i < kState.size(); ++i)
    EXPECT_EQ(0, std::memcmp(a[0][i].data(), a[1][i].data(), a[0][i].size() * sizeof(float)))
        << "replicas differ in " << kState[i];
  // Without the span each replica normalises over its 4 samples: another trajectory.
  auto c = train(Layout{2, 4, 1, EngineMode::Fused}, kSteps);
  EXPECT_GT(maxRelDiff(c[0][0], b[0][0]), 1e-3) << "conv_weight";
  EXPECT_GT(maxRelDiff(c[0][4], b[0][4]), 1e-3) << "bn_running_var";
}

TEST(BnSpan, GroupsOfTwoOfFourReplicasTrainAsTwoReplicasOfTwiceTheBatch) {
  auto a = train(Layout{4, 2, 2, EngineMode::Fused}, kSteps);
  auto b = train(Layout{2, 4, 1, EngineMode::Fused}, kSteps);
  // Weights, and the running statistics of replica 0 (group 0 = replica 0 of the other run).
  expectClose(a[0], b[0], 2e-5, "4 replicas x 2, span 2 vs 2 replicas x 4");
  // Group 1's running statistics are its own (replicas 2, 3 = replica 1 of the other run).
  EXPECT_LE(maxRelDiff(a[2][4], b[1][4]), 2e-5) << "bn_running_var of group 1";
  EXPECT_GT(maxRelDiff(a[0][4], a[2][4]), 1e-4) << "the two groups saw different samples";
}

TEST(BnSpan, TileModeAgreesWithFusedMode) {
  auto tile = train(Layout{2, 4, 2, EngineMode::Tile}, 3);
  auto fused = train(Layout{2, 4, 2, EngineMode::Fused}, 3);
  expectClose(tile[0], fused[0], 2e-5, "tile vs fused");
  expectClose(tile[1], tile[0], 0, "tile replica 1 vs 0");
}

TEST(BnSpan, ProgramSumsStatisticsAcrossTheGroup) {
  auto rg = replication::replicate(convBnTraining(4, 2), ReplicationOptions{4, 1, false});
  CompileOptions co;
  rg.configure(co, 1);
  const Executable exe = compile(rg.graph, Target::mk2(), co);
  const std::string text = exe.program.describe(exe);
  // Forward: sum and centred sum of squares; backward: the same two sums of the gradients.
  EXPECT_NE(
      text.find(
          "CrossReplicaSum(bn/group_sum/cross_replica_sum: groups of 2 of 4 replicas, 16 B in)"),
      std::string::npos)
      << text;
  int sums = 0;
  for (const Op& op : exe.graph.ops()) sums += op.kind == OpKind::CrossReplicaSum;
  EXPECT_EQ(sums, 4);
  // The cost model prices them: more collective time than the same replicas without the span.
  auto plain = replication::replicate(convBnTraining(4, 1), ReplicationOptions{4, 1, false});
  const Executable plainExe = compile(plain.graph, Target::mk2(), co);
  const double spanned = cost::estimateStep(exe).collectiveCycles;
  const double perReplica = cost::estimateStep(plainExe).collectiveCycles;
  EXPECT_GT(spanned, perReplica * 1.1) << spanned << " vs " << perReplica;
}

TEST(BnSpan, GroupThatDoesNotDivideTheReplicasIsRefused) {
  try {
    replication::replicate(convBnTraining(4, 2), ReplicationOptions{3, 1, false});
    FAIL() << "expected a GraphError";
  } catch (const GraphError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'bn/sum' sums over groups of 2 replicas, which do not divide 3"),
              std::string::npos)
        << m;
  }
  // An engine without replicas cannot run a graph whose statistics span two.
  auto exe = std::make_shared<Executable>(compile(convBnTraining(4, 2), Target::mk2()));
  try {
    Engine e(exe);
    FAIL() << "expected invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("compiled for 2 replicas but this engine has 1"),
              std::string::npos)
        << e.what();
  }
  Graph g("bad");
  Builder b(g);
  int x = b.input("x", {2, 4}), ga = b.variable("g", {4}), be = b.variable("b", {4});
  EXPECT_THROW(b.batchNormTrainAcrossReplicas(x, ga, be, 1e-5, 0, "bn"), GraphError);
}

}  // namespace
}  // namespace ipu
