// Data-parallel replication on the backend: replicas stay bit-identical, R replicas of b equal one
// replica of R x b, A accumulated micro-batches equal one batch of A x b, D device iterations
// equal D calls, sharded optimizer state equals the plain update and uses 1/R of the memory, and
// a failed replica stops its siblings instead of hanging them.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>

#include "ipu_backend/compiler/autodiff.h"
#include "ipu_backend/compiler/compiler.h"
#include "ipu_backend/ir/builder.h"
#include "ipu_backend/optimizers/optimizer.h"
#include "ipu_backend/replication/replica_group.h"
#include "ipu_backend/replication/replicate.h"

namespace ipu {
namespace {

using replication::ReplicaGroup;
using replication::ReplicaGroupOptions;
using replication::ReplicationOptions;

constexpr i64 kIn = 12, kClasses = 5;

// A two-layer perceptron without batch norm: x[b, 12] -> dense 20 -> relu -> dense 5 -> mean
// softmax cross-entropy, SGD with momentum and weight decay.
Graph mlpTraining(i64 batch, i64 kHidden = 20, bool lars = false, const char* kind = "sgd") {
  Graph g("mlp_train");
  Builder b(g);
  int x = b.input("x", {batch, kIn});
  int y = b.input("labels", {batch}, DType::I32);
  int lr = b.input("lr", {});
  int w1 = b.variable("w1", {kIn, kHidden}), b1 = b.variable("b1", {kHidden});
  int w2 = b.variable("w2", {kHidden, kClasses}), b2 = b.variable("b2", {kClasses});
  int h = b.relu(b.dense(x, w1, b1));
  int logits = b.dense(h, w2, b2, "logits");
  int loss = b.reduceMean(b.softmaxCrossEntropy(logits, y), {0}, false, "loss");
  g.markOutput(loss);
  auto grads = appendBackward(g, loss, {w1, b1, w2, b2}).grads;
  SgdOptions sgd;
  sgd.kind = kind;
  sgd.momentum = 0.9;
  sgd.weightDecay = 1e-3;
  if (lars) {  // on the weights; the biases keep plain SGD (the MLPerf skip list)
    sgd.larsEta = 0.001;
    sgd.decay = [](const Tensor& t) { return t.name[0] == 'w'; };
  }
  appendSgdUpdate(g, grads, lr, sgd);
  return g;
}

const std::vector<std::string> kWeights = {"w1", "b1", "w2", "b2"};

std::vector<float> initialValue(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.elements()), 0.0f);
  if (t.name.ends_with("/rms")) v.assign(v.size(), 1.0f);  // RMSProp's mean square starts at 1
  if (t.name.find('/') != std::string::npos) return v;     // optimizer state, accumulators
  std::mt19937 rng(static_cast<unsigned>(std::hash<std::string>{}(t.name)));
  std::normal_distribution<float> d(0.0f, 0.3f);
  for (float& x : v) x = d(rng);
  return v;
}

// Samples of the whole run: `steps` x `global` rows.
struct Data {
  std::vector<float> x;
  std::vector<std::int32_t> y;
};
Data makeData(i64 rows) {
  Data d;
  std::mt19937 rng(7);
  std::normal_distribution<float> nx(0.0f, 1.0f);
  std::uniform_int_distribution<int> ny(0, kClasses - 1);
  for (i64 i = 0; i < rows * kIn; ++i) d.x.push_back(nx(rng));
  for (i64 i = 0; i < rows; ++i) d.y.push_back(ny(rng));
  return d;
}

struct Layout {
  int replicas = 1, accumulation = 1, deviceIterations = 1;
  i64 microBatch = 4;
  bool sharded = false;
  EngineMode mode = EngineMode::Fused;
  i64 hidden = 20;
  bool lars = false;
  float lr = 0.05f;
  const char* optimizer = "sgd";
};

std::shared_ptr<Executable> compileRun(const Layout& r) {
  auto rg = replication::replicate(mlpTraining(r.microBatch, r.hidden, r.lars, r.optimizer),
                                   ReplicationOptions{r.replicas, r.accumulation, r.sharded});
  CompileOptions co;
  co.deviceIterations = r.deviceIterations;
  rg.configure(co, r.accumulation);
  return std::make_shared<Executable>(compile(rg.graph, Target::mk2(), co));
}

// Trains `calls` host calls; replica k of step s reads rows [(s*R + k) * A*b, ...) - so the
// global batch of a step is the same rows whatever R x A x b split them.
struct Trained {
  std::vector<std::vector<std::vector<float>>> weights;  // [replica][weight]
};
Trained train(const Layout& r, int calls, const Data& d) {
  auto exe = compileRun(r);
  ReplicaGroupOptions o;
  o.mode = r.mode;
  o.replicas = r.replicas;
  ReplicaGroup group(exe, o);
  const Graph& g = exe->graph;
  for (const Tensor& t : g.tensors())
    if (t.kind == TensorKind::Variable) {
      auto v = initialValue(t);
      group.writeAll(t.id, v.data(), v.size() * sizeof(float));
    }
  const i64 b = r.microBatch, perReplicaStep = r.accumulation * b;
  const i64 perCall = r.deviceIterations * perReplicaStep;  // rows per replica per call
  std::vector<std::vector<float>> xs(r.replicas, std::vector<float>(perCall * kIn));
  std::vector<std::vector<std::int32_t>> ys(r.replicas, std::vector<std::int32_t>(perCall));
  std::vector<float> lrs(static_cast<size_t>(r.deviceIterations * r.accumulation), r.lr);
  std::vector<float> losses(r.replicas * r.deviceIterations * r.accumulation);
  for (int k = 0; k < r.replicas; ++k) {
    Engine& e = group.engine(k);
    e.connectInput(g.get("x"), xs[k].data());
    e.connectInput(g.get("labels"), ys[k].data());
    e.connectInput(g.get("lr"), lrs.data());
    e.connectOutput(g.get("loss"), &losses[k * r.deviceIterations * r.accumulation]);
  }
  i64 step = 0;
  for (int c = 0; c < calls; ++c) {
    for (int it = 0; it < r.deviceIterations; ++it, ++step)
      for (int k = 0; k < r.replicas; ++k) {
        const i64 row0 = (step * r.replicas + k) * perReplicaStep;
        std::memcpy(xs[k].data() + it * perReplicaStep * kIn, d.x.data() + row0 * kIn,
                    perReplicaStep * kIn * sizeof(float));
        std::memcpy(ys[k].data() + it * perReplicaStep, d.y.data() + row0,
                    perReplicaStep * sizeof(std::int32_t));
      }
    group.run();
  }
  Trained t;
  for (int k = 0; k < r.replicas; ++k) {
    t.weights.emplace_back();
    for (const std::string& w : kWeights) t.weights.back().push_back(group.engine(k).readFloats(w));
  }
  return t;
}

void expectClose(const Trained& a, const Trained& b, double tol) {
  for (size_t w = 0; w < kWeights.size(); ++w) {
    const auto &x = a.weights[0][w], &y = b.weights[0][w];
    ASSERT_EQ(x.size(), y.size());
    double maxDiff = 0, maxAbs = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      maxDiff = std::max(maxDiff, static_cast<double>(std::fabs(x[i] - y[i])));
      maxAbs = std::max(maxAbs, static_cast<double>(std::fabs(y[i])));
    }
    EXPECT_LE(maxDiff, tol * std::max(1.0, maxAbs)) << kWeights[w];
  }
}

void expectBitIdentical(const Trained& a, const Trained& b) {
  for (size_t w = 0; w < kWeights.size(); ++w)
    EXPECT_EQ(0, std::memcmp(a.weights[0][w].data(), b.weights[0][w].data(),
                             a.weights[0][w].size() * sizeof(float)))
        << kWeights[w];
}

const Data& data() {
  static const Data d = makeData(4096);
  return d;
}

TEST(Replication, ReplicasStayBitIdentical) {
  for (EngineMode mode : {EngineMode::Fused, EngineMode::Tile}) {
    Layout r;
    r.replicas = 4;
    r.mode = mode;
    Trained t = train(r, 3, data());
    for (int k = 1; k < r.replicas; ++k)
      for (size_t w = 0; w < kWeights.size(); ++w)
        EXPECT_EQ(0, std::memcmp(t.weights[0][w].data(), t.weights[k][w].data(),
                                 t.weights[0][w].size() * sizeof(float)))
            << engineModeName(mode) << " replica " << k << " " << kWeights[w];
  }
}

TEST(Replication, ReplicasOfMicroBatchEqualOneReplicaOfGlobalBatch) {
  Layout many, one;
  many.replicas = 4, many.microBatch = 4;
  one.replicas = 1, one.microBatch = 16;
  Trained a = train(many, 6, data()), b = train(one, 6, data());
  expectClose(a, b, 2e-5);
  // And the replication actually changes the trajectory: 1 replica of 4 differs.
  Layout small;
  small.microBatch = 4;
  Trained c = train(small, 6, data());
  EXPECT_GT(std::fabs(c.weights[0][0][0] - b.weights[0][0][0]), 1e-4);
}

TEST(Replication, AccumulationEqualsOneLargerBatch) {
  Layout acc, one;
  acc.accumulation = 4, acc.microBatch = 4;
  one.microBatch = 16;
  expectClose(train(acc, 6, data()), train(one, 6, data()), 2e-5);
  // Replicas and accumulation together: 2 x 2 x 4 = 16.
  Layout both;
  both.replicas = 2, both.accumulation = 2, both.microBatch = 4;
  expectClose(train(both, 6, data()), train(one, 6, data()), 2e-5);
}

TEST(Replication, LarsTrustRatiosUseTheGradientOfTheWholeGlobalBatch) {
  // The norms are taken after the all-reduce (compile() expands LARS after the replication
  // pass): 4 replicas x 4, and 2 replicas x 2 micro-batches x 4, equal one replica of 16.
  for (EngineMode mode : {EngineMode::Fused, EngineMode::Tile}) {
    Layout many, mixed, one;
    for (Layout* l : {&many, &mixed, &one}) l->lars = true, l->lr = 5.0f, l->mode = mode;
    many.replicas = 4, many.microBatch = 4;
    mixed.replicas = 2, mixed.accumulation = 2, mixed.microBatch = 4;
    one.microBatch = 16;
    const Trained b = train(one, 6, data());
    expectClose(train(many, 6, data()), b, 2e-5);
    expectClose(train(mixed, 6, data()), b, 2e-5);
    // LARS changes the trajectory (the trust ratios are far from 1 here).
    Layout sgd = one;
    sgd.lars = false;
    sgd.lr = 0.05f;
    const Trained c = train(sgd, 6, data());
    EXPECT_GT(std::fabs(c.weights[0][0][0] - b.weights[0][0][0]), 1e-4) << engineModeName(mode);
  }
  // Sharded optimizer state would need norms across the shards: refused, naming the weight.
  try {
    replication::replicate(mlpTraining(4, 20, true), ReplicationOptions{2, 1, true});
    FAIL() << "LARS with sharded optimizer state was accepted";
  } catch (const GraphError& e) {
    EXPECT_NE(std::string(e.what()).find("'w1' uses lars"), std::string::npos) << e.what();
  }
}

TEST(Replication, DeviceIterationsEqualSeparateCalls) {
  Layout d3, d1;
  d3.replicas = d1.replicas = 2;
  d3.accumulation = d1.accumulation = 2;
  d3.deviceIterations = 3;
  expectBitIdentical(train(d3, 2, data()), train(d1, 6, data()));
}

TEST(Replication, ShardedOptimizerStateMatchesAndSavesMemory) {
  Layout plain, sharded;
  plain.replicas = sharded.replicas = 4;
  sharded.sharded = true;
  // The same arithmetic per element; only the vectorised loop's remainder split differs at chunk
  // boundaries (FMA contraction), so agreement is to rounding, and replicas stay bit-identical.
  for (EngineMode mode : {EngineMode::Fused, EngineMode::Tile}) {
    sharded.mode = mode;
    Trained s = train(sharded, 4, data());
    expectClose(s, train(plain, 4, data()), 1e-6);
    for (int k = 1; k < sharded.replicas; ++k)
      for (size_t w = 0; w < kWeights.size(); ++w)
        EXPECT_EQ(0, std::memcmp(s.weights[0][w].data(), s.weights[k][w].data(),
                                 s.weights[0][w].size() * sizeof(float)));
  }

  plain.hidden = sharded.hidden = 2048;
  auto p = compileRun(plain), s = compileRun(sharded);
  const i64 weights = (kIn * 2048 + 2048 + 2048 * kClasses + kClasses) * 4;
  EXPECT_EQ(p->optimizerStateBytes, weights);
  const i64 shard = s->optimizerStateBytes;
  EXPECT_LE(shard, weights / 4 + 4 * 4);  // 1/R of every momentum, rounded up per tensor
  EXPECT_EQ(s->report()["replication"]["optimizer_state_bytes"].get<i64>(), shard);
  EXPECT_EQ(p->report()["replication"]["optimizer_state_bytes"].get<i64>(), weights);
  // The tiles' always-live variables shrink by about the momentum saved. (Their code and vertex
  // state do not: the lowered sharded update runs binary ops on the weight's chunk, which adds
  // codelets and vertices on the tiles that hold it; for this small perceptron that outweighs
  // the momentum, 3,227,696 vs 3,056,352 B of always-live memory over all tiles.)
  auto alwaysLiveVariables = [](const Executable& e) {
    i64 sum = 0;
    for (const Buffer& b : e.buffers)
      if (b.alwaysLive) sum += b.bytes();
    return sum;
  };
  EXPECT_LT(alwaysLiveVariables(*s), alwaysLiveVariables(*p) - (weights - shard) / 2)
      << alwaysLiveVariables(*s) << " vs " << alwaysLiveVariables(*p);
}

// Sharding is a property of the update, whatever the optimizer: each replica runs the same
// elementwise ops on its chunk, so the weights equal the unsharded run's to the bit.
TEST(Replication, ShardedAdamAndRmsPropEqualUnsharded) {
  for (const char* kind : {"sgd", "adam", "rmsprop"}) {
    Layout plain, sharded;
    plain.replicas = sharded.replicas = 4;
    plain.optimizer = sharded.optimizer = kind;
    plain.lr = sharded.lr = 0.01f;
    sharded.sharded = true;
    SCOPED_TRACE(kind);
    const Trained s = train(sharded, 3, data());
    expectBitIdentical(s, train(plain, 3, data()));
    for (int k = 1; k < sharded.replicas; ++k)
      for (size_t w = 0; w < kWeights.size(); ++w)
        EXPECT_EQ(0, std::memcmp(s.weights[0][w].data(), s.weights[k][w].data(),
                                 s.weights[0][w].size() * sizeof(float)));
  }
}

// Each replica's program is checked against one IPU's tile memory, as a single IPU's is: a
// capacity between the sharded and the plain replica's worst tile admits only the sharded one.
TEST(Replication, TileMemoryIsCheckedPerReplicaAndShardingMakesItFit) {
  auto worstTile = [](bool sharded, const Target& t, bool check) {
    auto rg = replication::replicate(mlpTraining(4, 2048), ReplicationOptions{8, 1, sharded});
    CompileOptions co;
    co.checkMemory = check;
    rg.configure(co, 1);
    return compile(rg.graph, t, co).report()["memory"]["max_tile_bytes"].get<i64>();
  };
  // The plan depends on the tile size (large operands are split against a per-tile window
  // budget), so look for a tile size at which the sharded replica fits and the plain one does
  // not: each size of a coarse sweep, then the middle of the two worst tiles it gave.
  bool found = false;
  std::vector<std::pair<i64, bool>> sizes;  // (tile bytes, from the sweep)
  for (i64 bytes = 16 << 10; bytes <= (4 << 20); bytes += bytes / 4)
    sizes.emplace_back(bytes, true);
  for (size_t i = 0; i < sizes.size() && !found; ++i) {
    const auto [bytes, swept] = sizes[i];
    const Target t = Target::small(64, bytes);
    const i64 plain = worstTile(false, t, false), sharded = worstTile(true, t, false);
    ASSERT_LT(sharded, plain) << bytes << " B tiles";
    if (sharded > bytes || plain <= bytes) {
      if (swept)
        sizes.insert(sizes.begin() + static_cast<long>(i) + 1, {(sharded + plain) / 2, false});
      continue;
    }
    found = true;
    EXPECT_THROW(worstTile(false, t, true), CompileError) << bytes << " B tiles";
    EXPECT_EQ(worstTile(true, t, true), sharded) << bytes << " B tiles";
  }
  EXPECT_TRUE(found) << "no tile size where only the sharded replica fits";
}

TEST(Replication, ProgramHasRingCollectivesInTheUpdatePart) {
  Layout r;
  r.replicas = 4;
  r.accumulation = 2;
  auto exe = compileRun(r);
  const std::string text = exe->program.describe(*exe);
  EXPECT_NE(text.find("Repeat(2) {  // gradient accumulation"), std::string::npos) << text;
  EXPECT_NE(text.find("CrossReplicaReduceScatter(w1/grad_chunk"), std::string::npos) << text;
  EXPECT_NE(text.find("CrossReplicaAllGather(w1/grad_mean"), std::string::npos) << text;
  EXPECT_NE(text.find("ring over 4 replicas"), std::string::npos) << text;
}

TEST(Replication, FailedReplicaStopsItsSiblings) {
  Layout r;
  r.replicas = 3;
  auto exe = compileRun(r);
  ReplicaGroupOptions o;
  o.replicas = 3;
  o.timeout = std::chrono::seconds(20);
  ReplicaGroup group(exe, o);
  std::vector<float> x(r.microBatch * kIn), lr(1, 0.1f), loss(1);
  std::vector<std::int32_t> y(r.microBatch);
  for (int k = 0; k < 3; ++k) {
    Engine& e = group.engine(k);
    e.connectInput(exe->graph.get("x"), x.data());
    if (k != 1) e.connectInput(exe->graph.get("labels"), y.data());  // replica 1 will fail
    e.connectInput(exe->graph.get("lr"), lr.data());
  }
  const auto t0 = std::chrono::steady_clock::now();
  try {
    group.run();
    FAIL() << "expected the run to fail";
  } catch (const CollectiveError&) {
    FAIL() << "the root cause should be rethrown, not the collective abort";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("'labels'"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

// Every replica holds its own tensors: a group whose copies do not fit the host's memory is
// refused after the first copy, with the sizes and a hint, instead of being killed part way.
// Sets IPU_HOST_MEMORY_LIMIT_GB to `gb` for its lifetime (unset again however the test ends).
struct HostMemoryLimit {
  explicit HostMemoryLimit(double gb) {
    EXPECT_EQ(setenv("IPU_HOST_MEMORY_LIMIT_GB", fmt::format("{:.9f}", gb).c_str(), 1), 0);
  }
  ~HostMemoryLimit() { unsetenv("IPU_HOST_MEMORY_LIMIT_GB"); }
};

TEST(Replication, ReplicasBeyondTheHostsMemoryAreRefusedBeforeAllocation) {
  Layout r;
  r.replicas = 4;
  auto exe = compileRun(r);
  ReplicaGroupOptions o;
  o.replicas = 4;
  unsetenv("IPU_HOST_MEMORY_LIMIT_GB");
  const double each = static_cast<double>(ReplicaGroup(exe, o).engine(0).tensorMemoryBytes());
  ASSERT_GT(each, 0);
  try {
    HostMemoryLimit limit(2.5 * each / 1e9);  // room for 2 more copies, not 3
    ReplicaGroup group(exe, o);
    FAIL() << "expected HostMemoryError";
  } catch (const replication::HostMemoryError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("4 replicas in this process need"), std::string::npos) << m;
    EXPECT_NE(m.find("IPU_HOST_MEMORY_LIMIT_GB"), std::string::npos) << m;
    EXPECT_NE(m.find("mpirun -np N"), std::string::npos) << m;
  }
  // Ample room (the first copy's resident growth may exceed its tensors): built.
  HostMemoryLimit ample(1000.0 * each / 1e9 + 1.0);
  EXPECT_NO_THROW(ReplicaGroup(exe, o));
}

TEST(Replication, BadOptionsAreRefusedClearly) {
  EXPECT_THROW(replication::replicate(mlpTraining(4), ReplicationOptions{0, 1, false}), GraphError);
  auto exe = compileRun(Layout{4, 1, 1, 4, false, EngineMode::Fused, 20});
  try {
    Engine e(exe);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("compiled for 4 replicas"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ipu
