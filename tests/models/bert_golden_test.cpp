// BERT pretraining graph on the compiler + engine against PyTorch goldens
// (tests/fixtures/bert/bert_goldens.json, made by scripts/goldens/make_bert_goldens.py from the
// same hash-generated weights, copied into the graph by their TensorFlow names), and packing
// through the model: a packed batch gives the unpacked batch's logits, losses and gradients.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ipu_backend/compiler/compiler.h"
#include "ipu_backend/engine/engine.h"
#include "ipu_backend/ir/op_defs.h"
#include "models/bert_large/bert.h"
#include "models/resnet50/golden_weights.h"
#include "tests/models/bert_golden.h"
#include "tests/models/golden_io.h"

namespace ipu::models {
namespace {

using nlohmann::json;
using testing::bertBatchOf;
using testing::bertConfigOf;
using testing::bertGoldens;
using testing::BertRun;
using testing::bertShapeOf;
using testing::decodeF32;
using testing::maxRelToScale;

// Forward + backward with every gradient marked as an output.
BertGraph withGrads(const BertConfig& c, const BertShape& s) {
  BertGraph bg = buildBertForward(c, s);
  appendBertGradients(bg);
  for (auto [p, g] : bg.grads) bg.graph.markOutput(g);
  return bg;
}

double relErr(double a, double b) {
  return std::abs(a - b) / std::max(std::abs(b), 1e-30);
}

// Our run of a golden case against PyTorch (float64 reference): losses, logits, the metric and
// every gradient, within a few times PyTorch's own float32 distance from float64.
void expectMatchesGolden(const BertRun& r, const json& gc, const char* what) {
  EXPECT_LT(relErr(r.scalar(r.bg.loss), gc.at("loss").get<double>()), 1e-5) << what;
  EXPECT_LT(relErr(r.scalar(r.bg.mlmLoss), gc.at("mlm_loss").get<double>()), 1e-5) << what;
  EXPECT_LT(relErr(r.scalar(r.bg.nspLoss), gc.at("nsp_loss").get<double>()), 1e-5) << what;
  EXPECT_EQ(r.scalar(r.bg.mlmCorrectCount), gc.at("mlm_correct_count").get<double>()) << what;
  EXPECT_EQ(r.scalar(r.bg.mlmWeightSum), gc.at("mlm_weight_sum").get<double>()) << what;
  const double mlm = maxRelToScale(r.out(r.bg.mlmLogits), decodeF32(gc.at("mlm_logits")));
  const double nsp = maxRelToScale(r.out(r.bg.nspLogits), decodeF32(gc.at("nsp_logits")));
  EXPECT_LT(mlm, 1e-5) << what;
  EXPECT_LT(nsp, 1e-5) << what;
  const auto zero = gc.at("zero_grads").get<std::vector<std::string>>();
  double worst = 0;
  std::string worstName;
  for (const auto& [name, ref] : gc.at("grads").items()) {
    const std::vector<float>& g = r.grad(name);
    if (std::find(zero.begin(), zero.end(), name) != zero.end()) {
      // Zero in exact arithmetic (the key bias): rounding noise only, far below the O(0.1)
      // gradients of the other tensors.
      double mx = 0;
      for (float v : g) mx = std::max(mx, static_cast<double>(std::abs(v)));
      EXPECT_LT(mx, 1e-5) << what << " " << name;
      continue;
    }
    const double e = maxRelToScale(g, decodeF32(ref));
    EXPECT_LT(e, 1e-4) << what << " " << name;
    if (e > worst) worst = e, worstName = name;
  }
  EXPECT_EQ(gc.at("grads").size(), r.bg.params.size());
  fmt::print(
      "{}: loss {:.7f} (torch {:.7f}), mlm logits {:.1e}, nsp logits {:.1e}, worst grad "
      "{:.1e} ({}); torch f32 noise {}\n",
      what, r.scalar(r.bg.loss), gc.at("loss").get<double>(), mlm, nsp, worst, worstName,
      gc.at("noise").dump());
}

TEST(BertGolden, SmallPackedMatchesPyTorch) {
  const json& gc = bertGoldens().at("cases").at("packed");
  BertRun r(withGrads(bertConfigOf(bertGoldens().at("config")), bertShapeOf(gc)), EngineMode::Fused,
            bertBatchOf(gc));
  r.run();
  expectMatchesGolden(r, gc, "packed fused");
}

TEST(BertGolden, SmallUnpackedMatchesPyTorch) {
  const json& gc = bertGoldens().at("cases").at("unpacked");
  BertRun r(withGrads(bertConfigOf(bertGoldens().at("config")), bertShapeOf(gc)), EngineMode::Fused,
            bertBatchOf(gc));
  r.run();
  expectMatchesGolden(r, gc, "unpacked fused");
}

TEST(BertGolden, SmallPackedTileModeMatchesPyTorch) {
  const json& gc = bertGoldens().at("cases").at("packed");
  BertRun r(withGrads(bertConfigOf(bertGoldens().at("config")), bertShapeOf(gc)), EngineMode::Tile,
            bertBatchOf(gc));
  r.run();
  expectMatchesGolden(r, gc, "packed tile");
}

// Three LAMB steps of the small config on the packed batch against the reference form in
// plain torch: each step's loss, the norm of every parameter's total update (a wrong trust
// ratio, decay mask, clip or bias correction moves one of them), a few final tensors.
TEST(BertGolden, SmallLambStepsMatchPyTorch) {
  const json& gc = bertGoldens().at("cases").at("packed");
  const json& lc = bertGoldens().at("lamb");
  const json& h = lc.at("hyper");
  OptimizerOptions o =
      bertLambOptions(h.at("beta1").get<double>(), h.at("beta2").get<double>(),
                      h.at("weight_decay").get<double>(), h.at("epsilon").get<double>());
  o.maxGradNorm = h.at("max_grad_norm").get<double>();
  const BertConfig c = bertConfigOf(bertGoldens().at("config"));
  BertRun r(buildBertTraining(c, bertShapeOf(gc), o), EngineMode::Fused, bertBatchOf(gc));
  const auto lrs = h.at("lrs").get<std::vector<float>>();
  const auto losses = lc.at("step_losses").get<std::vector<double>>();
  std::vector<double> ours;
  for (size_t step = 0; step < lrs.size(); ++step) {
    r.lr = lrs[step];
    r.run();
    ours.push_back(r.scalar(r.bg.loss));
    EXPECT_LT(relErr(r.scalar(r.bg.loss), losses[step]), 1e-5)
        << "step " << step + 1 << ": " << r.scalar(r.bg.loss) << " vs " << losses[step];
  }
  const auto zero = lc.at("zero_updates").get<std::vector<std::string>>();
  double worst = 0;
  std::string worstName;
  for (const auto& [name, ref] : lc.at("update_norms").items()) {
    const Tensor& t = r.bg.graph.tensor(r.bg.graph.get(name));
    const std::vector<float> w0 =
        models::goldenTensor(name, t.elements(), testing::bertGoldenSpec(name, t.shape));
    const std::vector<float> w = r.engine->readFloats(name);
    double d = 0;
    for (size_t i = 0; i < w.size(); ++i) d += (double(w[i]) - w0[i]) * (double(w[i]) - w0[i]);
    d = std::sqrt(d);
    if (std::find(zero.begin(), zero.end(), name) != zero.end()) {
      // Zero gradient in exact arithmetic; float32 noise through m / (sqrt(v) + eps) moves
      // it by ~1e-4 in PyTorch too.
      EXPECT_LT(d, 1e-3) << name;
      continue;
    }
    const double e = relErr(d, ref.get<double>());
    EXPECT_LT(e, 1e-4) << name << ": update norm " << d << " vs " << ref.get<double>();
    if (e > worst) worst = e, worstName = name;
  }
  for (const auto& [name, ref] : lc.at("tracked").items())
    EXPECT_LT(maxRelToScale(r.engine->readFloats(name), decodeF32(ref)), 1e-5) << name;
  fmt::print(
      "lamb: losses {:.6f} (torch {:.6f}), worst update norm {:.1e} ({}); torch f32 "
      "noise {}\n",
      fmt::join(ours, " "), fmt::join(losses, " "), worst, worstName, lc.at("noise").dump());
}

// The same training step under 16.16 (f16 weights and activations, f32 LayerNorm parameters,
// static loss scale 128, stochastic rounding): the loss stays within f16 rounding of the
// float64 reference, no gradient overflows, and a second step lowers the loss.
TEST(BertGolden, SmallPackedTrainsUnder1616) {
  const json& gc = bertGoldens().at("cases").at("packed");
  const auto policy = precision::PrecisionPolicy::parse("16.16");
  OptimizerOptions o = bertLambOptions();
  o.maxGradNorm = 1.0;
  BertRun r(buildBertTraining(bertConfigOf(bertGoldens().at("config")), bertShapeOf(gc), o, policy),
            EngineMode::Fused, bertBatchOf(gc));
  EXPECT_EQ(r.exe->graph.tensor(r.exe->graph.get("bert/embeddings/LayerNorm/gamma")).dtype,
            DType::F32);
  EXPECT_EQ(r.exe->graph.tensor(r.exe->graph.get("bert/embeddings/word_embeddings")).dtype,
            DType::F16);
  r.lossScale = policy.lossScaling.scale;
  r.lossScaleInverse = 1.0f / r.lossScale;
  r.lr = 1e-2f;
  r.run();
  const double first = r.scalar(r.bg.loss);
  EXPECT_LT(relErr(first, gc.at("loss").get<double>()), 1e-2);
  EXPECT_EQ(r.scalar(r.bg.overflow), 0.0);
  // The accuracy (the label's logit equal to its row's maximum) from f16 logits: the golden
  // batch's one correct slot stays correct and no other becomes so.
  EXPECT_EQ(r.scalar(r.bg.mlmCorrectCount), gc.at("mlm_correct_count").get<double>());
  EXPECT_EQ(r.scalar(r.bg.mlmWeightSum), gc.at("mlm_weight_sum").get<double>());
  r.run();
  EXPECT_LT(r.scalar(r.bg.loss), first);
  fmt::print("16.16: loss {:.5f} (torch f64 {:.5f}), after one LAMB step {:.5f}\n", first,
             gc.at("loss").get<double>(), r.scalar(r.bg.loss));
}

// The reference's dropout (0.1 hidden, 0.1 attention): masks drawn per step from the
// `dropout_key` input, identically in tile and fused mode; rate 0 builds no dropout op.
TEST(BertGolden, DropoutDrawsPerStepAndIsOffByDefault) {
  const json& gc = bertGoldens().at("cases").at("packed");
  BertConfig c = bertConfigOf(bertGoldens().at("config"));
  const BertGraph plain = buildBertForward(c, bertShapeOf(gc));
  EXPECT_EQ(plain.dropoutKey, -1);
  for (const Op& op : plain.graph.ops()) EXPECT_NE(opName(op.kind), "dropout");
  c.hiddenDropout = c.attentionDropout = 0.1;
  BertRun fused(withGrads(c, bertShapeOf(gc)), EngineMode::Fused, bertBatchOf(gc));
  int sites = 0;
  for (const Op& op : fused.bg.graph.ops()) sites += opName(op.kind) == "dropout";
  EXPECT_EQ(sites, 2 * (1 + 3 * c.layers));  // forward and backward: embeddings, 3 per layer
  fused.run();
  const double step0 = fused.scalar(fused.bg.loss);
  fused.run();
  EXPECT_EQ(fused.scalar(fused.bg.loss), step0) << "same key, same masks";
  EXPECT_GT(relErr(step0, gc.at("loss").get<double>()), 1e-3) << "dropout changes the loss";
  fused.dropoutKey = {1, 0};
  fused.run();
  EXPECT_GT(relErr(fused.scalar(fused.bg.loss), step0), 1e-4) << "another step, other masks";
  BertRun tile(withGrads(c, bertShapeOf(gc)), EngineMode::Tile, bertBatchOf(gc));
  tile.dropoutKey = {1, 0};
  tile.run();
  EXPECT_LT(relErr(tile.scalar(tile.bg.loss), fused.scalar(fused.bg.loss)), 1e-5);
  EXPECT_LT(maxRelToScale(tile.grad("bert/encoder/layer_0/intermediate/dense/kernel"),
                          fused.grad("bert/encoder/layer_0/intermediate/dense/kernel")),
            1e-4);
}

// The open division's averaging (per sequence) is the same graph with other slot weights:
// the MLM loss and accuracy equal PyTorch's mean over sequences of each sequence's mean,
// packed and unpacked, and the host's perSequenceAccuracy agrees.
TEST(BertGolden, PerSequenceAveragingIsTheOpenDivisions) {
  const BertConfig c = bertConfigOf(bertGoldens().at("config"));
  for (const char* name : {"packed", "unpacked"}) {
    const json& gc = bertGoldens().at("cases").at(name);
    const BertHostBatch batch = bertBatchOf(gc);
    BertRun r(buildBertForward(c, bertShapeOf(gc)), EngineMode::Fused, batch,
              MlmAveraging::PerSequence);
    r.run();
    EXPECT_LT(relErr(r.scalar(r.bg.mlmLoss), gc.at("mlm_loss_per_sequence").get<double>()), 1e-5)
        << name;
    EXPECT_NE(gc.at("mlm_loss_per_sequence").get<double>(), gc.at("mlm_loss").get<double>());
    const double acc = r.scalar(r.bg.mlmCorrectCount) / r.scalar(r.bg.mlmWeightSum);
    EXPECT_NEAR(acc, gc.at("mlm_accuracy_per_sequence").get<double>(), 1e-6) << name;
    const PerSequenceAccuracy host =
        perSequenceAccuracy(r.bg.shape, r.out(r.bg.mlmCorrect), batch.maskedSequence);
    EXPECT_EQ(host.sequences, 5) << name;
    EXPECT_NEAR(host.sum / host.sequences, acc, 1e-6) << name;
  }
}

// Values of the used slots (weight != 0) in slot order.
std::vector<float> usedRows(const std::vector<float>& v, const std::vector<float>& weights) {
  const size_t width = v.size() / weights.size();
  std::vector<float> out;
  for (size_t i = 0; i < weights.size(); ++i)
    if (weights[i] != 0) out.insert(out.end(), v.begin() + i * width, v.begin() + (i + 1) * width);
  return out;
}

// The same five sequences packed (3 + 2 per row) and unpacked (one per row): the packed rows
// list the sequences in the unpacked order, so the used masked-LM and NSP slots line up.
TEST(BertPacking, PackedEqualsUnpackedPerSequence) {
  const BertConfig c = bertConfigOf(bertGoldens().at("config"));
  const json& pc = bertGoldens().at("cases").at("packed");
  const json& uc = bertGoldens().at("cases").at("unpacked");
  BertRun packed(withGrads(c, bertShapeOf(pc)), EngineMode::Fused, bertBatchOf(pc));
  BertRun unpacked(withGrads(c, bertShapeOf(uc)), EngineMode::Fused, bertBatchOf(uc));
  packed.run();
  unpacked.run();
  const std::vector<float> pm =
      usedRows(packed.out(packed.bg.mlmLogits), packed.feeds.maskedWeights);
  const std::vector<float> um =
      usedRows(unpacked.out(unpacked.bg.mlmLogits), unpacked.feeds.maskedWeights);
  ASSERT_EQ(pm.size(), um.size());
  ASSERT_GT(pm.size(), 0u);
  EXPECT_LT(maxRelToScale(pm, um), 1e-5);
  const std::vector<float> pn = usedRows(packed.out(packed.bg.nspLogits), packed.feeds.nspWeights);
  const std::vector<float> un =
      usedRows(unpacked.out(unpacked.bg.nspLogits), unpacked.feeds.nspWeights);
  ASSERT_EQ(pn.size(), 10u);
  EXPECT_LT(maxRelToScale(pn, un), 1e-5);
  EXPECT_LT(relErr(packed.scalar(packed.bg.mlmLoss), unpacked.scalar(unpacked.bg.mlmLoss)), 1e-6);
  EXPECT_LT(relErr(packed.scalar(packed.bg.nspLoss), unpacked.scalar(unpacked.bg.nspLoss)), 1e-6);
  for (int p : packed.bg.params) {
    const std::string& name = packed.bg.graph.tensor(p).name;
    if (name.find("attention/self/key/bias") != std::string::npos) continue;  // zero: noise
    EXPECT_LT(maxRelToScale(packed.grad(name), unpacked.grad(name)), 1e-4) << name;
  }

  // The check can fail: one sequence index for the whole row (attention across the packed
  // sequences, positions still restarting) moves the logits far beyond the tolerance above.
  BertRun leaky(withGrads(c, bertShapeOf(pc)), EngineMode::Fused, bertBatchOf(pc));
  for (float& s : leaky.feeds.sequenceIndex) s = s > 0 ? 1.0f : 0.0f;
  leaky.run();
  const std::vector<float> lm = usedRows(leaky.out(leaky.bg.mlmLogits), leaky.feeds.maskedWeights);
  EXPECT_GT(maxRelToScale(lm, um), 1e-2);
}

}  // namespace
}  // namespace ipu::models
