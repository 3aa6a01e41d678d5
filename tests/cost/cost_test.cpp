// Cost model, collectives and time-to-train checks against hand computations.
#include <cmath>
#include <map>

#include <gtest/gtest.h>

#include "ipu_backend/compiler/autodiff.h"
#include "ipu_backend/compiler/compiler.h"
#include "ipu_backend/compiler/op_shapes.h"
#include "ipu_backend/cost/collectives.h"
#include "ipu_backend/cost/cost_model.h"
#include "ipu_backend/cost/time_to_train.h"
#include "ipu_backend/ir/builder.h"
#include "ipu_backend/optimizers/optimizer.h"
#include "ipu_backend/replication/replicate.h"

namespace ipu::cost {
namespace {

constexpr i64 kTiles = 16;
constexpr i64 kBigTile = 16 << 20;  // room for whole-weight gathers; memory is not under test

Executable compileMatMul(i64 m, i64 k, i64 n, const Target& t) {
  Graph g;
  Builder b(g);
  int a = b.input("a", {m, k});
  int w = b.variable("w", {k, n});
  g.markOutput(b.matmul(a, w, false, false, "c"));
  return compile(g, t, CompileOptions{.deviceIterations = 1, .checkMemory = false});
}

Executable compileConv(i64 batch, const Target& t) {
  Graph g;
  Builder b(g);
  int x = b.input("x", {batch, 16, 16, 32});
  int w = b.variable("w", {64, 3, 3, 32});
  g.markOutput(b.conv2d(x, w, Conv2dOptions::make(1, 1), "y"));
  return compile(g, t, CompileOptions{.deviceIterations = 1, .checkMemory = false});
}

const ComputeSetCost& setOf(const StepCost& sc, OpKind kind) {
  for (const ComputeSetCost& c : sc.computeSets)
    if (c.kind == kind) return c;
  throw std::runtime_error("no compute set of that kind");
}

// The multiply-accumulates of every convolution op of a kind in the graph.
double convMacsOf(const Executable& exe, OpKind kind) {
  double macs = 0;
  for (const Op& op : exe.graph.ops())
    if (op.kind == kind) macs += static_cast<double>(convShapeOf(exe.graph, op).macs());
  return macs;
}

// The priced multiply-accumulates of a kind's compute sets, by plan phase.
std::map<int, double> macsByPhaseOf(const Executable& exe, OpKind kind) {
  std::map<int, double> macsByPhase;
  for (const ComputeSetCost& cs : estimateStep(exe).computeSets)
    if (cs.kind == kind) macsByPhase[cs.phase] += cs.macs;
  return macsByPhase;
}

TEST(CostModel, BigMatMulRunsAtTheTileMacRate) {
  const Target t = Target::small(kTiles, kBigTile);
  Executable exe = compileMatMul(256, 512, 256, t);
  StepCost sc = estimateStep(exe);
  const ComputeSetCost& mm = setOf(sc, OpKind::MatMul);
  // Hand computation: 256*512*256 MACs over 16 tiles at 16 f32 MACs/cycle = 131,072 cycles.
  // The 4,096 outputs per tile split 683/683/683/683/682/682 over 6 workers (+0.05%), plus the
  // vertex setup (10 instructions x 6 cycles).
  const double ideal = 256.0 * 512 * 256 / (kTiles * t.fp32MacsPerCycle);
  EXPECT_NEAR(mm.computeCycles, ideal * 683.0 * 6 / 4096 + 60, 1.0);
  EXPECT_DOUBLE_EQ(mm.macs, 256.0 * 512 * 256);
  EXPECT_GT(mm.exchangeCycles, 0);  // every tile gathers its rows of a and all of w
}

TEST(CostModel, PrecisionSelectsTheAmpRate) {
  const Target t = Target::small(kTiles, kBigTile);
  Executable exe = compileMatMul(256, 512, 256, t);
  auto cyclesAt = [&](const char* p) {
    return setOf(estimateStep(exe, CostOptions{.precision = parsePrecision(p)}), OpKind::MatMul)
        .computeCycles;
  };
  const double f32 = cyclesAt("32.32") - 60, h16 = cyclesAt("16.16") - 60,
               h32 = cyclesAt("16.32") - 60;
  EXPECT_NEAR(f32 / h16, 64.0 / 16.0, 1e-9);
  EXPECT_NEAR(f32 / h32, 32.0 / 16.0, 1e-9);
  EXPECT_THROW(parsePrecision("8.8"), std::invalid_argument);
}

TEST(CostModel, FewWorkUnitsRunAtAFractionOfTheRate) {
  // Two outputs on one tile: two workers busy of six; barrel scheduling makes each worker's
  // instruction stream 6 cycles per instruction, so the vertex takes 3x its ideal time.
  const Target t = Target::small(1, kBigTile);
  Executable exe = compileMatMul(2, 1024, 1, t);
  const ComputeSetCost& mm = setOf(estimateStep(exe), OpKind::MatMul);
  EXPECT_DOUBLE_EQ(mm.computeCycles, 60 + 3.0 * 2 * 1024 / t.fp32MacsPerCycle);
}

TEST(CostModel, DoublingTheBatchDoublesComputeCycles) {
  const Target t = Target::small(kTiles, kBigTile);
  const double c2 = setOf(estimateStep(compileConv(2, t)), OpKind::Conv2d).computeCycles;
  const double c4 = setOf(estimateStep(compileConv(4, t)), OpKind::Conv2d).computeCycles;
  EXPECT_NEAR(c4 / c2, 2.0, 0.02);
  // And the conv runs at the tile rate: MACs / (tiles x 16) within the split's imbalance.
  const double macs4 = 4.0 * 16 * 16 * 64 * 3 * 3 * 32;
  EXPECT_NEAR(c4, macs4 / (kTiles * t.fp32MacsPerCycle), 0.02 * c4);
}

TEST(CostModel, OneTileCostsTilesTimesMoreThanSpread) {
  Target spread = Target::small(kTiles, kBigTile);
  Target packed = spread;
  packed.minBytesPerTile = i64{1} << 40;  // every buffer lands on a single tile
  const double cs = setOf(estimateStep(compileConv(4, spread)), OpKind::Conv2d).computeCycles;
  const double cp = setOf(estimateStep(compileConv(4, packed)), OpKind::Conv2d).computeCycles;
  EXPECT_NEAR(cp / cs, static_cast<double>(kTiles), 0.05 * kTiles);
}

// Grouped convolutions (EfficientNet's depthwise and G16 convs), forward and both gradients:
// MACs are those of one group's channels, and the AMP contraction is C/G input channels
// (forward), K/G output channels (data gradient): a depthwise conv (1) fills 1/8 of an f32 AMP
// pass, G16 (16) fills it, a dense conv of 32 channels fills it.
TEST(CostModel, GroupedConvsCountTheirGroupsMacsAndAmpFill) {
  const Target t = Target::small(kTiles, kBigTile);
  auto costs = [&](i64 groups) {
    Graph g;
    Builder b(g);
    int x = b.variable("x", {4, 16, 16, 32});
    int w = b.variable("w", {32, 3, 3, 32 / groups});
    int y = b.conv2d(x, w, Conv2dOptions::make(1, 1, groups), "y");
    int loss = b.reduceSum(y, {0, 1, 2, 3}, false, "loss");
    g.markOutput(loss);
    appendBackward(g, loss, {x, w});
    StepCost sc =
        estimateStep(compile(g, t, CompileOptions{.deviceIterations = 1, .checkMemory = false}));
    std::map<OpKind, std::pair<double, double>> m;  // kind -> (macs, compute cycles)
    for (OpKind k : {OpKind::Conv2d, OpKind::Conv2dBackwardData, OpKind::Conv2dBackwardFilter})
      m[k] = {setOf(sc, k).macs, setOf(sc, k).computeCycles};
    return m;
  };
  const auto dense = costs(1), g16 = costs(2), dw = costs(32);
  const double denseMacs = 4.0 * 16 * 16 * 32 * 9 * 32;
  for (const auto& [kind, v] : dense) {
    EXPECT_DOUBLE_EQ(v.first, denseMacs);
    EXPECT_DOUBLE_EQ(g16.at(kind).first, denseMacs / 2);
    EXPECT_DOUBLE_EQ(dw.at(kind).first, denseMacs / 32);
  }
  // Cycles per MAC: the forward and data gradient of depthwise run at 1/8 of the AMP rate.
  for (OpKind k : {OpKind::Conv2d, OpKind::Conv2dBackwardData}) {
    const double perMacDense = dense.at(k).second / dense.at(k).first;
    EXPECT_NEAR(g16.at(k).second / g16.at(k).first / perMacDense, 1.0, 0.1);
    EXPECT_NEAR(dw.at(k).second / dw.at(k).first / perMacDense, 8.0, 0.8);
  }
}

TEST(CostModel, ExchangeGrowsWithBytesMovedAndIsZeroWithoutTraffic) {
  const Target t = Target::small(kTiles, kBigTile);
  const double x1 =
      setOf(estimateStep(compileMatMul(64, 128, 128, t)), OpKind::MatMul).exchangeCycles;
  const double x2 =
      setOf(estimateStep(compileMatMul(64, 256, 128, t)), OpKind::MatMul).exchangeCycles;
  EXPECT_GT(x1, 0);
  EXPECT_GT(x2, 1.8 * x1);  // twice the contraction: twice the gathered w and rows of a

  Graph g;
  Builder b(g);
  int x = b.input("x", {64, 256});
  g.markOutput(b.relu(b.relu(x, "r1"), "r2"));
  StepCost sc = estimateStep(compile(g, t));
  EXPECT_EQ(sc.exchangeCycles, 0);
  EXPECT_GT(sc.computeCycles, 0);
  // 2 compute sets, one sync each.
  EXPECT_DOUBLE_EQ(sc.syncCycles, 2 * t.syncCycles);
}

TEST(CostModel, ElementwiseIsBoundByInstructionsOrTileMemory) {
  const Target t = Target::small(1, kBigTile);
  Graph g;
  Builder b(g);
  int x = b.input("x", {6 * 1024});
  int y = b.input("y", {6 * 1024});
  g.markOutput(b.add(x, y, "s"));
  StepCost sc = estimateStep(compile(g, t));
  // 6,144 f32 adds: 3,072 vectors of 2, 512 per worker, x6 = 3,072 cycles; memory traffic
  // 3 x 24 KiB over 24 B/cycle = 3,072 cycles too (the rates are balanced for binary f32 ops).
  EXPECT_DOUBLE_EQ(setOf(sc, OpKind::Binary).computeCycles, 60 + 3072);
}

// The planned exchange prices a convolution's or matmul's operands once, on its multiplying
// phase: its split has no contraction split, so the compiled plan's partial sums move nothing.
TEST(CostModel, PlannedExchangeMovesNoPartialsOfASplitContraction) {
  // B [K, N] larger than a tile's window budget: the compiler splits the sum over k.
  const Target t = Target::small(kTiles, 256 << 10);
  Executable exe = compileMatMul(64, 4096, 256, t);
  auto partialsExchange = [&](ExchangeModel m) {
    double x = 0;
    int sets = 0;
    for (const ComputeSetCost& c : estimateStep(exe, CostOptions{.exchange = m}).computeSets)
      if (c.kind == OpKind::MatMul && c.phase == 1) x += c.exchangeCycles, ++sets;
    EXPECT_GE(sets, 1);
    return x;
  };
  EXPECT_GT(partialsExchange(ExchangeModel::AsCompiled), 0);
  EXPECT_EQ(partialsExchange(ExchangeModel::Planned), 0);
  // The multiplying phase still moves the operands.
  EXPECT_GT(
      setOf(estimateStep(exe, CostOptions{.exchange = ExchangeModel::Planned}), OpKind::MatMul)
          .exchangeCycles,
      0);
}

// Exchange-bus sharing (Target::tilesPerSharedExchangeBus = 2): bytes that both tiles of a pair
// (2k, 2k + 1) receive from the same source arrive for both in the same cycles; the same bytes
// received by tiles of different pairs do not.
TEST(CostModel, TilesSharingAnExchangeBusReceiveCommonBytesOnce) {
  const Target t = Target::small(kTiles, kBigTile);
  Graph g;
  Builder b(g);
  g.markOutput(b.relu(b.input("x", {64}), "r"));
  Executable exe = compile(g, t, CompileOptions{.deviceIterations = 1, .checkMemory = false});
  ASSERT_EQ(exe.computeSets.size(), 1u);
  // Tiles `a` and `b` each gather the same 4,096 B, 1,024 B from each of tiles 8-11.
  auto gatherOnto = [&](int a, int bTile) {
    std::vector<ExchangeCopy> copies;
    for (int dst : {a, bTile})
      for (int src = 8; src < 12; ++src)
        copies.push_back({.srcTile = src, .dstTile = dst, .srcOffset = 0, .bytes = 1024});
    exe.computeSets[0].exchange = copies;
    return setOf(estimateStep(exe), OpKind::Unary).exchangeCycles;
  };
  EXPECT_DOUBLE_EQ(gatherOnto(0, 1), 2048 / t.exchangeBytesPerCycle);  // one pair: half each
  EXPECT_DOUBLE_EQ(gatherOnto(1, 2), 4096 / t.exchangeBytesPerCycle);  // two pairs: no sharing
  EXPECT_DOUBLE_EQ(gatherOnto(2, 3), 2048 / t.exchangeBytesPerCycle);
  EXPECT_DOUBLE_EQ(setOf(estimateStep(exe, CostOptions{.exchangeBusSharing = false}), OpKind::Unary)
                       .exchangeCycles,
                   4096 / t.exchangeBytesPerCycle);
}

TEST(CostModel, HostStreamsOverlapOrAdd) {
  const Target t = Target::small(kTiles, kBigTile);
  Executable exe = compileMatMul(256, 512, 256, t);
  StepCost over = estimateStep(exe, CostOptions{.overlapHostIo = true});
  StepCost serial = estimateStep(exe, CostOptions{.overlapHostIo = false});
  const double bytes = (256.0 * 512 + 256.0 * 256) * 4;  // a in, c out
  EXPECT_DOUBLE_EQ(over.hostBytes, bytes);
  EXPECT_DOUBLE_EQ(over.hostSeconds, bytes / t.hostLinkBytesPerSec);
  EXPECT_DOUBLE_EQ(over.seconds, std::max(over.deviceSeconds, over.hostSeconds));
  EXPECT_DOUBLE_EQ(serial.seconds, serial.deviceSeconds + serial.hostSeconds);
  EXPECT_GT(over.utilisation, 0);
  EXPECT_LT(over.utilisation, 1);
  nlohmann::json j = over.report();
  EXPECT_TRUE(j.contains("cycles"));
  EXPECT_EQ(j["compute_sets"]["count"], over.computeSets.size());
}

TEST(CostModel, PlannedExchangeMovesLessThanWholeWeightGathers) {
  const Target t = Target::small(kTiles, kBigTile);
  Executable exe = compileConv(4, t);
  const double compiled = setOf(estimateStep(exe), OpKind::Conv2d).exchangeCycles;
  const double planned =
      setOf(estimateStep(exe, CostOptions{.exchange = ExchangeModel::Planned}), OpKind::Conv2d)
          .exchangeCycles;
  // Hand: A = 4*16*16*32*4 B = 131,072, W = 64*9*32*4 = 73,728, T = 16. Without exchange-bus
  // sharing sK* = 3, per tile A*3/16 + W/3 = 24,576 + 24,576 B, over 4 B/cycle.
  const double unshared = setOf(estimateStep(exe, CostOptions{.exchange = ExchangeModel::Planned,
                                                              .exchangeBusSharing = false}),
                                OpKind::Conv2d)
                              .exchangeCycles;
  EXPECT_NEAR(unshared, (131072.0 * 3 / 16 + 73728.0 / 3) / 4, 1e-6);
  // With it (2 tiles per bus, the default) the activations reach the output-channel groups at
  // twice the rate: A*sK/32 + W/sK, best at sK = sqrt(2WT/A) = sqrt(18), i.e.
  // 2 sqrt(AW/32) = 34,755.8 B per tile.
  EXPECT_NEAR(planned, 2 * std::sqrt(131072.0 * 73728 / 32) / 4, 1e-6);
  EXPECT_LT(planned, compiled);
}

TEST(CostModel, SegmentedCompileGivesTheWholeGraphEstimate) {
  // A small training step: conv -> batch norm -> relu -> pool -> dense -> loss, backward, SGD.
  Graph g;
  Builder b(g);
  int x = b.input("x", {4, 8, 8, 8});
  int labels = b.input("labels", {4}, DType::I32);
  int w = b.variable("w", {16, 3, 3, 8});
  int gamma = b.variable("gamma", {16}), beta = b.variable("beta", {16});
  int fc = b.variable("fc", {16, 10}), bias = b.variable("bias", {10});
  int y = b.relu(b.batchNormTrain(b.conv2d(x, w, Conv2dOptions::make(1, 1)), gamma, beta, 1e-5).y);
  int logits = b.dense(b.globalAvgPool(y), fc, bias);
  int loss = b.reduceMean(b.softmaxCrossEntropy(logits, labels), {0}, false, "loss");
  g.markOutput(loss);
  GradientResult gr = appendBackward(g, loss, {w, gamma, beta, fc, bias});
  int lr = b.input("lr", {});
  appendSgdUpdate(g, gr.grads, lr, SgdOptions{});

  const Target t = Target::small(kTiles, kBigTile);
  for (CostOptions o : {CostOptions{}, CostOptions{.precision = Precision::F16F16,
                                       .exchange = ExchangeModel::Planned}}) {
    StepCost whole = estimateStep(compile(g, t, {.deviceIterations = 1, .checkMemory = false}), o);
    StepCost seg = estimateGraph(g, t, {o}, 5).at(0);
    EXPECT_EQ(seg.computeSets.size(), whole.computeSets.size());
    EXPECT_NEAR(seg.computeCycles, whole.computeCycles, 1e-9 * whole.computeCycles);
    EXPECT_NEAR(seg.exchangeCycles, whole.exchangeCycles, 1e-9 * whole.exchangeCycles);
    EXPECT_DOUBLE_EQ(seg.syncCycles, whole.syncCycles);
    EXPECT_DOUBLE_EQ(seg.optimizerCycles, whole.optimizerCycles);
    EXPECT_GT(whole.optimizerCycles, 0);
    EXPECT_DOUBLE_EQ(seg.hostBytes, whole.hostBytes);
    EXPECT_DOUBLE_EQ(seg.seconds, whole.seconds);
  }
}

// Optimizers are lowered to ordinary ops and apply_update before pricing, so every one of them
// is priced by what it reads and writes: Adam and LAMB (two moments, a step count, more ops)
// cost more than SGD with momentum, and every apply_update set is priced.
TEST(CostModel, EveryOptimizerIsPricedAsTheOpsItLowersTo) {
  std::map<std::string, double> cycles;
  for (const char* kind : {"sgd", "rmsprop", "adam", "lamb"}) {
    Graph g;
    Builder b(g);
    int x = b.input("x", {64, 256});
    int w = b.variable("w", {256, 256}), bias = b.variable("bias", {256});
    int loss = b.reduceMean(b.add(b.matmul(x, w), bias), {0, 1}, false, "loss");
    g.markOutput(loss);
    OptimizerOptions o;
    o.kind = kind;
    appendOptimizer(g, appendBackward(g, loss, {w, bias}).grads, b.input("lr", {}), o);
    const Executable exe = compile(g, Target::small(kTiles, kBigTile), {.checkMemory = false});
    const StepCost c = estimateStep(exe);
    int writes = 0;
    for (const ComputeSetCost& cs : c.computeSets)
      if (cs.kind == OpKind::ApplyUpdate) {
        ++writes;
        EXPECT_GT(cs.computeCycles, 0) << kind << " " << cs.name;
      }
    EXPECT_GE(writes, 4) << kind;  // weight and state of both tensors
    EXPECT_GT(c.optimizerCycles, 0) << kind;
    EXPECT_LT(c.optimizerCycles, c.deviceCycles) << kind;
    cycles[kind] = c.optimizerCycles;
  }
  EXPECT_GT(cycles["adam"], cycles["sgd"]);
  EXPECT_GT(cycles["lamb"], cycles["adam"]);  // plus two norms and the trust ratio
}

// Every MAC of the graph is priced exactly once, however the compiler splits the work: whole
// ops, output slices, or partial sums over the contraction (data gradient over output
// channels, filter gradient over output rows, matmul over k). Small tiles force the splits.
// conv2d_backward_data's transposed-weights plan (compiler/conv_plan.h) multiplies in its dx
// phase (4), not in phase 0: the op's cost traits (macPhases) price that phase as MACs, the
// k-block and transpose phases (2, 3) as moves, and the op's MACs add up.
TEST(CostModel, TransposedDataGradientIsPricedAsMacsInItsDxPhase) {
  Graph g;
  Builder b(g);
  const i64 n = 4, h = 8, c = 64, k = 128;
  int x = b.variable("features", {n, h, h, c});
  int w = b.variable("shortcut_weight", {k, 1, 1, c});  // 32 KiB, window budget 8 KiB
  int loss = b.reduceMean(b.conv2d(x, w, Conv2dOptions::make(2, 0), "shortcut"), {0, 1, 2, 3},
                          false, "loss");
  g.markOutput(loss);
  g.markOutput(appendBackward(g, loss, {x}).grads.at(x));
  const Executable exe = compile(g, Target::small(256, 64 << 10), CompileOptions{});
  const double opMacs = convMacsOf(exe, OpKind::Conv2dBackwardData);
  std::map<int, double> macsByPhase = macsByPhaseOf(exe, OpKind::Conv2dBackwardData);
  ASSERT_EQ(macsByPhase.size(), 3u) << "expected the transposed plan's phases 2, 3 and 4";
  EXPECT_EQ(macsByPhase[2], 0.0);
  EXPECT_EQ(macsByPhase[3], 0.0);
  EXPECT_NEAR(macsByPhase[4], opMacs, 1e-9 * opMacs);
}

// conv2d_backward_filter's blocked plan (compiler/conv_plan.h, FilterBlocks) multiplies in its
// block phase (4): the channel-block copies (2, 3) and the sum of the parts (1) are moves and
// adds, and the blocks' MACs add up to the op's.
TEST(CostModel, BlockedWeightGradientIsPricedAsMacsInItsBlockPhase) {
  Graph g;
  Builder b(g);
  const i64 n = 2, h = 8, c = 64, k = 128;
  int x = b.variable("features", {n, h, h, c});
  int w = b.variable("weight", {k, 3, 3, c});
  int loss =
      b.reduceMean(b.conv2d(x, w, Conv2dOptions::make(1, 1), "conv"), {0, 1, 2, 3}, false, "loss");
  g.markOutput(loss);
  g.markOutput(appendBackward(g, loss, {w}).grads.at(w));
  const Executable exe = compile(g, Target::small(256, 64 << 10), CompileOptions{});
  const double opMacs = convMacsOf(exe, OpKind::Conv2dBackwardFilter);
  std::map<int, double> macsByPhase = macsByPhaseOf(exe, OpKind::Conv2dBackwardFilter);
  ASSERT_EQ(macsByPhase.size(), 4u) << "expected the blocked plan's phases 1, 2, 3 and 4";
  EXPECT_EQ(macsByPhase[1], 0.0);
  EXPECT_EQ(macsByPhase[2], 0.0);
  EXPECT_EQ(macsByPhase[3], 0.0);
  EXPECT_NEAR(macsByPhase[4], opMacs, 1e-9 * opMacs);
}

TEST(CostModel, BlockedForwardConvolutionIsPricedAsMacsInItsBlockPhase) {
  Graph g;
  Builder b(g);
  const i64 n = 2, h = 8, c = 64, k = 128;
  int x = b.variable("features", {n, h, h, c});
  int w = b.variable("weight", {k, 3, 3, c});
  int loss =
      b.reduceMean(b.conv2d(x, w, Conv2dOptions::make(1, 1), "conv"), {0, 1, 2, 3}, false, "loss");
  g.markOutput(loss);
  const Executable exe = compile(g, Target::small(256, 32 << 10), CompileOptions{});
  const double opMacs = convMacsOf(exe, OpKind::Conv2d);
  std::map<int, double> macsByPhase = macsByPhaseOf(exe, OpKind::Conv2d);
  ASSERT_EQ(macsByPhase.size(), 4u) << "expected the blocked plan's phases 1, 2, 3 and 4";
  EXPECT_EQ(macsByPhase[1], 0.0);
  EXPECT_EQ(macsByPhase[2], 0.0);
  EXPECT_EQ(macsByPhase[3], 0.0);
  EXPECT_NEAR(macsByPhase[4], opMacs, 1e-9 * opMacs);
}

// conv2d_backward_data's split over k reading dy in k-blocks (compiler/conv_plan.h) multiplies
// in its parts' phase (12): the copy of dy into blocks (5) and the sum of the parts (13) are
// moves and adds, and the parts' MACs (their k-ranges, cut at block boundaries) add up to the
// op's.
TEST(CostModel, KBlockedDataGradientIsPricedAsMacsInItsPartsPhase) {
  Graph g;
  Builder b(g);
  int x = b.variable("features", {2, 8, 8, 16});
  int w = b.variable("expand_weight", {256, 1, 1, 16});
  int loss =
      b.reduceMean(b.conv2d(x, w, Conv2dOptions::make(1, 0), "conv"), {0, 1, 2, 3}, false, "loss");
  g.markOutput(loss);
  g.markOutput(appendBackward(g, loss, {x}).grads.at(x));
  const Executable exe = compile(g, Target::small(128, 32 << 10), CompileOptions{});
  const double opMacs = convMacsOf(exe, OpKind::Conv2dBackwardData);
  std::map<int, double> macsByPhase = macsByPhaseOf(exe, OpKind::Conv2dBackwardData);
  ASSERT_EQ(macsByPhase.size(), 3u) << "expected the k-blocked split's phases 5, 12 and 13";
  EXPECT_EQ(macsByPhase[5], 0.0);
  EXPECT_EQ(macsByPhase[13], 0.0);
  EXPECT_GT(opMacs, 0.0);
  EXPECT_NEAR(macsByPhase[12], opMacs, 1e-9 * opMacs);
}

// conv2d_backward_data's blocked plan (compiler/conv_plan.h, DataBlocks) multiplies in its
// block phase (15): the copies of w and dy into blocks (14, 5) and the sum of the k-blocks (1)
// are moves and adds, and the blocks' MACs add up to the op's. For a strided 1x1 shortcut the
// partials hold only the pixels a tap reaches; the block vertices' work spans all of their
// part's pixels, so their shares still add up.
TEST(CostModel, BlockedDataGradientIsPricedAsMacsInItsBlockPhase) {
  for (const i64 kernel : {i64{1}, i64{3}}) {
    SCOPED_TRACE(kernel);
    Graph g;
    Builder b(g);
    const i64 c = kernel == 1 ? 128 : 64;
    int x = b.variable("features", {2, 8, 8, c});
    int w = b.variable("weight", {128, kernel, kernel, c});
    int loss = b.reduceMean(b.conv2d(x, w, Conv2dOptions::make(2, kernel / 2), "conv"),
                            {0, 1, 2, 3}, false, "loss");
    g.markOutput(loss);
    g.markOutput(appendBackward(g, loss, {x}).grads.at(x));
    const Executable exe = compile(g, Target::small(256, 16 << 10),
                                   CompileOptions{.deviceIterations = 1, .checkMemory = false});
    const double opMacs = convMacsOf(exe, OpKind::Conv2dBackwardData);
    std::map<int, double> macsByPhase = macsByPhaseOf(exe, OpKind::Conv2dBackwardData);
    ASSERT_EQ(macsByPhase.size(), 4u) << "expected the blocked plan's phases 1, 5, 14 and 15";
    EXPECT_EQ(macsByPhase[1], 0.0);
    EXPECT_EQ(macsByPhase[5], 0.0);
    EXPECT_EQ(macsByPhase[14], 0.0);
    EXPECT_GT(opMacs, 0.0);
    EXPECT_NEAR(macsByPhase[15], opMacs, 1e-9 * opMacs);
  }
}

TEST(CostModel, MacsOfSplitConvolutionsAndMatMulsAddUpToTheGraphsMacs) {
  Graph g;
  Builder b(g);
  int x = b.input("x", {8, 16, 16, 32});
  int labels = b.input("labels", {8}, DType::I32);
  int w1 = b.variable("w1", {64, 3, 3, 32}), w2 = b.variable("w2", {128, 3, 3, 64});
  int fc = b.variable("fc", {128, 512}), fc2 = b.variable("fc2", {512, 10});
  int y = b.relu(b.conv2d(x, w1, Conv2dOptions::make(1, 1)));
  y = b.relu(b.conv2d(y, w2, Conv2dOptions::make(2, 1)));
  int logits = b.matmul(b.relu(b.matmul(b.globalAvgPool(y), fc)), fc2);
  int loss = b.reduceMean(b.softmaxCrossEntropy(logits, labels), {0}, false, "loss");
  g.markOutput(loss);
  GradientResult gr = appendBackward(g, loss, {w1, w2, fc, fc2});
  appendSgdUpdate(g, gr.grads, b.input("lr", {}), SgdOptions{});

  for (i64 tileBytes : {i64{16} << 20, i64{48} << 10, i64{16} << 10}) {
    const Executable exe =
        compile(g, Target::small(64, tileBytes), {.deviceIterations = 1, .checkMemory = false});
    double graphMacs = 0;
    int partialSets = 0;
    for (const Op& op : exe.graph.ops()) {
      if (op.kind == OpKind::MatMul)
        graphMacs += static_cast<double>(matMulShapeOf(exe.graph, op).macs());
      if (op.kind == OpKind::Conv2d || op.kind == OpKind::Conv2dBackwardData ||
          op.kind == OpKind::Conv2dBackwardFilter)
        graphMacs += static_cast<double>(convShapeOf(exe.graph, op).macs());
    }
    for (const ComputeSet& cs : exe.computeSets) partialSets += cs.name.ends_with("/partials");
    EXPECT_NEAR(estimateStep(exe).macs, graphMacs, 1e-9 * graphMacs) << tileBytes << " B tiles";
    if (tileBytes == (i64{16} << 10)) {
      EXPECT_GT(partialSets, 2) << "the small tiles should split some reductions";
    }
  }
}

TEST(Collectives, OneReplicaIsFree) {
  EXPECT_EQ(allReduceSeconds(1 << 20, PodShape{1, 1, 1, 1}), 0);
  EXPECT_EQ(allReduceSeconds(1 << 20, PodShape::pod(4, 4)), 0);
}

TEST(Collectives, LargeRingApproachesTwoBytesOverBandwidth) {
  CollectiveOptions o;
  o.ipuLinkHopSeconds = 0;
  const Target t = Target::mk2();
  const double bw = t.ipuLinkBytesPerSec / 10 * 2;  // 2 of 10 IPU-Links
  const i64 bytes = i64{100} << 20;
  const double s64 = allReduceSeconds(bytes, PodShape::pod(64), t, o);
  EXPECT_NEAR(s64, 2.0 * 63 / 64 * bytes / bw, 1e-12);
  EXPECT_NEAR(s64 / (2.0 * bytes / bw), 1.0, 0.02);
  const double s16 = allReduceSeconds(bytes, PodShape::pod(16), t, o);
  EXPECT_LT(s16, s64);
  EXPECT_GT(s16, 0.9 * s64);
  // Latency: 2 hops.
  EXPECT_NEAR(allReduceSeconds(8, PodShape::pod(16), t, CollectiveOptions{}), 30 * 2e-6, 1e-9);
}

TEST(Collectives, GwLinksMakePod128SlowerPerByte) {
  const i64 bytes = 51 << 20;
  const double s64 = allReduceSeconds(bytes, PodShape::pod(64));
  const double s128 = allReduceSeconds(bytes, PodShape::pod(128));
  const double s256 = allReduceSeconds(bytes, PodShape::pod(256));
  EXPECT_GT(s128, s64);
  EXPECT_GT(s256, s128);
  // Hand: the cross-POD shard is B/64, all-reduced over 2 POD64s at 2 x 12.5 GB/s / 4 IPUs.
  CollectiveOptions o;
  o.ipuLinkHopSeconds = o.gwLinkHopSeconds = 0;
  const double intra = allReduceSeconds(bytes, PodShape::pod(64), Target::mk2(), o);
  EXPECT_NEAR(allReduceSeconds(bytes, PodShape::pod(128), Target::mk2(), o) - intra,
              2.0 * 1 / 2 * (bytes / 64.0) / 6.25e9, 1e-12);
  // A pipelined replica all-reduces a 1/P share per IPU.
  EXPECT_NEAR(allReduceSeconds(bytes, PodShape::pod(64, 4), Target::mk2(), o),
              2.0 * 15 / 16 * (bytes / 4.0) / 64e9, 1e-12);
  EXPECT_THROW(PodShape::pod(10, 4), std::invalid_argument);
}

TEST(TimeToTrain, HandCheckedArithmetic) {
  TrainingRun run;
  run.pod = PodShape::pod(16);
  run.microBatch = 20;
  run.accumulation = 10;
  run.epochs = 38;
  run.gradientBytes = 0;  // no all-reduce cost: arithmetic only
  StepTimes st{.microBatchSeconds = 0.01, .weightUpdateSeconds = 0.002, .evalStepSeconds = 0.004};
  TimeToTrain r = projectTimeToTrain(run, st);
  // Global batch 3,200: ceil(38 x 1,281,167 / 3,200) = 15,214 steps of 10 x 0.01 + 0.002 s.
  EXPECT_EQ(run.globalBatch(), 3200);
  EXPECT_EQ(r.steps, 15214);
  EXPECT_DOUBLE_EQ(r.stepSeconds, 0.102);
  EXPECT_NEAR(r.trainSeconds, 15214 * 0.102, 1e-9);
  // 10 evaluations (ceil(38/4)) of ceil(50,000 / 320) = 157 batches of 0.004 s.
  EXPECT_NEAR(r.evalSeconds, 10 * 157 * 0.004, 1e-12);
  EXPECT_NEAR(r.totalSeconds, r.trainSeconds + r.evalSeconds, 1e-9);
  EXPECT_NEAR(r.imagesPerSecond, 3200 / 0.102, 1e-6);

  // Pipelined over 4 IPUs: A + 2P - 1 = 17 slots of a quarter micro-batch.
  run.pod = PodShape::pod(16, 4);
  run.accumulation = 10;
  TimeToTrain p = projectTimeToTrain(run, st);
  EXPECT_NEAR(p.stepSeconds, (10 + 7) * 0.01 / 4 + 0.002, 1e-12);
  EXPECT_NEAR(p.pipelineSeconds, 7 * 0.01 / 4, 1e-12);

  // With gradients: the step adds exactly one all-reduce.
  run.pod = PodShape::pod(16);
  run.gradientBytes = 50 << 20;
  TimeToTrain g = projectTimeToTrain(run, st);
  EXPECT_NEAR(g.stepSeconds - 0.102, allReduceSeconds(50 << 20, run.pod), 1e-12);
}

// The hosts feed a micro-batch by decoding its images on the replica's cores; the device waits
// when they are slower. 8 cores at 850 images/s: 20 images in 2.94 ms, hidden behind a 10 ms
// micro-batch; 1 core: 23.5 ms, so each of the 10 micro-batches waits 13.5 ms.
TEST(TimeToTrain, HostDecodeBoundsTheMicroBatchWhenSlowerThanTheDevice) {
  TrainingRun run;
  run.pod = PodShape::pod(16);
  run.microBatch = 20;
  run.accumulation = 10;
  StepTimes st{.microBatchSeconds = 0.01, .weightUpdateSeconds = 0.002, .evalStepSeconds = 0.004};
  run.host.coresPerIpu = 8;
  run.host.trainImagesPerCoreSecond = 850;
  TimeToTrain fast = projectTimeToTrain(run, st);
  EXPECT_NEAR(fast.hostDecodeSeconds, 20.0 / (8 * 850), 1e-15);
  EXPECT_DOUBLE_EQ(fast.stepSeconds, 0.102);
  EXPECT_EQ(fast.hostWaitSeconds, 0);

  run.host.coresPerIpu = 1;
  TimeToTrain slow = projectTimeToTrain(run, st);
  const double decode = 20.0 / 850;
  EXPECT_NEAR(slow.stepSeconds, 10 * decode + 0.002, 1e-12);
  EXPECT_NEAR(slow.hostWaitSeconds, 10 * (decode - 0.01), 1e-12);
  EXPECT_NEAR(slow.imagesPerSecond, 3200 / slow.stepSeconds, 1e-6);
  // A 4-IPU pipeline decodes on the cores of its 4 IPUs and waits in all A + 2P - 1 slots.
  run.pod = PodShape::pod(16, 4);
  st.microBatchSeconds = 0.001;
  TimeToTrain piped = projectTimeToTrain(run, st);
  EXPECT_NEAR(piped.hostDecodeSeconds, 20.0 / (4 * 850), 1e-15);
  EXPECT_NEAR(piped.computeSeconds + piped.pipelineSeconds, 17 * (20.0 / (4 * 850)) / 4, 1e-12);
  EXPECT_NEAR(piped.hostWaitSeconds, 17.0 / 4 * (20.0 / (4 * 850) - 0.001), 1e-12);
}

// The images of a micro-batch stream through the M2000 gateway, whose 5.5 GB/s its 4 IPUs share:
// 20 x 150,528 B x 4 / 5.5e9 = 2.19 ms, which bounds a micro-batch shorter than that.
TEST(TimeToTrain, GatewayStreamBoundsAShortMicroBatch) {
  TrainingRun run;
  run.pod = PodShape::pod(64);
  run.microBatch = 20;
  run.accumulation = 2;
  StepTimes st{.microBatchSeconds = 0.001, .weightUpdateSeconds = 0, .evalStepSeconds = 0};
  run.host.gatewayBytesPerSec = 5.5e9;
  run.host.ipusPerGateway = 4;
  run.host.imageBytes = 224 * 224 * 3;
  TimeToTrain r = projectTimeToTrain(run, st);
  const double stream = 20.0 * 150528 * 4 / 5.5e9;
  EXPECT_NEAR(r.gatewayStreamSeconds, stream, 1e-15);
  EXPECT_NEAR(r.computeSeconds, 2 * stream, 1e-15);
  EXPECT_NEAR(r.hostWaitSeconds, 2 * (stream - 0.001), 1e-15);
  st.microBatchSeconds = 0.01;  // a 10 ms micro-batch hides it
  EXPECT_EQ(projectTimeToTrain(run, st).hostWaitSeconds, 0);
}

// An evaluation batch lasts as long as the slower of the device and the hosts' eval decode:
// POD16, 3,125 images per IPU in 157 batches of 20 at 8 x 815 images/s: 157 x 3.07 ms a pass
// against the device's 157 x 2 ms.
TEST(TimeToTrain, EvaluationWaitsForTheHostsDecode) {
  TrainingRun run;
  run.pod = PodShape::pod(16);
  run.microBatch = 20;
  run.accumulation = 10;
  run.epochs = 38;
  StepTimes st{.microBatchSeconds = 0.01, .weightUpdateSeconds = 0, .evalStepSeconds = 0.002};
  const double device = projectTimeToTrain(run, st).evalSeconds;
  EXPECT_NEAR(device, 10 * 157 * 0.002, 1e-12);
  run.host.coresPerIpu = 8;
  run.host.evalImagesPerCoreSecond = 815;
  TimeToTrain r = projectTimeToTrain(run, st);
  EXPECT_NEAR(r.evalSeconds, 10 * 157 * (20.0 / (8 * 815)), 1e-12);
  EXPECT_NEAR(r.evalHostWaitSeconds, r.evalSeconds - device, 1e-12);
  EXPECT_NEAR(r.totalSeconds, r.trainSeconds + r.evalSeconds, 1e-9);
}

// Outside the steps, through the gateways: one checkpoint saved from one IPU per evaluation, its
// weights restored onto the 4 IPUs of every gateway before the evaluation, the evaluation
// program loaded once onto them. POD256, 45 epochs: 12 evaluations.
TEST(TimeToTrain, CheckpointsRestoresAndTheEvaluationProgramCrossTheGateways) {
  TrainingRun run;
  run.pod = PodShape::pod(256);
  run.microBatch = 20;
  run.accumulation = 2;
  run.epochs = 45;
  StepTimes st{.microBatchSeconds = 0.01, .weightUpdateSeconds = 0, .evalStepSeconds = 0.002};
  const double without = projectTimeToTrain(run, st).totalSeconds;
  run.host.gatewayBytesPerSec = 5.5e9;
  run.host.ipusPerGateway = 4;
  run.host.checkpointBytes = 102'228'128;  // 25,557,032 parameters x (fp16 weight + momentum)
  run.host.restoreBytes = 51'114'064;
  run.host.evalProgramBytes = 300'000'000;
  TimeToTrain r = projectTimeToTrain(run, st);
  EXPECT_NEAR(r.checkpointSaveSeconds, 12 * 102'228'128 / 5.5e9, 1e-12);
  EXPECT_NEAR(r.restoreSeconds, 12 * 51114064.0 * 4 / 5.5e9, 1e-12);
  EXPECT_NEAR(r.evalProgramLoadSeconds, 300'000'000.0 * 4 / 5.5e9, 1e-12);
  EXPECT_NEAR(r.totalSeconds - without, r.hostTransferSeconds(), 1e-9);
  EXPECT_GT(r.hostTransferSeconds(), 0.6);
}

TEST(TimeToTrain, ResNetReferenceConvergencePoints) {
  EXPECT_DOUBLE_EQ(resnetRcpEpochs(1000), 35.0);
  EXPECT_DOUBLE_EQ(resnetRcpEpochs(3264), 35.15);
  EXPECT_DOUBLE_EQ(resnetRcpEpochs(8192), 41.9);
  EXPECT_NEAR(resnetRcpEpochs(3840), 35.15 + (39.9 - 35.15) * 576 / 832, 1e-12);
  EXPECT_DOUBLE_EQ(resnetRcpEpochs(100000), 84.5);
}

TEST(TimeToTrain, BertReferenceConvergencePointsAndEvaluationInterval) {
  EXPECT_DOUBLE_EQ(bertRcpSamples(3072), 2764499);
  EXPECT_DOUBLE_EQ(bertRcpSamples(6144), 3319125);
  EXPECT_DOUBLE_EQ(bertRcpSamples(100), 2549220);
  EXPECT_DOUBLE_EQ(bertRcpSamples(1 << 20), 4465067);
  EXPECT_NEAR(bertRcpSamples(5376), 2798080 + (3319125 - 2798080) * 0.5, 1e-6);
  // The rules' table (docs: BERT facts section 1): 256-2048 -> 150,000, 3072 / 4096 -> 175,000,
  // 4608 / 6144 -> 200,000, 8192 -> 225,000, 12288 -> 275,000, 16384 -> 325,000.
  for (auto [gbs, interval] : std::vector<std::pair<i64, i64>>{{256, 150000},
                                                               {2048, 150000},
                                                               {3072, 175000},
                                                               {4096, 175000},
                                                               {4608, 200000},
                                                               {6144, 200000},
                                                               {8192, 225000},
                                                               {12288, 275000},
                                                               {16384, 325000}})
    EXPECT_EQ(bertEvalIntervalSamples(gbs), interval) << gbs;
}

}  // namespace
}  // namespace ipu::cost

// The replicated program's ring reduce-scatter and all-gather are read and priced by the cost
// model: together one allReduceSeconds per gradient, over the op's replicas.
namespace ipu::cost {
namespace {

TEST(CostModel, PricesTheCrossReplicaCollectivesOfAReplicatedProgram) {
  Graph g("mlp");
  Builder b(g);
  int x = b.input("x", {8, 64});
  int y = b.input("labels", {8}, DType::I32);
  int lr = b.input("lr", {});
  int w = b.variable("w", {64, 1000}), bias = b.variable("bias", {1000});
  int loss = b.reduceMean(b.softmaxCrossEntropy(b.dense(x, w, bias), y), {0});
  g.markOutput(loss);
  appendSgdUpdate(g, appendBackward(g, loss, {w, bias}).grads, lr, SgdOptions{});
  for (int replicas : {16, 128}) {
    auto rg = replication::replicate(g, {replicas, 1, false});
    CompileOptions co;
    rg.configure(co, 1);
    const Executable exe = compile(rg.graph, Target::mk2(), co);
    const StepCost sc = estimateStep(exe);
    const Target t = Target::mk2();
    const double expected = (allReduceSeconds(64 * 1000 * 4, PodShape::pod(replicas), t) +
                             allReduceSeconds(1000 * 4, PodShape::pod(replicas), t)) *
                            t.clockHz;
    EXPECT_NEAR(sc.collectiveCycles, expected, 1e-6 * expected) << replicas;
    EXPECT_GT(sc.collectiveCycles, 0);
    EXPECT_LE(sc.collectiveCycles, sc.exchangeCycles);
    EXPECT_EQ(sc.report()["cycles"]["collectives"].get<double>(), sc.collectiveCycles);
  }
  // One replica: no collectives in the program, nothing priced.
  CompileOptions co;
  EXPECT_EQ(estimateStep(compile(g, Target::mk2(), co)).collectiveCycles, 0);
}

}  // namespace
}  // namespace ipu::cost
