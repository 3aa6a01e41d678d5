// Graphcore's published pipeline placements of BERT and EfficientNet (models/bert_large/
// bert_pipeline.h, models/efficientnet_b4/efficientnet_pipeline.h) and the fit verdicts they give
// on Mk2 IPUs. Small configs of the same code run in CI; the full-size verdicts (BERT-Large at
// sequence 512, EfficientNet-B4 at 380) are the nightly's (*Nightly.*).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "ipu_backend/compiler/pipeline.h"
#include "ipu_backend/precision/precision_policy.h"
#include "models/bert_large/bert_pipeline.h"
#include "models/efficientnet_b4/efficientnet_pipeline.h"

namespace ipu {
namespace {

using pipeline::compilePipeline;
using pipeline::PipelinedExecutable;
using pipeline::PipelineOptions;

TEST(BertPlacement, GraphcorePod16AttentionFfnPlacement) {
  const models::BertConfig c = models::BertConfig::large();
  const models::BertPlacement p = models::bertAttentionFfnPlacement(c, {7, 6, 7, 4}, {6, 7, 6, 5});
  // Embedding alone on IPU0; IPU1 attention 0..6 + FFN 0..5; IPU2 attention 7..12 + FFN 6..12;
  // IPU3 attention 13..19 + FFN 13..18; IPU0 again attention 20..23 + FFN 19..23 and the heads.
  EXPECT_EQ(p.splits,
            (std::vector<std::string>{"bert/embeddings", "bert/encoder/layer_6/attention",
                                      "bert/encoder/layer_12", "bert/encoder/layer_19/attention"}));
  EXPECT_EQ(p.stageIpu, (std::vector<int>{0, 1, 2, 3, 0}));
  EXPECT_EQ(p.ipus, 4);
  EXPECT_NE(p.describe().find("stage 4 on IPU 0: FFN 19 .. FFN 23, pooler"), std::string::npos)
      << p.describe();
  // Graphcore's checkpointOutput: every sublayer output but the last of its stage (13 sublayers
  // on each of IPUs 1-3), none in the last stage (not recomputed).
  ASSERT_EQ(p.checkpoints.size(), 36u);
  EXPECT_EQ(p.checkpoints.front(), "bert/encoder/layer_0/attention/output/LayerNorm/y");
  EXPECT_EQ(p.checkpoints[1], "bert/encoder/layer_0/output/LayerNorm/y");
  EXPECT_EQ(p.checkpoints[11], "bert/encoder/layer_5/output/LayerNorm/y");
  EXPECT_EQ(p.checkpoints[12], "bert/encoder/layer_6/output/LayerNorm/y");      // IPU2's first
  EXPECT_EQ(p.checkpoints.back(), "bert/encoder/layer_18/output/LayerNorm/y");  // a19 ends IPU3
  const models::BertPlacement l = models::bertLayersPerIpuPlacement(c, {3, 7, 7, 7});
  EXPECT_EQ(l.splits, (std::vector<std::string>{"bert/encoder/layer_2", "bert/encoder/layer_9",
                                                "bert/encoder/layer_16", "bert/encoder/layer_23"}));
  EXPECT_EQ(l.stageIpu, (std::vector<int>{0, 1, 2, 3, 0}));
}

TEST(BertPlacement, CountsThatDoNotAddUpOrPutAnFfnBeforeItsAttentionAreRefused) {
  const models::BertConfig c = models::BertConfig::large();
  EXPECT_THROW(models::bertAttentionFfnPlacement(c, {7, 6, 7, 3}, {6, 7, 6, 5}),
               std::invalid_argument);
  EXPECT_THROW(models::bertAttentionFfnPlacement(c, {6, 7, 7, 4}, {7, 6, 6, 5}),
               std::invalid_argument);  // FFN 6 before attention 6
  EXPECT_THROW(models::bertAttentionFfnPlacement(c, {7, 6, 7}, {6, 7, 6, 5}),
               std::invalid_argument);
  EXPECT_THROW(models::bertLayersPerIpuPlacement(c, {3, 7, 7, 6}), std::invalid_argument);
  try {
    models::bertLayersPerIpuPlacement(c, {3, 7, 7, 6});
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("add up to 24"), std::string::npos) << e.what();
  }
}

TEST(EfficientNetPlacement, GraphcoreBlockNamesStartTheNextIpu) {
  namespace en = models::efficientnet;
  const en::Config c = en::Config::b4();
  // B4 repeats (x1.8): stages 1..7 have 2, 4, 4, 6, 6, 8, 2 blocks.
  EXPECT_EQ(en::splitPrefixes(c, {"block2b", "block4b", "block6c"}),
            (std::vector<std::string>{"features.2.0", "features.4.0", "features.6.1"}));
  EXPECT_EQ(en::splitPrefixes(c, {"block2c", "block4c", "block6a"}),
            (std::vector<std::string>{"features.2.1", "features.4.1", "features.5.5"}));
  EXPECT_EQ(en::splitPrefix(c, "block1a"), "features.0");
  EXPECT_THROW(en::splitPrefix(c, "block7c"), std::invalid_argument);  // stage 7 has 2 blocks
  EXPECT_THROW(en::splitPrefix(c, "block8a"), std::invalid_argument);
  EXPECT_THROW(en::splitPrefix(c, "features.2.1"), std::invalid_argument);
}

// A small BERT (5 layers) through Graphcore's kind of placement: 5 stages on 4 IPUs, the
// embedding and the heads sharing IPU0 (the tied word embeddings), recomputation at the stage
// boundaries shrinking every IPU's stashes.
TEST(BertPipeline, SmallBertOverFourIpusWithTheHeadsBackOnIpu0) {
  models::BertConfig c = models::BertConfig::small();
  c.layers = 5;
  models::BertShape s;
  s.batch = 2;
  s.seqLength = 32;
  s.maskedSlots = 6;
  s.maxPerPack = 3;
  const Graph training = models::buildBertTraining(c, s, models::bertLambOptions()).graph;
  const models::BertPlacement p = models::bertAttentionFfnPlacement(c, {2, 1, 1, 1}, {1, 2, 1, 1});
  PipelineOptions o;
  o.splits = p.splits;
  o.stageIpu = p.stageIpu;
  o.accumulation = pipeline::smallestAccumulation(o.schedule, static_cast<int>(p.stageIpu.size()));
  o.replicas = 2;
  const PipelinedExecutable plain = compilePipeline(training, Target::small(16, 8 << 20), o);
  o.recompute = true;
  const PipelinedExecutable re = compilePipeline(training, Target::small(16, 8 << 20), o);
  ASSERT_EQ(re.programs.size(), 4u);
  EXPECT_EQ(re.programs[0].stages, (std::vector<int>{0, 4}));
  EXPECT_GT(re.recomputation.recomputedOps, 0);
  for (size_t i = 0; i < re.programs.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_LE(re.programs[i].stashBytes, plain.programs[i].stashBytes);
    EXPECT_LE(re.programs[i].peakTileBytes, plain.programs[i].peakTileBytes);
  }
  EXPECT_LT(re.programs[1].stashBytes, plain.programs[1].stashBytes);
  // With the placement's checkpoints the stages are recomputed a sublayer at a time.
  o.checkpoints = p.checkpoints;
  ASSERT_EQ(p.checkpoints.size(), 5u);
  const PipelinedExecutable perSublayer = compilePipeline(training, Target::small(16, 8 << 20), o);
  EXPECT_EQ(perSublayer.recomputation.segments, re.recomputation.segments + 5);
  // The word embeddings live on IPU0 only: the decoder of the last stage reads them there.
  const int word = re.graph.find("bert/embeddings/word_embeddings");
  ASSERT_GE(word, 0);
  EXPECT_GE(re.programs[0].localOf.count(word), 1u);
  for (size_t i = 1; i < re.programs.size(); ++i) EXPECT_EQ(re.programs[i].localOf.count(word), 0u);
}

// The tile plan of a BERT pipeline verdict, pinned: 4 narrow layers (hidden 256, FFN 1,024,
// 16.16) at sequence 256 over Graphcore's kind of POD16 placement (5 stages on 4 IPUs) with its
// checkpoints and the optimizer state off-chip; the matmuls over 256 tokens take the blocked plan
// of the full-size verdict.
// Every change to how the compiler works out a verdict (its passes, its records, in which order
// or on how many threads it compiles the IPU programs) must leave every IPU's plan bit-identical:
// the hashes cover every tile's bytes, every arena offset and the fullest tile's occupants. A
// change that moves a plan on purpose re-pins the figures this prints.
TEST(BertPipeline, LargeWidthVerdictTilePlanIsPinned) {
  models::BertConfig c = models::BertConfig::large();
  c.layers = 4;
  c.hidden = 256;
  c.heads = 4;
  c.ffn = 1024;
  c.vocab = 1024;
  models::BertShape s;
  s.batch = 1;
  s.seqLength = 256;
  s.maskedSlots = 40;
  s.maxPerPack = 3;
  const Graph training = models::buildBertTraining(c, s, models::bertLambOptions(),
                                                   precision::PrecisionPolicy::parse("16.16"))
                             .graph;
  const models::BertPlacement p = models::bertAttentionFfnPlacement(c, {1, 1, 1, 1}, {1, 1, 1, 1});
  PipelineOptions o;
  o.splits = p.splits;
  o.stageIpu = p.stageIpu;
  o.ipus = p.ipus;
  o.accumulation = pipeline::smallestAccumulation(o.schedule, static_cast<int>(p.stageIpu.size()));
  o.replicas = 4;
  o.optimizerStateOffChip = true;
  o.recompute = true;
  o.checkpoints = p.checkpoints;
  o.accumulateInWeightDType = true;
  o.checkMemory = false;
  o.planExchanges = false;
  const PipelinedExecutable pe = compilePipeline(training, Target::mk2(), o);
  ASSERT_EQ(pe.programs.size(), 4u);
  auto mix = [](std::uint64_t& h, i64 v) {  // FNV-1a over the figures, in a fixed order
    for (int b = 0; b < 8; ++b) {
      h ^= static_cast<std::uint64_t>(v >> (8 * b)) & 0xff;
      h *= 1099511628211ULL;
    }
  };
  std::string figures;
  int blockedSets = 0;
  for (const pipeline::IpuProgram& prog : pe.programs) {
    const Executable& exe = *prog.exe;
    for (const ComputeSet& cs : exe.computeSets)
      blockedSets += cs.name.ends_with("/block_products");
    std::uint64_t memoryHash = 1469598103934665603ULL, offsetHash = memoryHash,
                  occupantHash = memoryHash;
    for (size_t t = 0; t < exe.tileMemory.size(); ++t) {
      mix(memoryHash, exe.tileMemory[t].alwaysLive);
      mix(memoryHash, exe.tileMemory[t].peakNotAlwaysLive);
      mix(memoryHash, exe.arenaBytes[t]);
    }
    i64 windows = 0, gathers = 0, sharedGathers = 0;
    for (const auto& slices : exe.mapping)
      for (const TileSlice& sl : slices) mix(offsetHash, sl.offset);
    for (const ComputeSet& cs : exe.computeSets)
      for (const Vertex& v : cs.vertices)
        for (const Window& w : v.inputs) {
          ++windows;
          gathers += w.gather;
          sharedGathers += w.shared;
          mix(offsetHash, w.gather ? w.gatherOffset : -1);
        }
    const TileDetail& worst = exe.memoryDetail.worstTiles.at(0);
    for (const TileOccupant& occ : worst.occupants)
      for (char ch : fmt::format("{} {} {}\n", occ.name, occ.bytes, occ.alwaysLive))
        mix(occupantHash, ch);
    figures += fmt::format(
        "IPU {}: peak tile {} of {} B, worst tile {} ({} always live, {} code and vertex state, "
        "peak at set {}), {} windows, {} gathers ({} shared), memory {:#x}, offsets {:#x}, "
        "occupants {:#x}\n",
        prog.ipu, prog.worstTile, prog.peakTileBytes, worst.tile, worst.memory.alwaysLive,
        worst.codeAndVertexState, worst.peakComputeSet, windows, gathers, sharedGathers, memoryHash,
        offsetHash, occupantHash);
  }
  EXPECT_GT(blockedSets, 0) << "no matmul took the blocked plan";
  EXPECT_EQ(figures,
            "IPU 0: peak tile 1344 of 244488 B, worst tile 1344 (72600 always live, 65824 code and "
            "vertex state, peak at set 231), 2034647 windows, 1703750 gathers (132940 shared), "
            "memory 0x4bfb34ccd731f3c0, offsets 0x4a816a2be28ee7fb, occupants 0x4643e6d6279363b0\n"
            "IPU 1: peak tile 1344 of 222384 B, worst tile 1344 (54840 always live, 47584 code and "
            "vertex state, peak at set 170), 1354668 windows, 1206312 gathers (0 shared), memory "
            "0x682ac24a4c56b7f7, offsets 0x7e95f30a521f749b, occupants 0x7fc7d9e255091e01\n"
            "IPU 2: peak tile 1344 of 220272 B, worst tile 1344 (53080 always live, 46864 code and "
            "vertex state, peak at set 156), 1347489 windows, 1203257 gathers (0 shared), memory "
            "0xaeb9c5977c9e746e, offsets 0x6bb6ab7a699d07f6, occupants 0x509d6191c190933\n"
            "IPU 3: peak tile 1344 of 221160 B, worst tile 1344 (54736 always live, 47296 code and "
            "vertex state, peak at set 156), 1347489 windows, 1203249 gathers (0 shared), memory "
            "0x1590812b32470794, offsets 0xa518c14870bb20e5, occupants 0x77845e0fa76d3089\n")
      << figures;
}

// ---- full size (nightly) ----------------------------------------------------------------------

struct Verdict {
  bool fits = true;
  std::vector<i64> peaks;
};
Verdict verdictOf(const Graph& training, PipelineOptions o) {
  o.checkMemory = false;
  o.planExchanges = false;
  const PipelinedExecutable pe = compilePipeline(training, Target::mk2(), o);
  Verdict v;
  for (const auto& p : pe.programs) {
    v.peaks.push_back(p.peakTileBytes);
    v.fits = v.fits && p.peakTileBytes <= p.exe->target.bytesPerTile;
  }
  std::printf("%s", pe.describe().c_str());
  return v;
}

Graph bertLargeTraining() {
  models::BertShape s;
  s.batch = 2;  // packs
  s.seqLength = 512;
  s.maskedSlots = 78;
  s.maxPerPack = 3;
  return models::buildBertTraining(models::BertConfig::large(), s, models::bertLambOptions(),
                                   precision::PrecisionPolicy::parse("16.16"))
      .graph;
}

PipelineOptions bertOptions(const models::BertPlacement& p) {
  PipelineOptions o;
  o.splits = p.splits;
  o.stageIpu = p.stageIpu;
  o.ipus = p.ipus;
  o.accumulation = pipeline::smallestAccumulation(o.schedule, static_cast<int>(p.stageIpu.size()));
  o.replicas = 4;
  o.optimizerStateOffChip = true;  // Graphcore's POD16
  o.recompute = true;
  o.checkpoints = p.checkpoints;     // Graphcore's checkpointOutput per sublayer
  o.accumulateInWeightDType = true;  // PopART's default accum_type: f16 accumulators
  return o;
}

TEST(BertNightly, LargeFitsGraphcorePod16PipelineAndNotOneIpu) {
  const Graph training = bertLargeTraining();
  const models::BertConfig c = models::BertConfig::large();
  EXPECT_TRUE(verdictOf(training, bertOptions(models::bertAttentionFfnPlacement(c, {7, 6, 7, 4},
                                                                                {6, 7, 6, 5})))
                  .fits);
  EXPECT_TRUE(
      verdictOf(training, bertOptions(models::bertLayersPerIpuPlacement(c, {3, 7, 7, 7}))).fits);
  PipelineOptions one;  // one stage: the grouped schedule still needs G >= 2
  one.accumulation = pipeline::smallestAccumulation(one.schedule, 1);
  one.replicas = 4;
  one.optimizerStateOffChip = true;
  one.accumulateInWeightDType = true;
  EXPECT_FALSE(verdictOf(training, one).fits);
}

Graph efficientNetTraining(bool g16, i64 microBatch) {
  namespace en = models::efficientnet;
  en::Config c = g16 ? en::Config::b4G16() : en::Config::b4();
  c.norm = en::Norm::Group;
  c.normGroups = 4;
  OptimizerOptions o;
  o.kind = "rmsprop";
  o.epsilon = 1e-3;
  o.rho = 0.953125;
  o.weightDecay = 1e-5;
  o.emaDecay = 0.97;
  return en::buildTraining(c, microBatch, o, precision::PrecisionPolicy::parse("16.32")).graph;
}

PipelineOptions efficientNetOptions(bool g16, const std::vector<std::string>& blocks) {
  namespace en = models::efficientnet;
  PipelineOptions o;
  o.splits = en::splitPrefixes(g16 ? en::Config::b4G16() : en::Config::b4(), blocks);
  o.accumulation = pipeline::smallestAccumulation(o.schedule, 4);
  o.replicas = 4;
  o.recompute = true;
  return o;
}

TEST(EfficientNetNightly, B4FitsGraphcoreFourIpuPipelineAndNotOneIpu) {
  const Graph training = efficientNetTraining(false, 3);
  EXPECT_TRUE(
      verdictOf(training, efficientNetOptions(false, {"block2b", "block4b", "block6c"})).fits);
  PipelineOptions one;  // one stage: the grouped schedule still needs G >= 2
  one.accumulation = pipeline::smallestAccumulation(one.schedule, 1);
  one.replicas = 4;
  EXPECT_FALSE(verdictOf(training, one).fits);
}

TEST(EfficientNetNightly, G16FitsGraphcoreFourIpuPipeline) {
  EXPECT_TRUE(verdictOf(efficientNetTraining(true, 5),
                        efficientNetOptions(true, {"block2c", "block4c", "block6a"}))
                  .fits);
}
}  // namespace
}  // namespace ipu
