// Pipelining (ipu_backend/compiler/pipeline.h, engine/pipeline_engine.h): S-stage training gives
// the weights of unpipelined training of the same global batch (small CNN, small ResNet-50, f32
// and 16.16), tile mode equals fused mode on a pipelined step, R replicas of an S-IPU pipeline
// equal one process's, the schedules' rules and stash depths hold, and bad placements are
// refused before anything runs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <thread>

#include "ipu_backend/compiler/autodiff.h"
#include "ipu_backend/compiler/compiler.h"
#include "ipu_backend/compiler/pipeline.h"
#include "ipu_backend/cost/pipeline_cost.h"
#include "ipu_backend/cost/pipeline_search.h"
#include "ipu_backend/engine/engine.h"
#include "ipu_backend/engine/pipeline_engine.h"
#include "ipu_backend/ir/builder.h"
#include "ipu_backend/replication/replicate.h"
#include "ipu_backend/replication/ring_collective.h"
#include "models/resnet50/resnet50.h"
#include "models/small_cnn/small_cnn.h"

namespace ipu::pipeline {
namespace {

using Values = std::map<std::string, std::vector<float>>;

// A test IPU: few tiles (quick to plan), enough memory for the tiny models.
Target testIpu() {
  return Target::small(32, 4 << 20);
}

models::SmallCnnConfig tinyCnn() {
  models::SmallCnnConfig c;
  c.conv1Channels = 4;
  c.conv2Channels = 8;
  return c;
}

struct Model {
  Graph graph;
  Values init;
  i64 batch = 0;
  Shape image;
  int classes = 10;
  std::vector<std::string> weights;  // compared after training
};

Model smallCnn(i64 batch, const std::string& policy = "") {
  SgdOptions sgd;
  sgd.momentum = 0.9;
  sgd.weightDecay = 1e-4;
  models::TaskGraph tg =
      policy.empty() ? models::buildSmallCnnTraining(tinyCnn(), batch, sgd)
                     : models::buildSmallCnnTraining(tinyCnn(), batch, sgd,
                                                     precision::PrecisionPolicy::parse(policy));
  Model m{tg.graph, models::initSmallCnn(tg.graph, 11), batch, {batch, 28, 28, 1}, 10, {}};
  models::applyOptimizerStateInit(tg.graph, tg.optimizer, m.init);
  for (const Tensor& t : tg.graph.tensors())
    if (t.kind == TensorKind::Variable) m.weights.push_back(t.name);
  return m;
}

Model smallResNet(i64 batch) {
  const models::ResNetConfig c = models::ResNetConfig::small();
  models::ResNetGraph rg = models::buildTraining(c, batch, models::resnetSgdOptions());
  Model m{rg.graph,     models::initWeights(rg, 5),
          batch,        {batch, c.inputH, c.inputW, c.inputC},
          c.numClasses, {}};
  for (const Tensor& t : rg.graph.tensors())
    if (t.kind == TensorKind::Variable) m.weights.push_back(t.name);
  return m;
}

// Host data of `steps` steps of G micro-batches, and the per-micro-batch scalars.
struct Feed {
  std::vector<std::vector<float>> images;  // per step: G micro-batches back to back
  std::vector<std::vector<std::int32_t>> labels;
  std::vector<float> lr, lossScale, lossScaleInverse;  // G copies
};
Feed makeFeed(const Model& m, int G, int steps) {
  Feed f;
  std::mt19937 rng(3);
  std::normal_distribution<float> nx(0.0f, 1.0f);
  std::uniform_int_distribution<int> ny(0, m.classes - 1);
  for (int s = 0; s < steps; ++s) {
    std::vector<float> x(static_cast<size_t>(numElements(m.image) * G));
    for (float& v : x) v = nx(rng);
    std::vector<std::int32_t> y(static_cast<size_t>(m.batch * G));
    for (auto& v : y) v = ny(rng);
    f.images.push_back(std::move(x));
    f.labels.push_back(std::move(y));
  }
  f.lr.assign(static_cast<size_t>(G), 0.05f);
  f.lossScale.assign(static_cast<size_t>(G), 128.0f);
  f.lossScaleInverse.assign(static_cast<size_t>(G), 1.0f / 128.0f);
  return f;
}

template <typename E>
void connectScalars(const Graph& g, E& e, Feed& f) {
  auto has = [&](const char* n) {
    const int t = g.find(n);
    return t >= 0 && g.tensor(t).kind == TensorKind::Input;
  };
  if (has("lr")) e.connectInput("lr", f.lr.data());
  if (has("loss_scale")) e.connectInput("loss_scale", f.lossScale.data());
  if (has("loss_scale_inverse")) e.connectInput("loss_scale_inverse", f.lossScaleInverse.data());
}

// An Engine addressed by name like PipelineEngine.
struct NamedEngine {
  Engine& e;
  void connectInput(const std::string& n, const void* d) {
    e.connectInput(e.executable().graph.get(n), d);
  }
};

// The unpipelined program of R replicas accumulating G micro-batches each: the reference the
// pipelines are held to.
std::shared_ptr<const Executable> compileUnpipelined(const Model& m, int R, int G) {
  replication::ReplicatedGraph rg = replication::replicate(m.graph, {R, G, false});
  CompileOptions co;
  rg.configure(co, G);
  return std::make_shared<const Executable>(compile(rg.graph, testIpu(), co));
}

// The model's initial values into an engine (unpipelined or pipelined).
template <class E>
void writeInitial(E& e, const Model& m) {
  for (const auto& [name, v] : m.init)
    if (e.executable().graph.find(name) >= 0) e.writeTensor(name, v);
}

// Unpipelined reference: the same global batch as G accumulated micro-batches on one IPU.
Values trainUnpipelined(const Model& m, int G, int steps, EngineMode mode,
                        bool microBatchesInterleaved) {
  auto exe = compileUnpipelined(m, 1, G);
  Engine e(exe, mode, {}, microBatchesInterleaved);
  writeInitial(e, m);
  Feed f = makeFeed(m, G, steps);
  NamedEngine ne{e};
  connectScalars(exe->graph, ne, f);
  for (int s = 0; s < steps; ++s) {
    e.connectInput(exe->graph.get("images"), f.images[static_cast<size_t>(s)].data());
    e.connectInput(exe->graph.get("labels"), f.labels[static_cast<size_t>(s)].data());
    e.run();
  }
  Values out;
  for (const std::string& w : m.weights) out[w] = e.readFloats(w);
  return out;
}

Values trainPipelined(const Model& m, const PipelineOptions& o, int steps, EngineMode mode,
                      std::vector<int>* stash = nullptr) {
  auto pe = std::make_shared<const PipelinedExecutable>(compilePipeline(m.graph, testIpu(), o));
  PipelineEngine e(pe, mode);
  writeInitial(e, m);
  Feed f = makeFeed(m, o.accumulation, steps);
  connectScalars(pe->graph, e, f);
  for (int s = 0; s < steps; ++s) {
    e.connectInput("images", f.images[static_cast<size_t>(s)].data());
    e.connectInput("labels", f.labels[static_cast<size_t>(s)].data());
    e.run();
  }
  if (stash) *stash = e.measuredStashDepth();
  Values out;
  for (const std::string& w : m.weights) out[w] = e.readFloats(w);
  return out;
}

void expectBitEqual(const Values& a, const Values& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, v] : a) {
    const std::vector<float>& w = b.at(name);
    ASSERT_EQ(v.size(), w.size()) << name;
    EXPECT_EQ(0, std::memcmp(v.data(), w.data(), v.size() * sizeof(float))) << name;
  }
}

// max |a - b| / (max |b| + 1e-6) over every weight.
double worstRelativeDifference(const Values& a, const Values& b, std::string* where = nullptr) {
  double worst = 0;
  for (const auto& [name, v] : a) {
    const std::vector<float>& w = b.at(name);
    double diff = 0, scale = 1e-6;
    for (size_t i = 0; i < v.size(); ++i) {
      diff = std::max(diff, std::fabs(static_cast<double>(v[i]) - w[i]));
      scale = std::max(scale, std::fabs(static_cast<double>(w[i])));
    }
    if (diff / scale > worst) {
      worst = diff / scale;
      if (where) *where = name;
    }
  }
  return worst;
}

bool weightsChanged(const Values& trained, const Model& m) {
  for (const auto& [name, v] : trained)
    if (auto it = m.init.find(name); it != m.init.end() && it->second != v) return true;
  return false;
}

PipelineOptions options(std::vector<std::string> splits, Schedule s, int G) {
  PipelineOptions o;
  o.splits = std::move(splits);
  o.schedule = s;
  o.accumulation = G;
  return o;
}

// ---- numerics ---------------------------------------------------------------------------------

TEST(PipelineNumerics, SmallCnnEveryScheduleGivesTheUnpipelinedWeightsBitForBit) {
  const Model m = smallCnn(4);
  const int steps = 2;
  // The reference runs with the fusions a pipeline allows (no forward -> backward state); the
  // default fused engine is compared within a tolerance below.
  const Values reference = trainUnpipelined(m, 6, steps, EngineMode::Fused, true);
  ASSERT_TRUE(weightsChanged(reference, m));
  for (Schedule s : {Schedule::Grouped, Schedule::Interleaved, Schedule::Sequential}) {
    SCOPED_TRACE(std::string(scheduleName(s)));
    expectBitEqual(trainPipelined(m, options({"pool1", "relu2"}, s, 6), steps, EngineMode::Fused),
                   reference);
  }
  // Two stages, one split at a layer prefix.
  const Values ref4 = trainUnpipelined(m, 4, steps, EngineMode::Fused, true);
  expectBitEqual(
      trainPipelined(m, options({"conv2"}, Schedule::Grouped, 4), steps, EngineMode::Fused), ref4);
  const Values defaultFused = trainUnpipelined(m, 4, steps, EngineMode::Fused, false);
  EXPECT_LT(worstRelativeDifference(ref4, defaultFused), 1e-5);
}

TEST(PipelineNumerics, SmallResNetThreeStagesGivesTheUnpipelinedWeightsBitForBit) {
  const Model m = smallResNet(2);
  const int steps = 2;
  const Values reference = trainUnpipelined(m, 6, steps, EngineMode::Fused, true);
  ASSERT_TRUE(weightsChanged(reference, m));
  expectBitEqual(trainPipelined(m, options({"stage1_unit1", "stage3_unit1"}, Schedule::Grouped, 6),
                                steps, EngineMode::Fused),
                 reference);
}

// Recomputation inside the pipeline: only what crosses the stage boundaries is stashed, and the
// recomputed forwards give the same bits.
TEST(PipelineRecompute, StashesOnlyTheStageBoundariesWithTheSameBits) {
  const Model m = smallResNet(2);
  const int steps = 2;
  const Values reference = trainUnpipelined(m, 6, steps, EngineMode::Fused, true);
  ASSERT_TRUE(weightsChanged(reference, m));
  PipelineOptions plain = options({"stage1_unit1", "stage3_unit1"}, Schedule::Grouped, 6);
  PipelineOptions recomputed = plain;
  recomputed.recompute = true;
  expectBitEqual(trainPipelined(m, recomputed, steps, EngineMode::Fused), reference);

  const PipelinedExecutable without = compilePipeline(m.graph, testIpu(), plain);
  const PipelinedExecutable with = compilePipeline(m.graph, testIpu(), recomputed);
  EXPECT_GT(with.recomputation.recomputedOps, 0);
  EXPECT_GT(with.recomputation.recomputedMacs, 0);
  // The last stage is not recomputed: its activations are read right after its forward.
  EXPECT_LT(with.recomputation.recomputedMacs, with.recomputation.forwardMacs);
  i64 stashWithout = 0, stashWith = 0;
  for (const IpuProgram& p : without.programs) stashWithout += p.stashBytes;
  for (const IpuProgram& p : with.programs) stashWith += p.stashBytes;
  EXPECT_LT(stashWith, stashWithout / 2) << without.describe() << with.describe();
  std::printf("activation stashes: %lld B without recomputation, %lld B with\n",
              static_cast<long long>(stashWithout), static_cast<long long>(stashWith));
  // What a stage's backward reads from the forwards is now only what crosses its boundaries.
  const auto consumers = with.graph.consumers();
  for (const Transfer& t : with.transfers) {
    const Segment& from = with.segments[static_cast<size_t>(t.fromSegment < 0 ? 0 : t.fromSegment)];
    const Segment& to = with.segments[static_cast<size_t>(t.toSegment)];
    if (t.fromSegment < 0 || from.phase != Phase::Forward || to.phase != Phase::Backward ||
        to.stage == with.stages - 1)
      continue;
    const int producer = with.graph.tensor(t.tensor).producer;
    bool crosses = false;
    for (int c : consumers[static_cast<size_t>(t.tensor)])
      crosses = crosses || (with.opPhase[static_cast<size_t>(c)] == Phase::Forward &&
                            with.opStage[static_cast<size_t>(c)] !=
                                with.opStage[static_cast<size_t>(producer)]);
    EXPECT_TRUE(crosses) << "stage " << to.stage << " stashes '" << with.graph.tensor(t.tensor).name
                         << "', which no other stage reads";
  }

  PipelineOptions bad = plain;
  bad.checkpoints = {"stage2_unit1_relu3"};
  EXPECT_THROW(compilePipeline(m.graph, testIpu(), bad), PipelineError);
}

TEST(PipelineNumerics, SmallCnnInSixteenSixteenMatchesUnpipelined) {
  const Model m = smallCnn(4, "16.16");
  const int steps = 2;
  const Values reference = trainUnpipelined(m, 4, steps, EngineMode::Fused, true);
  ASSERT_TRUE(weightsChanged(reference, m));
  const Values piped =
      trainPipelined(m, options({"pool1"}, Schedule::Grouped, 4), steps, EngineMode::Fused);
  // The same ops on the same micro-batches in the same order, the stochastic rounding keyed by
  // the same steps: bit for bit, within the 16-bit tolerance a fortiori.
  expectBitEqual(piped, reference);
}

TEST(PipelineNumerics, TileModeEqualsFusedModeOnAPipelinedStep) {
  const Model m = smallCnn(2);
  const PipelineOptions o = options({"pool1"}, Schedule::Grouped, 4);
  const Values tile = trainPipelined(m, o, 1, EngineMode::Tile);
  const Values fused = trainPipelined(m, o, 1, EngineMode::Fused);
  ASSERT_TRUE(weightsChanged(tile, m));
  std::string where;
  EXPECT_LT(worstRelativeDifference(tile, fused, &where), 2e-5) << where;
  // Tile mode has no host fusions: its pipeline gives the unpipelined tile-mode bits.
  expectBitEqual(tile, trainUnpipelined(m, 4, 1, EngineMode::Tile, true));
}

// R replicas of `model`, each in its own thread on one ring, replica r fed feeds[r]: either
// S-IPU pipelines or (pipeline == nullptr) unpipelined replicas of G accumulated micro-batches.
Values trainReplicas(const Model& m, int R, int G, const PipelineOptions* pipeline,
                     std::vector<Feed>& feeds) {
  replication::RingCollective ring(R, 0, R);
  std::vector<std::function<void()>> run(static_cast<size_t>(R));
  std::vector<std::function<std::vector<float>(const std::string&)>> read(static_cast<size_t>(R));
  std::vector<std::shared_ptr<void>> keep;
  if (pipeline) {
    PipelineOptions o = *pipeline;
    o.replicas = R;
    auto pe = std::make_shared<const PipelinedExecutable>(compilePipeline(m.graph, testIpu(), o));
    for (int r = 0; r < R; ++r) {
      auto e = std::make_shared<PipelineEngine>(pe, EngineMode::Fused, ReplicaContext{r, &ring});
      writeInitial(*e, m);
      connectScalars(pe->graph, *e, feeds[r]);
      e->connectInput("images", feeds[r].images[0].data());
      e->connectInput("labels", feeds[r].labels[0].data());
      run[r] = [e] { e->run(); };
      read[r] = [e](const std::string& n) { return e->readFloats(n); };
      keep.push_back(e);
    }
  } else {
    auto exe = compileUnpipelined(m, R, G);
    for (int r = 0; r < R; ++r) {
      auto e = std::make_shared<Engine>(exe, EngineMode::Fused, ReplicaContext{r, &ring}, true);
      writeInitial(*e, m);
      NamedEngine ne{*e};
      connectScalars(exe->graph, ne, feeds[r]);
      ne.connectInput("images", feeds[r].images[0].data());
      ne.connectInput("labels", feeds[r].labels[0].data());
      run[r] = [e] { e->run(); };
      read[r] = [e](const std::string& n) { return e->readFloats(n); };
      keep.push_back(e);
    }
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < R; ++r) threads.emplace_back(run[r]);
  for (auto& t : threads) t.join();
  Values out;
  for (const std::string& w : m.weights) {
    out[w] = read[0](w);
    if (w.find("running") != std::string::npos) continue;  // batch statistics are per replica
    for (int r = 1; r < R; ++r) EXPECT_EQ(read[r](w), out[w]) << "replica " << r << " " << w;
  }
  return out;
}

TEST(PipelineNumerics, ReplicatedPipelinesEqualReplicatedUnpipelinedTraining) {
  // R = 2 replicas x 2 IPUs, threads joined by the ring, against 2 unpipelined replicas of the
  // same micro-batches: the gradients meet in the same ring after the same accumulation.
  const Model m = smallCnn(2);
  const int G = 4, R = 2;
  std::vector<Feed> feeds;
  for (int r = 0; r < R; ++r) {
    feeds.push_back(makeFeed(m, G, 1 + r));
    feeds.back().images.erase(feeds.back().images.begin(), feeds.back().images.begin() + r);
    feeds.back().labels.erase(feeds.back().labels.begin(), feeds.back().labels.begin() + r);
  }
  const PipelineOptions o = options({"pool1"}, Schedule::Grouped, G);
  const Values piped = trainReplicas(m, R, G, &o, feeds);
  const Values reference = trainReplicas(m, R, G, nullptr, feeds);
  ASSERT_TRUE(weightsChanged(reference, m));
  expectBitEqual(piped, reference);
}

// ---- schedules --------------------------------------------------------------------------------

TEST(PipelineSchedule, StashDepthsMeasuredWhileRunningAreTheDocumentedOnes) {
  const Model m = smallCnn(2);
  for (Schedule s : {Schedule::Grouped, Schedule::Interleaved, Schedule::Sequential}) {
    SCOPED_TRACE(std::string(scheduleName(s)));
    std::vector<int> measured;
    trainPipelined(m, options({"pool1", "relu2"}, s, 6), 1, EngineMode::Fused, &measured);
    ASSERT_EQ(measured.size(), 3u);
    for (int st = 0; st < 3; ++st) EXPECT_EQ(measured[st], stashDepth(s, 3, st)) << st;
  }
  EXPECT_EQ(stashDepth(Schedule::Grouped, 4, 0), 6);
  EXPECT_EQ(stashDepth(Schedule::Interleaved, 4, 0), 3);
}

TEST(PipelineSchedule, CyclesAreRampUpSteadyStateRampDown) {
  const std::vector<int> fwd = {0, 1, 2}, bwd = {3, 4, 5};
  EXPECT_EQ(scheduleCycles(Schedule::Grouped, 3, 6, fwd, bwd).size(), 6u + 2 * 3 - 2);
  EXPECT_EQ(scheduleCycles(Schedule::Interleaved, 3, 6, fwd, bwd).size(), 6u + 3 - 1);
  EXPECT_EQ(scheduleCycles(Schedule::Sequential, 3, 6, fwd, bwd).size(), 6u);
  // Every stage runs every micro-batch once forward and once backward.
  for (Schedule s : {Schedule::Grouped, Schedule::Interleaved, Schedule::Sequential}) {
    std::map<std::pair<int, int>, int> runs;
    for (const auto& c : scheduleCycles(s, 3, 6, fwd, bwd))
      for (const SegmentRun& r : c) ++runs[{r.segment, r.microBatch}];
    EXPECT_EQ(runs.size(), 36u);
    for (const auto& [k, n] : runs) EXPECT_EQ(n, 1);
  }
}

TEST(PipelineSchedule, AccumulationCountsTheScheduleRefusesNameTheRuleAndTheSmallestValidCount) {
  try {
    checkSchedule(Schedule::Grouped, 3, {0, 1, 2}, 8);
    FAIL() << "grouped G = 8 over 3 stages accepted";
  } catch (const PipelineError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("multiple of L = 6"), std::string::npos) << msg;
    EXPECT_NE(msg.find("smallest valid G is 6"), std::string::npos) << msg;
    EXPECT_NE(msg.find("nearest at or above 8 is 12"), std::string::npos) << msg;
  }
  EXPECT_THROW(checkSchedule(Schedule::Grouped, 3, {0, 1, 2}, 3), PipelineError);
  EXPECT_NO_THROW(checkSchedule(Schedule::Grouped, 3, {0, 1, 2}, 12));
  EXPECT_THROW(checkSchedule(Schedule::Interleaved, 3, {0, 1, 2}, 4), PipelineError);
  EXPECT_NO_THROW(checkSchedule(Schedule::Interleaved, 3, {0, 1, 2}, 6));
  EXPECT_NO_THROW(checkSchedule(Schedule::Sequential, 3, {0, 1, 2}, 1));
  // Two stages on one IPU: grouped runs them, interleaved refuses in training.
  EXPECT_NO_THROW(checkSchedule(Schedule::Grouped, 3, {0, 1, 0}, 6));
  try {
    checkSchedule(Schedule::Interleaved, 3, {0, 1, 0}, 3);
    FAIL();
  } catch (const PipelineError& e) {
    EXPECT_NE(std::string(e.what()).find("stages 0 and 2 are both on IPU 0"), std::string::npos)
        << e.what();
  }
  // compilePipeline refuses before anything is planned.
  const Model m = smallCnn(2);
  EXPECT_THROW(compilePipeline(m.graph, testIpu(), options({"pool1"}, Schedule::Grouped, 2)),
               PipelineError);
}

// ---- placement ----------------------------------------------------------------------------------

TEST(PipelinePlacement, TwoStagesMayShareAnIpu) {
  const Model m = smallCnn(2);
  PipelineOptions o = options({"pool1", "relu2"}, Schedule::Grouped, 6);
  o.stageIpu = {0, 1, 0};
  const Values shared = trainPipelined(m, o, 1, EngineMode::Fused);
  expectBitEqual(shared, trainUnpipelined(m, 6, 1, EngineMode::Fused, true));
  const PipelinedExecutable pe = compilePipeline(m.graph, testIpu(), o);
  ASSERT_EQ(pe.programs.size(), 2u);
  EXPECT_EQ(pe.programs[0].stages, (std::vector<int>{0, 2}));
  // Stage 0's stash (depth 4 over 3 stages, grouped) is planned in IPU 0's memory.
  EXPECT_GT(pe.programs[0].stashBytes, 0);
  i64 planned = 0;
  for (const Tensor& t : pe.programs[0].exe->graph.tensors())
    if (t.kind == TensorKind::Variable && t.name.ends_with("/stash")) planned += t.bytes();
  EXPECT_EQ(planned, pe.programs[0].stashBytes);
  EXPECT_GT(pe.interIpuBytesPerMicroBatch(), 0);
}

TEST(PipelinePlacement, SplitNamingNoOpIsRefusedWithCloseNames) {
  const Model m = smallCnn(2);
  try {
    compilePipeline(m.graph, testIpu(), options({"pool_1"}, Schedule::Grouped, 4));
    FAIL();
  } catch (const PipelineError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("split 'pool_1' names no forward op"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'pool1'"), std::string::npos) << msg;
  }
  EXPECT_THROW(
      compilePipeline(m.graph, testIpu(), options({"relu2", "pool1"}, Schedule::Grouped, 6)),
      PipelineError);
}

TEST(PipelinePlacement, MoreStagesThanIpusWithoutSharingIsRefused) {
  const Model m = smallCnn(2);
  PipelineOptions o = options({"pool1", "relu2"}, Schedule::Grouped, 6);
  o.ipus = 2;
  try {
    compilePipeline(m.graph, testIpu(), o);
    FAIL();
  } catch (const PipelineError& e) {
    EXPECT_NE(std::string(e.what()).find("3 stages (2 split points) on 2 IPUs"), std::string::npos)
        << e.what();
  }
  o.stageIpu = {0, 1, 2};
  EXPECT_THROW(compilePipeline(m.graph, testIpu(), o), PipelineError);
}

TEST(PipelinePlacement, AStageThatDoesNotFitNamesItsIpuAndTile) {
  const Model m = smallCnn(8);
  // Enough for the second stage, not for the first (its 28x28 activations and their stash).
  try {
    compilePipeline(m.graph, Target::small(8, 96 << 10), options({"pool1"}, Schedule::Grouped, 4));
    FAIL() << "fits";
  } catch (const CompileError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("IPU 0 of 2 of the pipeline (stages 0)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("tile "), std::string::npos) << msg;
    EXPECT_NE(msg.find("pipeline hint"), std::string::npos) << msg;
  }
}

// The IPU programs compile side by side; when several do not fit, the error is the first IPU's
// (the one compiling them one after another reports), whichever finishes first.
TEST(PipelinePlacement, WhenEveryIpuOverflowsTheFirstIpuIsNamed) {
  const Model m = smallCnn(8);
  PipelineOptions report = options({"pool1"}, Schedule::Grouped, 4);
  report.checkMemory = false;
  const PipelinedExecutable pe = compilePipeline(m.graph, Target::small(8, 16 << 10), report);
  for (const pipeline::IpuProgram& p : pe.programs)
    ASSERT_GT(p.peakTileBytes, 16 << 10) << "IPU " << p.ipu << " fits";
  for (int repeat = 0; repeat < 3; ++repeat) {
    try {
      compilePipeline(m.graph, Target::small(8, 16 << 10),
                      options({"pool1"}, Schedule::Grouped, 4));
      FAIL() << "fits";
    } catch (const pipeline::IpuDoesNotFit& e) {
      EXPECT_EQ(e.ipu(), 0) << e.what();
      EXPECT_NE(std::string(e.what()).find("IPU 0 of 2 of the pipeline"), std::string::npos)
          << e.what();
    }
  }
}

TEST(PipelinePlacement, LayerCountsBecomeSplits) {
  EXPECT_EQ(splitsFromLayerCounts({"a", "b", "c", "d"}, {1, 3}), (std::vector<std::string>{"a"}));
  EXPECT_EQ(splitsFromLayerCounts({"a", "b", "c", "d"}, {2, 1, 1}),
            (std::vector<std::string>{"b", "c"}));
  EXPECT_THROW(splitsFromLayerCounts({"a", "b"}, {1, 2}), PipelineError);
}

// ---- cost model --------------------------------------------------------------------------------

TEST(PipelineCost, GroupedStepIsRampPlusSteadyCyclesBoundByTheSlowestIpu) {
  const Model m = smallCnn(4);
  const PipelinedExecutable pe =
      compilePipeline(m.graph, testIpu(), options({"pool1", "relu2"}, Schedule::Grouped, 6));
  const cost::PipelineStepCost c = cost::estimatePipelineStep(pe);
  // PopART: G + P - 1 cycles with P = 2N - 1 stages after autodiff.
  EXPECT_EQ(c.cycles, 6 + (2 * 3 - 1) - 1);
  EXPECT_DOUBLE_EQ(c.rampFraction, 4.0 / 10.0);
  double slowest = 0, all = 0;
  for (int s = 0; s < 3; ++s) {
    EXPECT_GT(c.forwardSeconds[s], 0);
    EXPECT_GT(c.backwardSeconds[s], 0);
    slowest = std::max(slowest, c.forwardSeconds[s] + c.backwardSeconds[s]);
    all += c.forwardSeconds[s] + c.backwardSeconds[s];
  }
  EXPECT_GE(c.cycleSeconds, slowest);
  EXPECT_LT(c.cycleSeconds, all);  // the stages overlap
  EXPECT_GT(c.updateSeconds, 0);
  EXPECT_DOUBLE_EQ(c.seconds, c.cycles * c.cycleSeconds + c.updateSeconds);
  // Every IPU's forward + backward splits into compute, exchange and sync (stashes beside).
  for (size_t i = 0; i < c.ipuSeconds.size(); ++i) {
    EXPECT_GT(c.ipuComputeSeconds[i], 0);
    EXPECT_GT(c.ipuSyncSeconds[i], 0);
    EXPECT_NEAR(
        c.ipuComputeSeconds[i] + c.ipuExchangeSeconds[i] + c.ipuSyncSeconds[i] + c.stashSeconds[i],
        c.ipuSeconds[i], 1e-12 * c.ipuSeconds[i]);
  }
  // Sequential runs the same stages without overlap: slower per step.
  const PipelinedExecutable seq =
      compilePipeline(m.graph, testIpu(), options({"pool1", "relu2"}, Schedule::Sequential, 6));
  const cost::PipelineStepCost cs = cost::estimatePipelineStep(seq);
  EXPECT_EQ(cs.cycles, 6);
  EXPECT_GT(cs.seconds, c.seconds);
  // A larger G amortises the ramp: less time per micro-batch.
  const PipelinedExecutable g12 =
      compilePipeline(m.graph, testIpu(), options({"pool1", "relu2"}, Schedule::Grouped, 12));
  EXPECT_LT(cost::estimatePipelineStep(g12).seconds / 12, c.seconds / 6);
}

TEST(PipelineCost, InterIpuCopiesArePricedOverIpuLinksAndStashesAtTileMemoryBandwidth) {
  const Model m = smallCnn(4);
  const PipelinedExecutable pe =
      compilePipeline(m.graph, testIpu(), options({"pool1"}, Schedule::Grouped, 4));
  const cost::PipelineStepCost c = cost::estimatePipelineStep(pe);
  const Target t = testIpu();
  // IPU 0 sends pool1 forward; IPU 1 sends its gradient back.
  const double pool1 = static_cast<double>(pe.graph.tensor(pe.graph.get("pool1")).bytes());
  EXPECT_DOUBLE_EQ(c.copySeconds[0], pool1 / t.ipuLinkBytesPerSec);
  EXPECT_DOUBLE_EQ(c.copySeconds[1], pool1 / t.ipuLinkBytesPerSec);
  EXPECT_EQ(pe.interIpuBytesPerMicroBatch(), static_cast<i64>(2 * pool1));
  EXPECT_GT(c.stashSeconds[0], 0);
  EXPECT_GT(c.stashSeconds[1], 0);
  // Interleaved: two ticks per cycle, G + N - 1 cycles.
  const cost::PipelineStepCost ci = cost::estimatePipelineStep(
      compilePipeline(m.graph, testIpu(), options({"pool1"}, Schedule::Interleaved, 4)));
  EXPECT_EQ(ci.cycles, 4 + 2 - 1);
  // Each IPU runs its forward in one tick and its backward in the other.
  EXPECT_GE(ci.cycleSeconds, std::max(ci.forwardSeconds[0] + ci.backwardSeconds[0],
                                      ci.forwardSeconds[1] + ci.backwardSeconds[1]));
}

// ---- automatic split points ------------------------------------------------------------------

// The tail both auto-split models share: mean softmax cross-entropy, then SGD with momentum.
void lossAndSgd(Graph& g, Builder& b, int logits, int labels, int lr,
                const std::vector<int>& params) {
  int loss = b.reduceMean(b.softmaxCrossEntropy(logits, labels), {0}, false, "loss");
  g.markOutput(loss);
  SgdOptions sgd;
  sgd.momentum = 0.9;
  appendSgdUpdate(g, appendBackward(g, loss, params).grads, lr, sgd);
}

// A chain of dense layers of very uneven widths (the work of a layer is in x out).
Graph unevenChain(i64 batch, const std::vector<i64>& widths, std::vector<std::string>* layers) {
  Graph g("uneven_chain");
  Builder b(g);
  int x = b.input("x", {batch, widths.front()});
  int y = b.input("labels", {batch}, DType::I32);
  int lr = b.input("lr", {});
  std::vector<int> params;
  for (size_t l = 1; l < widths.size(); ++l) {
    const std::string n = "layer" + std::to_string(l);
    int w = b.variable(n + "_weight", {widths[l - 1], widths[l]});
    int bias = b.variable(n + "_bias", {widths[l]});
    params.push_back(w);
    params.push_back(bias);
    x = l + 1 < widths.size() ? b.relu(b.dense(x, w, bias), n) : b.dense(x, w, bias, n);
    layers->push_back(n);
  }
  lossAndSgd(g, b, x, y, lr, params);
  return g;
}

TEST(PipelineAutoSplit, UnevenLayersNoSlowerThanEveryHandPlacementAndDeterministic) {
  std::vector<std::string> layers;
  const Graph g = unevenChain(8, {16, 512, 8, 8, 8, 640, 640, 8, 10}, &layers);
  const PipelineOptions o = options({}, Schedule::Grouped, 6);
  const cost::AutoSplit a = cost::autoSplit(g, testIpu(), 3, o, {}, layers);
  // Every hand placement of 3 stages at layer boundaries, priced the same way.
  double bestHand = std::numeric_limits<double>::infinity();
  std::vector<std::string> bestSplits;
  int placements = 0;
  for (size_t i = 0; i + 1 < layers.size(); ++i)
    for (size_t j = i + 1; j + 1 < layers.size(); ++j) {
      PipelineOptions h = o;
      h.splits = {layers[i], layers[j]};
      const auto st =
          cost::stageSeconds(cost::estimatePipelineStep(compilePipeline(g, testIpu(), h)));
      ++placements;
      const double slowest = *std::max_element(st.begin(), st.end());
      if (slowest < bestHand) bestHand = slowest, bestSplits = h.splits;
    }
  EXPECT_EQ(placements, 21);
  EXPECT_LE(a.slowestStageSeconds, bestHand * (1 + 1e-9))
      << "auto " << ::testing::PrintToString(a.splits) << " hand "
      << ::testing::PrintToString(bestSplits);
  // The uneven layers must not be split evenly by count: the best placement is not [2, 4].
  EXPECT_NE(a.splits, (std::vector<std::string>{"layer2", "layer5"}));
  EXPECT_EQ(cost::autoSplit(g, testIpu(), 3, o, {}, layers).splits, a.splits);
  EXPECT_NE(a.describe().find("stage 2:"), std::string::npos);
}

// Three layers with large weights and little work (one row of 512), then a reshape to 512 rows
// of 1 and three layers with small weights and much work (512 rows of 64): the fastest
// placement puts the large weights together.
Graph weightsThenWork(std::vector<std::string>* layers) {
  Graph g("weights_then_work");
  Builder b(g);
  int x = b.input("x", {1, 512});
  int y = b.input("labels", {512}, DType::I32);
  int lr = b.input("lr", {});
  std::vector<int> params;
  auto layer = [&](int in, i64 from, i64 to, const std::string& n, bool relu) {
    int w = b.variable(n + "_weight", {from, to});
    int bias = b.variable(n + "_bias", {to});
    params.push_back(w);
    params.push_back(bias);
    layers->push_back(n);
    return relu ? b.relu(b.dense(in, w, bias), n) : b.dense(in, w, bias, n);
  };
  for (int l = 1; l <= 3; ++l) x = layer(x, 512, 512, "wide" + std::to_string(l), true);
  x = b.reshape(x, {512, 1}, "rows");
  x = layer(x, 1, 64, "expand", true);
  for (int l = 1; l <= 3; ++l) x = layer(x, 64, 64, "work" + std::to_string(l), true);
  x = layer(x, 64, 10, "logits", false);
  layers->pop_back();
  lossAndSgd(g, b, x, y, lr, params);
  return g;
}

TEST(PipelineAutoSplit, SkipsPlacementsThatDoNotFitAndFindsTheFastestThatDoes) {
  std::vector<std::string> layers;
  const Graph g = weightsThenWork(&layers);
  const PipelineOptions o = options({}, Schedule::Grouped, 4);
  struct Hand {
    std::vector<std::string> splits;
    double slowest;
    i64 fullest;  // bytes of the fullest tile of either IPU
  };
  // Every placement over 2 IPUs on `ipu`, planned even where it overflows.
  auto enumerate = [&](const Target& ipu) {
    std::vector<Hand> all;
    for (size_t i = 0; i + 1 < layers.size(); ++i) {
      PipelineOptions h = o;
      h.splits = {layers[i]};
      h.checkMemory = false;
      const PipelinedExecutable pe = compilePipeline(g, ipu, h);
      const auto st = cost::stageSeconds(cost::estimatePipelineStep(pe));
      i64 fullest = 0;
      for (const IpuProgram& p : pe.programs) fullest = std::max(fullest, p.peakTileBytes);
      all.push_back({h.splits, *std::max_element(st.begin(), st.end()), fullest});
    }
    return all;
  };
  auto fastest = [](const std::vector<Hand>& all, i64 capacity) {
    const Hand* best = nullptr;
    for (const Hand& h : all)
      if (h.fullest <= capacity && (!best || h.slowest < best->slowest)) best = &h;
    return best;
  };
  // Tile memory just below what the fastest placement needs on a roomy IPU. The planner sizes
  // its windows by the tile, so on the smaller tile the fastest placement may need less: lower
  // the capacity again below its new need until it overflows.
  const std::vector<Hand> roomy = enumerate(Target::small(64, 1 << 20));
  Target tight = Target::small(64, fastest(roomy, 1 << 20)->fullest - 1);
  std::vector<Hand> hands = enumerate(tight);
  for (int tries = 0; tries < 3; ++tries) {
    const i64 need = fastest(hands, std::numeric_limits<i64>::max())->fullest;
    if (need > tight.bytesPerTile) break;
    tight = Target::small(64, need - 1);
    hands = enumerate(tight);
  }
  const Hand* unconstrained = fastest(hands, std::numeric_limits<i64>::max());
  const Hand* fitting = fastest(hands, tight.bytesPerTile);
  ASSERT_TRUE(fitting);
  ASSERT_GT(unconstrained->fullest, tight.bytesPerTile) << "the fastest placement fits: no test";
  const cost::AutoSplit a = cost::autoSplit(g, tight, 2, o, {}, layers);
  EXPECT_GT(a.placementsCompiled, 1);  // it compiled the fastest, saw it overflow, moved on
  EXPECT_EQ(a.splits, fitting->splits);
  EXPECT_LE(a.slowestStageSeconds, fitting->slowest * (1 + 1e-9));
}

}  // namespace
}  // namespace ipu::pipeline
