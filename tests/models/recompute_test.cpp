// Recomputation (compiler/recompute.h): training with checkpoints gives the bits of training
// without them (small CNN and small ResNet-50, f32, several steps, both engine modes), holds
// fewer bytes at the peak, and refuses checkpoints that name no forward activation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <regex>
#include <string>

#include <fmt/format.h>

#include "ipu_backend/compiler/compiler.h"
#include "ipu_backend/compiler/recompute.h"
#include "ipu_backend/cost/cost_model.h"
#include "ipu_backend/engine/engine.h"
#include "ipu_backend/kernels/fused.h"
#include "models/resnet50/resnet50.h"
#include "models/small_cnn/small_cnn.h"

namespace ipu {
namespace {

struct Trained {
  std::map<std::string, std::vector<float>> variables;
  std::vector<float> losses;
  i64 peakLiveBytes = 0;  // not-always-live bytes over all tiles at the fullest compute set
  i64 worstTileBytes = 0;
};

// `steps` training steps of `g` from `init` on fixed pseudo-random data.
Trained train(Graph g, int loss, const std::map<std::string, std::vector<float>>& init,
              EngineMode mode, int steps) {
  kernels::fused::setNumThreads(1);  // tiny graphs: threads would only wait on each other
  const Target target = Target::small(64, 1 << 20);
  CompileOptions co;
  co.checkMemory = false;
  auto exe = std::make_shared<const Executable>(compile(std::move(g), target, co));
  Trained r;
  r.peakLiveBytes =
      *std::max_element(exe->memoryDetail.liveBytes.begin(), exe->memoryDetail.liveBytes.end());
  for (const TileMemory& m : exe->tileMemory)
    r.worstTileBytes = std::max(r.worstTileBytes, m.total());
  Engine e(exe, mode);
  for (const auto& [name, v] : init) e.writeTensor(name, v);
  std::map<int, std::vector<float>> inputs;
  std::map<int, std::vector<std::int32_t>> ints;
  std::map<int, std::vector<char>> outputs;
  for (const Tensor& t : exe->graph.tensors()) {
    if (t.kind != TensorKind::Input) continue;
    if (t.dtype == DType::I32) {
      auto& v = ints[t.id];
      for (i64 i = 0; i < t.elements(); ++i) v.push_back(static_cast<std::int32_t>((i * 7) % 10));
      e.connectInput(t.id, v.data());
    } else {
      auto& v = inputs[t.id];
      for (i64 i = 0; i < t.elements(); ++i)
        v.push_back(t.elements() == 1 ? 0.05f : static_cast<float>((i * 37) % 101) / 50.f - 1.f);
      e.connectInput(t.id, v.data());
    }
  }
  for (int t : exe->graph.outputs()) {
    outputs[t].resize(static_cast<size_t>(exe->graph.tensor(t).bytes()));
    e.connectOutput(t, outputs[t].data());
  }
  for (int s = 0; s < steps; ++s) {
    e.run();
    float l = 0;
    std::memcpy(&l, outputs.at(loss).data(), sizeof l);
    r.losses.push_back(l);
  }
  for (const auto& [name, v] : init) r.variables[name] = e.readFloats(name);
  return r;
}

void expectSameBits(const Trained& a, const Trained& b) {
  ASSERT_EQ(a.losses, b.losses);
  for (const auto& [name, v] : a.variables) {
    const std::vector<float>& w = b.variables.at(name);
    ASSERT_EQ(v.size(), w.size()) << name;
    ASSERT_EQ(std::memcmp(v.data(), w.data(), v.size() * sizeof(float)), 0)
        << "variable '" << name << "' differs with recomputation";
  }
}

TEST(Recomputation, SmallCnnTrainsToTheSameBitsWithFewerPeakBytes) {
  models::SmallCnnConfig cfg;
  cfg.conv1Channels = 4;
  cfg.conv2Channels = 8;
  const models::TaskGraph task = models::buildSmallCnnTraining(cfg, 4, SgdOptions{});
  const auto init = models::initSmallCnn(task.graph, 3);
  Graph withRecompute = task.graph;
  // The first block's pooled output: the second block's forward runs again before its backward.
  std::vector<std::string> names;
  for (const Op& op : withRecompute.ops())
    if (op.kind == OpKind::MaxPool) {
      names.push_back(withRecompute.tensor(op.outputs[0]).name);
      break;
    }
  ASSERT_EQ(names.size(), 1u);
  const RecomputationReport rep = applyRecomputation(withRecompute, task.loss, names);
  EXPECT_EQ(rep.segments, 2);
  EXPECT_GT(rep.recomputedOps, 0);
  EXPECT_GT(rep.recomputedMacs, 0);
  for (EngineMode mode : {EngineMode::Fused, EngineMode::Tile}) {
    const Trained plain = train(task.graph, task.loss, init, mode, 2);
    const Trained re = train(withRecompute, task.loss, init, mode, 2);
    expectSameBits(plain, re);
    EXPECT_LT(re.peakLiveBytes, plain.peakLiveBytes);
    std::printf(
        "small CNN, %s: peak live %lld -> %lld B, worst tile %lld -> %lld B\n",
        mode == EngineMode::Tile ? "tile" : "fused", static_cast<long long>(plain.peakLiveBytes),
        static_cast<long long>(re.peakLiveBytes), static_cast<long long>(plain.worstTileBytes),
        static_cast<long long>(re.worstTileBytes));
  }
}

TEST(Recomputation, SmallResNet50TrainsToTheSameBitsWithFewerPeakBytes) {
  const models::ResNetConfig cfg = models::ResNetConfig::small();
  const models::ResNetGraph rg = models::buildTraining(cfg, 4, models::resnetSgdOptions());
  const auto init = models::initWeights(rg, 7);
  Graph withRecompute = rg.graph;
  // As Graphcore's configuration places them: after blocks' output ReLUs.
  const RecomputationReport rep = applyRecomputation(
      withRecompute, rg.loss, {"stage1_unit1_relu3", "stage2_unit1_relu3", "stage3_unit1_relu3"});
  EXPECT_EQ(rep.segments, 4);
  EXPECT_GT(rep.recomputedMacs, rep.forwardMacs / 4);
  EXPECT_LT(rep.recomputedMacs, rep.forwardMacs);
  for (EngineMode mode : {EngineMode::Fused, EngineMode::Tile}) {
    const Trained plain = train(rg.graph, rg.loss, init, mode, 2);
    const Trained re = train(withRecompute, rg.loss, init, mode, 2);
    expectSameBits(plain, re);
    EXPECT_LT(re.peakLiveBytes, plain.peakLiveBytes);
  }
}

// The cost model prices the recomputed segments: the step's multiply-accumulates grow by exactly
// the recomputed ones, and so does its time.
TEST(Recomputation, TheCostModelPricesTheRecomputedForward) {
  const models::ResNetGraph rg =
      models::buildTraining(models::ResNetConfig::small(), 4, models::resnetSgdOptions());
  Graph re = rg.graph;
  const RecomputationReport rep = applyRecomputation(
      re, rg.loss, {"stage1_unit1_relu3", "stage2_unit1_relu3", "stage3_unit1_relu3"});
  const Target t = Target::mk2();
  const cost::StepCost plain = cost::estimateGraph(rg.graph, t, {cost::CostOptions{}}, 0)[0];
  const cost::StepCost with = cost::estimateGraph(re, t, {cost::CostOptions{}}, 0)[0];
  EXPECT_GT(with.deviceSeconds, plain.deviceSeconds);
  // Every recomputed compute set costs what its original costs, and the step grows by their sum.
  std::map<std::string, const cost::ComputeSetCost*> original;
  for (const cost::ComputeSetCost& cs : plain.computeSets) original[cs.name] = &cs;
  const std::regex copy("/recomputed_[0-9]+");
  double extraCycles = 0, extraMacs = 0;
  int copies = 0;
  for (const cost::ComputeSetCost& cs : with.computeSets) {
    if (cs.name.find("/recomputed") == std::string::npos) continue;
    const std::string name = std::regex_replace(cs.name, copy, "");
    ASSERT_TRUE(original.count(name)) << cs.name;
    EXPECT_DOUBLE_EQ(cs.computeCycles, original[name]->computeCycles) << cs.name;
    EXPECT_DOUBLE_EQ(cs.macs, original[name]->macs) << cs.name;
    extraCycles += cs.computeCycles;
    extraMacs += cs.macs;
    ++copies;
  }
  EXPECT_GE(copies, rep.recomputedOps);
  EXPECT_GT(extraMacs, 0);
  EXPECT_NEAR(with.macs - plain.macs, extraMacs, 1e-6 * with.macs);
  EXPECT_NEAR(with.computeCycles - plain.computeCycles, extraCycles, 1e-6 * with.computeCycles);
}

TEST(Recomputation, StageBoundariesAreTheTensorsCrossingThem) {
  const models::ResNetGraph rg =
      models::buildTraining(models::ResNetConfig::small(), 2, models::resnetSgdOptions());
  const Graph& g = rg.graph;
  // Two stages: everything up to stage2_unit1_relu3's producer, then the rest of the forward.
  const int cut = g.tensor(g.get("stage2_unit1_relu3")).producer;
  const int lossOp = g.tensor(rg.loss).producer;
  std::vector<int> stage(g.ops().size(), -1);
  for (int i = 0; i <= lossOp; ++i) stage[i] = i <= cut ? 0 : 1;
  const std::vector<std::string> names = stageBoundaryCheckpoints(g, stage);
  EXPECT_NE(std::find(names.begin(), names.end(), "stage2_unit1_relu3"), names.end());
  Graph re = g;
  EXPECT_EQ(applyRecomputation(re, rg.loss, names).segments, static_cast<int>(names.size()) + 1);
}

TEST(Recomputation, RefusesCheckpointsOffTheForwardPath) {
  const models::ResNetGraph rg =
      models::buildTraining(models::ResNetConfig::small(), 2, models::resnetSgdOptions());
  Graph g = rg.graph;
  auto message = [&](const std::string& name) {
    try {
      applyRecomputation(g, rg.loss, {name});
    } catch (const GraphError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("stage9_unit1_relu3").find("names no tensor"), std::string::npos);
  EXPECT_NE(message("conv0_weight").find("not an activation on the forward path"),
            std::string::npos);
}

// The tile memory plan of a verdict, pinned: ResNet-50's full widths and blocks on small images
// (32x32, micro-batch 2) with the published checkpoints, on an IPU-Mk2, planned as a fit verdict
// (no exchange copies). Compile-speed work (record layouts, fewer passes, threads) must leave every
// tile's bytes, every arena offset and the fullest tile's occupants as they were. A plan change
// that moves them on purpose re-pins the figures the failure prints.
TEST(TileMemoryPlan, ResNet50VerdictOnSmallImagesIsPinned) {
  models::ResNetConfig cfg;
  cfg.inputH = cfg.inputW = 32;
  models::ResNetGraph rg = models::buildTraining(cfg, 2, models::resnetSgdOptions());
  applyRecomputation(rg.graph, rg.loss, models::publishedRecomputationCheckpoints());
  CompileOptions co;
  co.checkMemory = false;
  co.planExchanges = false;
  const Executable exe = compile(rg.graph, Target::mk2(), co);
  // FNV-1a over the figures, in a fixed order.
  std::uint64_t memoryHash = 1469598103934665603ULL, offsetHash = memoryHash;
  auto mix = [](std::uint64_t& h, i64 v) {
    for (int b = 0; b < 8; ++b) {
      h ^= static_cast<std::uint64_t>(v >> (8 * b)) & 0xff;
      h *= 1099511628211ULL;
    }
  };
  i64 totalBytes = 0;
  for (size_t t = 0; t < exe.tileMemory.size(); ++t) {
    mix(memoryHash, exe.tileMemory[t].alwaysLive);
    mix(memoryHash, exe.tileMemory[t].peakNotAlwaysLive);
    mix(memoryHash, exe.arenaBytes[t]);
    totalBytes += exe.tileMemory[t].total();
  }
  i64 gathers = 0, sharedGathers = 0;
  for (const auto& slices : exe.mapping)
    for (const TileSlice& s : slices) mix(offsetHash, s.offset);
  for (const ComputeSet& cs : exe.computeSets)
    for (const Vertex& v : cs.vertices)
      for (const Window& w : v.inputs) {
        gathers += w.gather;
        sharedGathers += w.shared;
        mix(offsetHash, w.gather ? w.gatherOffset : -1);
      }
  const TileDetail& worst = exe.memoryDetail.worstTiles.at(0);
  std::string occupants;
  for (const TileOccupant& o : worst.occupants)
    occupants += fmt::format("{} {} {}\n", o.name, o.bytes, o.alwaysLive ? "always" : "peak");
  std::uint64_t occupantHash = 1469598103934665603ULL;
  for (char c : occupants) mix(occupantHash, c);
  const std::string figures = fmt::format(
      "worst tile {} of {} B ({} always live, {} code and vertex state), peak at '{}', total {} "
      "B, {} gathers ({} shared), memory hash {:#x}, offset hash {:#x}, occupant hash {:#x}",
      worst.tile, worst.memory.total(), worst.memory.alwaysLive, worst.codeAndVertexState,
      worst.peakComputeSet >= 0 ? exe.computeSets[worst.peakComputeSet].name : "-", totalBytes,
      gathers, sharedGathers, memoryHash, offsetHash, occupantHash);
  EXPECT_EQ(figures,
            "worst tile 448 of 286152 B (189032 always live, 49256 code and vertex state), peak "
            "at 'conv2d_backward_data_0/conv2d_backward_data/weight_k_blocks', total 387766200 "
            "B, 3313251 gathers (623607 shared), memory hash 0x61232adfed8197bc, offset hash "
            "0xbfb1ab42fc731b33, occupant hash 0xad3a6a201b628bbb")
      << "the fullest tile's occupants:\n"
      << occupants;
}

}  // namespace
}  // namespace ipu
