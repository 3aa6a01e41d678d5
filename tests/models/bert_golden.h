// The BERT golden fixture (tests/fixtures/bert/bert_goldens.json, written by
// scripts/goldens/make_bert_goldens.py) and a compiled BERT graph on an engine with the golden
// weights written by their TensorFlow names.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ipu_backend/compiler/compiler.h"
#include "ipu_backend/engine/engine.h"
#include "models/bert_large/bert.h"
#include "models/resnet50/golden_weights.h"

namespace ipu::testing {

using nlohmann::json;

inline const json& bertGoldens() {
  static const json j = [] {
    const std::string path = std::string(IPU_SOURCE_DIR) + "/tests/fixtures/bert/bert_goldens.json";
    std::ifstream f(path);
    if (!f) throw std::runtime_error("cannot open " + path);
    return json::parse(f);
  }();
  return j;
}

// golden_spec of make_bert_goldens.py.
inline models::GoldenSpec bertGoldenSpec(const std::string& name, const Shape& shape) {
  auto ends = [&](std::string_view s) { return name.ends_with(s); };
  if (ends("/kernel")) return {0.0, 2.0 * std::sqrt(3.0 / static_cast<double>(shape[0]))};
  if (ends("output_weights")) return {0.0, 2.0 * std::sqrt(3.0 / static_cast<double>(shape[1]))};
  if (ends("_embeddings")) return {0.0, 1.0};
  if (ends("gamma")) return {1.0, 0.5};
  if (ends("beta") || ends("bias")) return {0.0, 0.2};
  throw std::invalid_argument("no golden spec for " + name);
}

inline models::BertConfig bertConfigOf(const json& c) {
  models::BertConfig r;
  r.layers = c.at("layers").get<int>();
  r.hidden = c.at("hidden").get<int>();
  r.heads = c.at("heads").get<int>();
  r.ffn = c.at("ffn").get<int>();
  r.vocab = c.at("vocab").get<int>();
  r.maxPositions = c.at("max_positions").get<int>();
  r.typeVocab = c.at("type_vocab").get<int>();
  return r;
}

inline models::BertShape bertShapeOf(const json& gc) {
  return {gc.at("rows").get<i64>(), gc.at("seq_length").get<i64>(),
          gc.at("masked_slots").get<i64>(), gc.at("max_per_pack").get<i64>()};
}

inline models::BertHostBatch bertBatchOf(const json& gc) {
  const json& b = gc.at("batch");
  auto v = [&](const char* k) { return b.at(k).get<std::vector<std::int32_t>>(); };
  models::BertHostBatch h;
  h.inputIds = v("input_ids");
  h.segmentIds = v("segment_ids");
  h.positions = v("positions");
  h.sequenceIndex = v("sequence_index");
  h.maskedPositions = v("masked_positions");
  h.maskedIds = v("masked_ids");
  h.maskedSequence = v("masked_sequence");
  h.clsPositions = v("cls_positions");
  h.nspLabels = v("nsp_labels");
  h.nspWeights = v("nsp_weights");
  return h;
}

// A compiled BERT graph on an engine: golden weights written by name, a batch's feeds
// connected, every output captured.
struct BertRun {
  BertRun(models::BertGraph g, EngineMode mode, const models::BertHostBatch& batch,
          models::MlmAveraging averaging = models::MlmAveraging::PerToken)
      : bg(std::move(g)), feeds(models::makeBertFeeds(bg, batch, averaging)) {
    CompileOptions opts;
    opts.checkMemory = false;
    exe = std::make_shared<const Executable>(compile(bg.graph, Target::mk2(), opts));
    engine = std::make_unique<Engine>(exe, mode);
    for (int p : bg.params) {
      const Tensor& t = exe->graph.tensor(p);
      engine->writeTensor(t.name,
                          goldenTensor(t.name, t.elements(), bertGoldenSpec(t.name, t.shape)));
    }
    engine->connectInput(bg.inputIds, feeds.inputIds.data());
    engine->connectInput(bg.segmentIds, feeds.segmentIds.data());
    engine->connectInput(bg.positionIds, feeds.positionIds.data());
    engine->connectInput(bg.sequenceIndex, feeds.sequenceIndex.data());
    engine->connectInput(bg.maskedRows, feeds.maskedRows.data());
    engine->connectInput(bg.maskedLabels, feeds.maskedLabels.data());
    engine->connectInput(bg.maskedWeights, feeds.maskedWeights.data());
    engine->connectInput(bg.maskedLabelIndex, feeds.maskedLabelIndex.data());
    engine->connectInput(bg.clsRows, feeds.clsRows.data());
    engine->connectInput(bg.nspLabels, feeds.nspLabels.data());
    engine->connectInput(bg.nspWeights, feeds.nspWeights.data());
    // Optimizer state as the optimizer asks (LAMB: m = v = 0, step count 0).
    for (size_t i = 0; i < bg.optimizerState.size(); ++i) {
      const Tensor& t = exe->graph.tensor(bg.optimizerState[i]);
      if (bg.optimizerInit[i] == StateInit::Weight)
        throw std::invalid_argument("BertRun: no weight-copy state expected, got " + t.name);
      const float v = bg.optimizerInit[i] == StateInit::One ? 1.0f : 0.0f;
      engine->writeTensor(t.name, std::vector<float>(t.elements(), v));
    }
    if (bg.lr >= 0) engine->connectInput(bg.lr, &lr);
    if (bg.dropoutKey >= 0) engine->connectInput(bg.dropoutKey, dropoutKey.data());
    if (bg.lossScale >= 0) {
      engine->connectInput(bg.lossScale, &lossScale);
      engine->connectInput(bg.lossScaleInverse, &lossScaleInverse);
    }
    for (int t : exe->graph.outputs()) {
      outputs[t].assign(exe->graph.tensor(t).elements(), 0.0f);
      engine->connectOutput(t, outputs[t].data());
    }
  }
  void run() { engine->run(); }
  double scalar(int t) const { return outputs.at(t)[0]; }
  const std::vector<float>& out(int t) const { return outputs.at(t); }
  const std::vector<float>& grad(const std::string& name) const {
    return outputs.at(bg.grads.at(bg.graph.get(name)));
  }

  models::BertGraph bg;
  models::BertFeeds feeds;
  std::shared_ptr<const Executable> exe;
  std::unique_ptr<Engine> engine;
  std::map<int, std::vector<float>> outputs;
  float lr = 0.0f;
  std::array<std::int32_t, 2> dropoutKey{0, 0};                // (step, first row)
  float lossScale = 128.0f, lossScaleInverse = 1.0f / 128.0f;  // 16.16's static scale
};

}  // namespace ipu::testing
