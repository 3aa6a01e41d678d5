// BERT through the replication pass: R replicas of b packs and A accumulated micro-batches of b
// train as one replica of the global batch (LAMB with global-norm clipping, whose one norm
// needs every reduced gradient before the first update), in both engine modes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "ipu_backend/compiler/compiler.h"
#include "ipu_backend/replication/replica_group.h"
#include "ipu_backend/replication/replicate.h"
#include "models/bert_large/bert.h"

namespace ipu::models {
namespace {

constexpr i64 kSeq = 16, kSlots = 3;
constexpr int kSteps = 3;

// Row r of the run: one sequence of kSeq tokens, three masked tokens (every micro-batch has as
// many masked tokens and sequences as every other, so the mean of per-replica losses is the
// loss of the global batch, as in the reference's data-parallel runs).
BertHostBatch rowsOf(i64 first, i64 rows, int vocab) {
  BertHostBatch h;
  for (i64 r = first; r < first + rows; ++r) {
    std::mt19937 rng(static_cast<unsigned>(1000 + r));
    std::uniform_int_distribution<int> token(5, vocab - 1);
    for (i64 p = 0; p < kSeq; ++p) {
      h.inputIds.push_back(token(rng));
      h.segmentIds.push_back(p < kSeq / 2 ? 0 : 1);
      h.positions.push_back(static_cast<std::int32_t>(p));
      h.sequenceIndex.push_back(1);
    }
    for (i64 k = 0; k < kSlots; ++k) {
      h.maskedPositions.push_back(static_cast<std::int32_t>(1 + 4 * k + r % 3));
      h.maskedIds.push_back(token(rng));
      h.maskedSequence.push_back(1);
    }
    h.clsPositions.push_back(0);
    h.nspLabels.push_back(static_cast<std::int32_t>(r % 2));
    h.nspWeights.push_back(1);
  }
  return h;
}

struct Layout {
  int replicas = 1, accumulation = 1;
  i64 microBatch = 4;
  EngineMode mode = EngineMode::Fused;
};

using Weights = std::map<std::string, std::vector<float>>;

// Trains kSteps global batches; replica k's accumulation slot a of step s reads the rows
// [((s * R + k) * A + a) * b, ... + b), so every layout sees the same rows per step.
Weights train(const Layout& l) {
  const BertConfig c = BertConfig::small();
  OptimizerOptions o = bertLambOptions();
  o.maxGradNorm = 1.0;  // the reference's clip_by_global_norm
  const BertGraph bg = buildBertTraining(c, {l.microBatch, kSeq, kSlots, 1}, o);
  auto rg = replication::replicate(bg.graph, {l.replicas, l.accumulation, false});
  CompileOptions co;
  co.checkMemory = false;
  rg.configure(co, l.accumulation);
  auto exe = std::make_shared<const Executable>(compile(rg.graph, Target::mk2(), co));
  replication::ReplicaGroupOptions go;
  go.mode = l.mode;
  go.replicas = l.replicas;
  replication::ReplicaGroup group(exe, go);
  const Graph& g = exe->graph;
  const Weights init = initBertWeights(bg, 42);
  for (const Tensor& t : g.tensors()) {
    if (t.kind != TensorKind::Variable) continue;
    auto it = init.find(t.name);
    std::vector<float> v = it != init.end() ? it->second : std::vector<float>(t.elements(), 0.0f);
    EXPECT_EQ(static_cast<i64>(v.size()), t.elements()) << t.name;
    group.writeAll(t.id, v.data(), v.size() * sizeof(float));
  }
  // Per replica: A micro-batches of every input, one after the other.
  const std::vector<int> ints = {bg.inputIds,   bg.segmentIds,   bg.positionIds,
                                 bg.maskedRows, bg.maskedLabels, bg.maskedLabelIndex,
                                 bg.clsRows,    bg.nspLabels};
  const std::vector<int> floats = {bg.sequenceIndex, bg.maskedWeights, bg.nspWeights};
  std::vector<std::map<int, std::vector<std::int32_t>>> intFeeds(l.replicas);
  std::vector<std::map<int, std::vector<float>>> floatFeeds(l.replicas);
  std::vector<float> lrs(static_cast<size_t>(l.accumulation), 2e-2f);
  // The replicated graph numbers its tensors anew: inputs are found by name.
  auto in = [&](int t) { return g.get(bg.graph.tensor(t).name); };
  for (int k = 0; k < l.replicas; ++k) {
    Engine& e = group.engine(k);
    for (int t : ints) {
      intFeeds[k][t].resize(static_cast<size_t>(g.tensor(in(t)).elements() * l.accumulation));
      e.connectInput(in(t), intFeeds[k][t].data());
    }
    for (int t : floats) {
      floatFeeds[k][t].resize(static_cast<size_t>(g.tensor(in(t)).elements() * l.accumulation));
      e.connectInput(in(t), floatFeeds[k][t].data());
    }
    e.connectInput(in(bg.lr), lrs.data());
  }
  for (int s = 0; s < kSteps; ++s) {
    for (int k = 0; k < l.replicas; ++k)
      for (int a = 0; a < l.accumulation; ++a) {
        const i64 first = ((s * l.replicas + k) * l.accumulation + a) * l.microBatch;
        const BertFeeds f = makeBertFeeds(bg, rowsOf(first, l.microBatch, c.vocab));
        const std::map<int, const std::vector<std::int32_t>*> fi = {
            {bg.inputIds, &f.inputIds},         {bg.segmentIds, &f.segmentIds},
            {bg.positionIds, &f.positionIds},   {bg.maskedRows, &f.maskedRows},
            {bg.maskedLabels, &f.maskedLabels}, {bg.maskedLabelIndex, &f.maskedLabelIndex},
            {bg.clsRows, &f.clsRows},           {bg.nspLabels, &f.nspLabels}};
        const std::map<int, const std::vector<float>*> ff = {{bg.sequenceIndex, &f.sequenceIndex},
                                                             {bg.maskedWeights, &f.maskedWeights},
                                                             {bg.nspWeights, &f.nspWeights}};
        for (const auto& [t, v] : fi)
          std::memcpy(intFeeds[k][t].data() + a * v->size(), v->data(),
                      v->size() * sizeof(std::int32_t));
        for (const auto& [t, v] : ff)
          std::memcpy(floatFeeds[k][t].data() + a * v->size(), v->data(),
                      v->size() * sizeof(float));
      }
    group.run();
  }
  Weights w;
  for (int p : bg.params)
    w[bg.graph.tensor(p).name] = group.engine(0).readFloats(bg.graph.tensor(p).name);
  return w;
}

// The largest difference of any weight, relative to max(1, that weight's largest magnitude).
double maxDifference(const Weights& a, const Weights& b, std::string* where) {
  double worst = 0;
  for (const auto& [name, x] : a) {
    const std::vector<float>& y = b.at(name);
    double diff = 0, scale = 1;
    for (size_t i = 0; i < x.size(); ++i) {
      diff = std::max(diff, static_cast<double>(std::fabs(x[i] - y[i])));
      scale = std::max(scale, static_cast<double>(std::fabs(y[i])));
    }
    if (diff / scale > worst) {
      worst = diff / scale;
      *where = name;
    }
  }
  return worst;
}

TEST(BertReplication, ReplicasAndAccumulationEqualOneReplicaOfTheGlobalBatch) {
  for (EngineMode mode : {EngineMode::Fused, EngineMode::Tile}) {
    SCOPED_TRACE(engineModeName(mode));
    Layout one, replicas, accumulated;
    one.microBatch = 4;
    replicas.replicas = 2, replicas.microBatch = 2;
    accumulated.accumulation = 2, accumulated.microBatch = 2;
    one.mode = replicas.mode = accumulated.mode = mode;
    const Weights ref = train(one);
    std::string where;
    EXPECT_LE(maxDifference(train(replicas), ref, &where), 2e-5) << "2 replicas x 2: " << where;
    EXPECT_LE(maxDifference(train(accumulated), ref, &where), 2e-5)
        << "accumulation 2 x 2: " << where;
    // The comparison can tell: one replica of half the global batch trains elsewhere.
    if (mode == EngineMode::Fused) {
      Layout half;
      half.microBatch = 2;
      EXPECT_GT(maxDifference(train(half), ref, &where), 1e-3);
    }
  }
}

}  // namespace
}  // namespace ipu::models
