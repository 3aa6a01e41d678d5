// Replication of 16-bit, loss-scaled training graphs ("16.16": f16 weights, static loss scale
// 128, stochastic rounding): the replicated step widens gradients to f32 for the accumulation and
// the ring, recomputes the overflow flag from every replica's accumulated gradients, and so skips
// a step on every replica when any replica or any micro-batch overflowed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "ipu_backend/compiler/autodiff.h"
#include "ipu_backend/compiler/compiler.h"
#include "ipu_backend/compiler/mixed_precision.h"
#include "ipu_backend/ir/builder.h"
#include "ipu_backend/ir/op_defs.h"
#include "ipu_backend/optimizers/optimizer.h"
#include "ipu_backend/replication/replica_group.h"
#include "ipu_backend/replication/replicate.h"

namespace ipu {
namespace {

using replication::ReplicaGroup;
using replication::ReplicaGroupOptions;
using replication::ReplicationOptions;

constexpr i64 kIn = 12, kHidden = 16, kClasses = 5;
const std::vector<std::string> kWeights = {"w1", "b1", "w2", "b2"};

// x[b, 12] -> dense 16 -> relu -> dense 5 -> mean softmax cross-entropy, in a 16-bit policy.
Graph mlpTraining16(i64 batch, const std::string& policyName) {
  Graph fwd("mlp16_train");
  Builder b(fwd);
  const int x = b.input("x", {batch, kIn});
  const int y = b.input("labels", {batch}, DType::I32);
  const int w1 = b.variable("w1", {kIn, kHidden}), b1 = b.variable("b1", {kHidden});
  const int w2 = b.variable("w2", {kHidden, kClasses}), b2 = b.variable("b2", {kClasses});
  const int logits = b.dense(b.relu(b.dense(x, w1, b1)), w2, b2, "logits");
  const int loss = b.reduceMean(b.softmaxCrossEntropy(logits, y), {0}, false, "loss");
  fwd.markOutput(loss);
  const auto policy = precision::PrecisionPolicy::parse(policyName);
  PrecisionRewrite rw = applyPrecision(fwd, policy);
  Graph g = std::move(rw.graph);
  const int lr = g.addInput("lr", {});
  SgdOptions sgd;
  sgd.momentum = 0.9;
  sgd.weightDecay = 1e-3;
  appendTrainingStep(g, rw.map(loss), {rw.map(w1), rw.map(b1), rw.map(w2), rw.map(b2)}, lr, sgd,
                     policy);
  return g;
}

std::vector<float> initialValue(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.elements()), 0.0f);
  if (t.name.find('/') != std::string::npos) return v;  // momentum, accumulators
  std::mt19937 rng(static_cast<unsigned>(std::hash<std::string>{}(t.name)));
  std::normal_distribution<float> d(0.0f, 0.3f);
  for (float& x : v) x = d(rng);
  return v;
}

struct Layout {
  int replicas = 1, accumulation = 1;
  i64 microBatch = 4;
  EngineMode mode = EngineMode::Fused;
  std::string policy = "16.16";
  bool accumulateInWeightDType = false;
};

// One replicated training run over rows of x/y: replica k of step s reads the rows
// [(s R + k) A b, ...), so a step's global batch is the same whatever R x A x b split it.
class ReplicatedRun {
 public:
  explicit ReplicatedRun(const Layout& l) : l_(l) {
    auto rg = replication::replicate(
        mlpTraining16(l.microBatch, l.policy),
        ReplicationOptions{l.replicas, l.accumulation, false, l.accumulateInWeightDType});
    graph_ = rg.graph;
    CompileOptions co;
    rg.configure(co, l.accumulation);
    exe_ = std::make_shared<Executable>(compile(rg.graph, Target::mk2(), co));
    ReplicaGroupOptions o;
    o.mode = l.mode;
    o.replicas = l.replicas;
    group_ = std::make_unique<ReplicaGroup>(exe_, o);
    const Graph& g = exe_->graph;
    const size_t slots = static_cast<size_t>(l.accumulation);
    const i64 rows = l.accumulation * l.microBatch;
    xs_.assign(l.replicas, std::vector<float>(rows * kIn));
    ys_.assign(l.replicas, std::vector<std::int32_t>(rows));
    lrs_.assign(slots, 0.05f);
    scales_.assign(slots, 128.0f);
    inverse_.assign(slots, 1.0f / 128.0f);
    losses_.assign(l.replicas, std::vector<float>(slots));
    flags_.assign(l.replicas, std::vector<float>(slots));
    for (int k = 0; k < l.replicas; ++k) {
      Engine& e = group_->engine(k);
      for (const Tensor& t : g.tensors())
        if (t.kind == TensorKind::Variable) e.writeTensor(t.name, initialValue(t));
      e.setRoundingSeed(11);
      e.connectInput(g.get("x"), xs_[k].data());
      e.connectInput(g.get("labels"), ys_[k].data());
      e.connectInput(g.get("lr"), lrs_.data());
      e.connectInput(g.get("loss_scale"), scales_.data());
      e.connectInput(g.get("loss_scale_inverse"), inverse_.data());
      e.connectOutput(g.get("loss"), losses_[k].data());
      e.connectOutput(g.get("loss_scaling/overflow"), flags_[k].data());
    }
  }

  // One step on rows starting at `step`'s global batch; `poison(k, a)` replaces replica k's
  // micro-batch a by inputs beyond f16's range (x = 1e6 becomes Inf).
  void step(const std::vector<float>& x, const std::vector<std::int32_t>& y, i64 step,
            int poisonReplica = -1, int poisonMicroBatch = -1) {
    const i64 rows = l_.accumulation * l_.microBatch;
    for (int k = 0; k < l_.replicas; ++k) {
      const i64 row0 = (step * l_.replicas + k) * rows;
      std::memcpy(xs_[k].data(), x.data() + row0 * kIn, rows * kIn * sizeof(float));
      std::memcpy(ys_[k].data(), y.data() + row0, rows * sizeof(std::int32_t));
      if (k == poisonReplica)
        std::fill_n(xs_[k].begin() + poisonMicroBatch * l_.microBatch * kIn, l_.microBatch * kIn,
                    1e6f);
    }
    group_->run();
  }

  std::vector<float> weight(int replica, const std::string& name) const {
    return group_->engine(replica).readFloats(name);
  }
  float flag(int replica) const { return flags_[static_cast<size_t>(replica)].back(); }
  const Graph& graph() const { return graph_; }

 private:
  Layout l_;
  Graph graph_{"empty"};
  std::shared_ptr<Executable> exe_;
  std::unique_ptr<ReplicaGroup> group_;
  std::vector<std::vector<float>> xs_;
  std::vector<std::vector<std::int32_t>> ys_;
  std::vector<float> lrs_, scales_, inverse_;
  std::vector<std::vector<float>> losses_, flags_;
};

struct Data {
  std::vector<float> x;
  std::vector<std::int32_t> y;
};
const Data& data() {
  static const Data d = [] {
    Data d;
    std::mt19937 rng(7);
    std::normal_distribution<float> nx(0.0f, 1.0f);
    std::uniform_int_distribution<int> ny(0, kClasses - 1);
    for (i64 i = 0; i < 512 * kIn; ++i) d.x.push_back(nx(rng));
    for (i64 i = 0; i < 512; ++i) d.y.push_back(ny(rng));
    return d;
  }();
  return d;
}

std::vector<float> rounded16(const Graph& g, const std::string& name) {
  // The initial value as the f16 variable holds it (RNE), read back through an engine.
  Graph one("one");
  const Tensor& t = g.tensor(g.get(name));
  one.addVariable(name, t.shape, t.dtype);
  auto exe = std::make_shared<Executable>(compile(one, Target::mk2(), {}));
  Engine e(exe, EngineMode::Fused);
  e.writeTensor(name, initialValue(t));
  return e.readFloats(name);
}

TEST(LossScaledReplication, SixteenBitWeightsReplicateWithF32AccumulatorsAndOneFlag) {
  const Graph src = mlpTraining16(4, "16.16");
  ASSERT_EQ(src.tensor(src.get("w1")).dtype, DType::F16);
  auto rg = replication::replicate(src, ReplicationOptions{2, 3, false});
  const Graph& g = rg.graph;
  for (const std::string& w : kWeights) {
    EXPECT_EQ(g.tensor(g.get(w)).dtype, DType::F16) << w;
    EXPECT_EQ(g.tensor(g.get(w + "/grad_accum")).dtype, DType::F32) << w;
  }
  // The flag is computed once, in the update part, from every replica's accumulated gradients.
  const int flag = g.get("loss_scaling/overflow");
  int producer = -1;
  for (const Op& op : g.ops())
    for (int t : op.outputs)
      if (t == flag) producer = op.id;
  EXPECT_GE(producer, rg.updateFirstOp);
  EXPECT_NE(std::find(g.outputs().begin(), g.outputs().end(), flag), g.outputs().end());
  int updates = 0;
  for (const Op& op : g.ops())
    if (op.kind == OpKind::OptimizerUpdate) {
      ++updates;
      EXPECT_TRUE(op.attrs.getBool("loss_scaled", false));
      EXPECT_EQ(updateOperands(op).overflow, flag);
      EXPECT_GE(op.id, producer);
    }
  EXPECT_EQ(updates, 4);
  // The micro-batch part keeps no trace of the source's per-micro-batch flag: it has fewer
  // reductions than the source has.
  int srcReductions = 0, microReductions = 0;
  for (const Op& op : src.ops()) srcReductions += op.kind == OpKind::Reduce;
  for (const Op& op : g.ops())
    microReductions += op.kind == OpKind::Reduce && op.id < rg.updateFirstOp;
  EXPECT_EQ(microReductions, srcReductions - 4);
}

// Each weight's mean gradient is gathered right before its update, after the previous update:
// the flag no longer needs every mean first, so one mean is live at a time (all of them at once
// held an IPU's f32 gradients of BERT-Large, 622 KB of one tile, in the update part).
TEST(LossScaledReplication, EachMeanGradientIsGatheredAfterThePreviousUpdate) {
  for (bool narrow : {false, true}) {
    const Graph src = mlpTraining16(4, "16.16");
    auto rg = replication::replicate(src, ReplicationOptions{2, 3, false, narrow});
    const Graph& g = rg.graph;
    // In op order: gather k (and narrow: the widening of accumulator k) after update k - 1.
    int updates = 0, gathers = 0, widenings = 0;
    for (const Op& op : g.ops()) {
      const std::string name = op.outputs.empty() ? "" : g.tensor(op.outputs[0]).name;
      if (op.kind == OpKind::CrossReplicaAllGather) {
        EXPECT_EQ(gathers++, updates) << name << " is gathered before the previous update ran";
      }
      if (op.kind == OpKind::Cast && name.ends_with("/grad_accum_f32")) {
        EXPECT_EQ(widenings++, updates) << name << " is widened before the previous update ran";
      }
      updates += op.kind == OpKind::OptimizerUpdate;
    }
    EXPECT_EQ(gathers, 4);
    EXPECT_EQ(widenings, narrow ? 4 : 0);
  }
}

TEST(LossScaledReplication, ReplicasOf16BitWeightsStayIdenticalAndMatchOneReplica) {
  for (EngineMode mode : {EngineMode::Fused, EngineMode::Tile}) {
    ReplicatedRun two({2, 1, 4, mode, "16.16"});
    ReplicatedRun one({1, 1, 8, mode, "16.16"});
    for (i64 s = 0; s < 6; ++s) {
      two.step(data().x, data().y, s);
      one.step(data().x, data().y, s);
      EXPECT_EQ(two.flag(0), 0.0f);
      EXPECT_EQ(two.flag(1), 0.0f);
    }
    for (const std::string& w : kWeights) {
      const auto a = two.weight(0, w), b = two.weight(1, w), c = one.weight(0, w);
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << w;
      const auto init = rounded16(two.graph(), w);
      double moved = 0, diff = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_TRUE(std::isfinite(a[i])) << w;
        moved = std::max(moved, static_cast<double>(std::fabs(a[i] - init[i])));
        diff = std::max(diff, static_cast<double>(std::fabs(a[i] - c[i])));
      }
      EXPECT_GT(moved, 1e-3) << w << ": the weights trained";
      // Two f16 runs with different rounding draws and summation orders: within a few f16
      // steps of each other, far below how far training moved them.
      EXPECT_LT(diff, 0.25 * moved + 2e-3) << w;
    }
  }
}

// Graphcore's BERT keeps PopART's default accumulator type, the weight's: f16 accumulators for
// f16 weights, half the always-live bytes of f32 ones. Replicas stay identical and train like
// the f32 accumulators within f16 rounding.
TEST(LossScaledReplication, WeightDTypeAccumulatorsAreHalfTheBytesAndTrainLikeF32Ones) {
  const Graph src = mlpTraining16(4, "16.16");
  auto narrow = replication::replicate(src, ReplicationOptions{2, 3, false, true});
  auto wide = replication::replicate(src, ReplicationOptions{2, 3, false, false});
  i64 narrowBytes = 0, wideBytes = 0;
  for (const std::string& w : kWeights) {
    EXPECT_EQ(narrow.graph.tensor(narrow.graph.get(w + "/grad_accum")).dtype, DType::F16) << w;
    narrowBytes += narrow.graph.tensor(narrow.graph.get(w + "/grad_accum")).bytes();
    wideBytes += wide.graph.tensor(wide.graph.get(w + "/grad_accum")).bytes();
  }
  EXPECT_EQ(2 * narrowBytes, wideBytes);
  for (EngineMode mode : {EngineMode::Fused, EngineMode::Tile}) {
    Layout l{2, 3, 4, mode, "16.16", true};
    ReplicatedRun f16(l);
    l.accumulateInWeightDType = false;
    ReplicatedRun f32(l);
    for (i64 s = 0; s < 4; ++s) {
      f16.step(data().x, data().y, s);
      f32.step(data().x, data().y, s);
      EXPECT_EQ(f16.flag(0), 0.0f);
    }
    for (const std::string& w : kWeights) {
      const auto a = f16.weight(0, w), b = f16.weight(1, w), c = f32.weight(0, w);
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << w;
      const auto init = rounded16(f16.graph(), w);
      double moved = 0, diff = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_TRUE(std::isfinite(a[i])) << w;
        moved = std::max(moved, static_cast<double>(std::fabs(a[i] - init[i])));
        diff = std::max(diff, static_cast<double>(std::fabs(a[i] - c[i])));
      }
      EXPECT_GT(moved, 1e-3) << w << ": the weights trained";
      EXPECT_LT(diff, 0.25 * moved + 2e-3) << w;
    }
  }
}

TEST(LossScaledReplication, AnOverflowInOneReplicaSkipsTheStepOnEveryReplica) {
  ReplicatedRun two({2, 1, 4, EngineMode::Fused, "16.16"});
  two.step(data().x, data().y, 0, /*poisonReplica=*/1, /*poisonMicroBatch=*/0);
  EXPECT_TRUE(std::isnan(two.flag(0))) << "replica 0's own gradients were finite";
  EXPECT_TRUE(std::isnan(two.flag(1)));
  for (const std::string& w : kWeights) {
    const auto init = rounded16(two.graph(), w);
    for (int k = 0; k < 2; ++k) {
      const auto v = two.weight(k, w);
      EXPECT_EQ(0, std::memcmp(v.data(), init.data(), v.size() * sizeof(float)))
          << w << " of replica " << k << " changed on a skipped step";
    }
    const auto m = two.weight(0, w + "/momentum");
    for (float x : m) ASSERT_EQ(x, 0.0f) << w << "/momentum changed on a skipped step";
  }
  two.step(data().x, data().y, 1);  // a clean step trains again
  EXPECT_EQ(two.flag(0), 0.0f);
  const auto w1 = two.weight(0, "w1"), init = rounded16(two.graph(), "w1");
  EXPECT_NE(0, std::memcmp(w1.data(), init.data(), w1.size() * sizeof(float)));
}

TEST(LossScaledReplication, AnOverflowInAnEarlierMicroBatchSkipsTheStep) {
  // The flag streams out after the last micro-batch; an overflow in the first must count.
  for (const std::string policy : {"16.16", "fp16"}) {
    ReplicatedRun acc({1, 2, 4, EngineMode::Fused, policy});
    acc.step(data().x, data().y, 0, /*poisonReplica=*/0, /*poisonMicroBatch=*/0);
    EXPECT_TRUE(std::isnan(acc.flag(0))) << policy;
    for (const std::string& w : kWeights) {
      const auto v = acc.weight(0, w);
      const auto init = policy == "16.16" ? rounded16(acc.graph(), w)
                                          : initialValue(acc.graph().tensor(acc.graph().get(w)));
      for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], init[i]) << policy << " " << w;
    }
    acc.step(data().x, data().y, 1);
    EXPECT_EQ(acc.flag(0), 0.0f) << policy;
    for (const std::string& w : kWeights)
      for (float x : acc.weight(0, w)) ASSERT_TRUE(std::isfinite(x)) << policy << " " << w;
  }
}

TEST(LossScaledReplication, ShardingA16BitOptimizerStateIsRefusedClearly) {
  try {
    replication::replicate(mlpTraining16(4, "16.16"), ReplicationOptions{2, 1, true});
    FAIL() << "expected a GraphError";
  } catch (const GraphError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'w1' is f16 with a loss-scaled update"), std::string::npos) << m;
    EXPECT_NE(m.find("turn sharding off"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace ipu
