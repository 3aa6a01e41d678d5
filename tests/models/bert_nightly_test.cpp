// BERT-Large at full size: the one-IPU memory verdict and the forward against PyTorch. Each
// takes minutes and gigabytes here, so CI leaves the BertNightly suite to scripts/nightly.sh
// (CI_NIGHTLY_ONLY / NIGHTLY_LONG_TESTS_REGEX).
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <memory>

#include <fmt/format.h>

#include "ipu_backend/compiler/compiler.h"
#include "ipu_backend/engine/engine.h"
#include "models/bert_large/bert.h"
#include "models/resnet50/golden_weights.h"
#include "tests/models/bert_golden.h"
#include "tests/models/golden_io.h"

namespace ipu::models {
namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Sequence 512, micro-batch 2 packs (Graphcore's packed layout: 76 + 3 - 1 = 78 masked slots,
// 3 sequences per pack), 16.16, LAMB: must not fit one Mk2. The variables alone (f16 weights
// and LAMB's m, f32 v) are several times the IPU's SRAM, whatever the plan; the compiler's
// memory check names the peak tile.
TEST(BertNightly, LargeSeq512MicroBatch2DoesNotFitOneMk2) {
  const auto t0 = Clock::now();
  const BertGraph bg = buildBertTraining(BertConfig::large(), {2, 512, 78, 3}, bertLambOptions(),
                                         precision::PrecisionPolicy::parse("16.16"));
  const Target mk2 = Target::mk2();
  i64 variableBytes = 0;
  for (const Tensor& t : bg.graph.tensors())
    if (t.kind == TensorKind::Variable) variableBytes += t.elements() * sizeOf(t.dtype);
  EXPECT_GT(variableBytes, 2 * mk2.totalBytes());
  const auto t1 = Clock::now();
  try {
    compile(bg.graph, mk2);  // checkMemory on
    FAIL() << "BERT-Large at 512 x 2 compiled for one Mk2";
  } catch (const CompileError& e) {
    EXPECT_GT(e.bytes(), e.capacity());
    fmt::print("variables {:.3f} GB vs the Mk2's {:.3f} GB; build {:.1f} s, compile {:.1f} s\n{}\n",
               variableBytes / 1e9, mk2.totalBytes() / 1e9, seconds(t0, t1),
               seconds(t1, Clock::now()), e.what());
  }
}

// BERT-Large forward (f32) on one 16-token sequence against PyTorch's float64 forward, from
// the same hash-generated weights (the `full` case of make_bert_goldens.py --full).
TEST(BertNightly, LargeForwardMatchesPyTorch) {
  const auto& all = testing::bertGoldens().at("cases");
  if (!all.contains("full")) GTEST_SKIP() << "no full case: run make_bert_goldens.py --full";
  const auto& gc = all.at("full");
  const auto t0 = Clock::now();
  testing::BertRun r(
      buildBertForward(testing::bertConfigOf(testing::bertGoldens().at("full_config")),
                       testing::bertShapeOf(gc)),
      EngineMode::Fused, testing::bertBatchOf(gc));
  const auto t1 = Clock::now();
  r.run();
  const auto t2 = Clock::now();
  // MLM logits: the first 1024 of each slot elementwise, every one through the slot's sum and
  // sum of squares over the vocabulary (the fixture keeps KBs, not the 2 x 30,522 values).
  const std::vector<float>& logits = r.out(r.bg.mlmLogits);
  const i64 V = r.bg.config.vocab, slots = r.bg.shape.batch * r.bg.shape.maskedSlots;
  std::vector<float> head;
  for (i64 p = 0; p < slots; ++p)
    head.insert(head.end(), logits.begin() + p * V, logits.begin() + p * V + 1024);
  const double mlm = testing::maxRelToScale(head, testing::decodeF32(gc.at("mlm_logits_head")));
  const auto sums = gc.at("mlm_logits_sum").get<std::vector<double>>();
  const auto sumsqs = gc.at("mlm_logits_sumsq").get<std::vector<double>>();
  for (i64 p = 0; p < slots; ++p) {
    double s = 0, s2 = 0;
    for (i64 j = 0; j < V; ++j)
      s += logits[p * V + j], s2 += double(logits[p * V + j]) * logits[p * V + j];
    EXPECT_LT(std::abs(s - sums[p]) / std::sqrt(sumsqs[p]), 1e-4) << "slot " << p;
    EXPECT_LT(std::abs(s2 - sumsqs[p]) / sumsqs[p], 1e-5) << "slot " << p;
  }
  const double nsp =
      testing::maxRelToScale(r.out(r.bg.nspLogits), testing::decodeF32(gc.at("nsp_logits")));
  const double loss =
      std::abs(r.scalar(r.bg.loss) - gc.at("loss").get<double>()) / gc.at("loss").get<double>();
  EXPECT_LT(mlm, 1e-4);
  EXPECT_LT(nsp, 1e-4);
  EXPECT_LT(loss, 1e-5);
  fmt::print(
      "full forward: loss {:.6f} (torch {:.6f}), mlm logits {:.1e}, nsp logits {:.1e}; "
      "setup {:.1f} s, run {:.2f} s; torch f32 noise {}\n",
      r.scalar(r.bg.loss), gc.at("loss").get<double>(), mlm, nsp, seconds(t0, t1), seconds(t1, t2),
      gc.at("noise").dump());
}

}  // namespace
}  // namespace ipu::models
