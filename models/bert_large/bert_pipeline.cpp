#include "models/bert_large/bert_pipeline.h"

#include <numeric>
#include <stdexcept>

#include <fmt/format.h>

namespace ipu::models {
namespace {

std::string layerPrefix(int l) {
  return fmt::format("bert/encoder/layer_{}", l);
}

// The output of sublayer s of a0 f0 a1 f1 ... (its layer norm's).
std::string sublayerOutput(int s) {
  return layerPrefix(s / 2) +
         (s % 2 == 0 ? "/attention/output/LayerNorm/y" : "/output/LayerNorm/y");
}

// Checkpoints of the sublayers [first, end) of one stage: all but its last.
void checkpointSublayers(BertPlacement& p, int first, int end) {
  for (int s = first; s + 1 < end; ++s) p.checkpoints.push_back(sublayerOutput(s));
}

// Sublayers [first, end) of a0 f0 a1 f1 ... as text.
std::string sublayers(int first, int end) {
  if (first >= end) return "";
  auto name = [](int s) { return fmt::format("{}{}", s % 2 == 0 ? "attention " : "FFN ", s / 2); };
  return first + 1 == end ? name(first) : fmt::format("{} .. {}", name(first), name(end - 1));
}

}  // namespace

std::string BertPlacement::describe() const {
  std::string s;
  for (size_t k = 0; k < stageIpu.size(); ++k)
    s += fmt::format("{}stage {} on IPU {}: {}", k ? "; " : "", k, stageIpu[k],
                     k < stageContents.size() ? stageContents[k] : "");
  return s;
}

BertPlacement bertAttentionFfnPlacement(const BertConfig& c, const std::vector<int>& attention,
                                        const std::vector<int>& ffn) {
  if (attention.empty() || attention.size() != ffn.size())
    throw std::invalid_argument(fmt::format(
        "BERT attention/FFN placement: {} attention counts and {} FFN counts; give one of each "
        "per encoder stage (POD16: attention 7,6,7,4 and FFN 6,7,6,5)",
        attention.size(), ffn.size()));
  const int a = std::accumulate(attention.begin(), attention.end(), 0);
  const int f = std::accumulate(ffn.begin(), ffn.end(), 0);
  if (a != c.layers || f != c.layers)
    throw std::invalid_argument(fmt::format(
        "BERT attention/FFN placement: {} attention and {} FFN sublayers placed, the model has {} "
        "layers of each; make each list add up to {}",
        a, f, c.layers, c.layers));
  BertPlacement p;
  p.splits.push_back("bert/embeddings");
  p.stageIpu.push_back(0);
  p.stageContents.push_back("embeddings");
  int doneA = 0, doneF = 0;
  const int n = static_cast<int>(attention.size());
  for (int k = 0; k < n; ++k) {
    const int first = doneA + doneF;
    doneA += attention[static_cast<size_t>(k)];
    doneF += ffn[static_cast<size_t>(k)];
    if (attention[static_cast<size_t>(k)] < 0 || ffn[static_cast<size_t>(k)] < 0 || doneF > doneA ||
        doneA > doneF + 1)
      throw std::invalid_argument(fmt::format(
          "BERT attention/FFN placement: after encoder stage {} come {} attention and {} FFN "
          "sublayers; a stage boundary must fall after a layer's attention or after its FFN (at "
          "most one more attention than FFN, never an FFN before its attention)",
          k + 1, doneA, doneF));
    if (k + 1 < n) checkpointSublayers(p, first, doneA + doneF);  // the last is not recomputed
    p.stageIpu.push_back(k + 1 < n ? k + 1 : 0);
    p.stageContents.push_back(sublayers(first, doneA + doneF) +
                              (k + 1 == n ? ", pooler, MLM and NSP heads" : ""));
    if (k + 1 < n)
      p.splits.push_back(doneA == doneF ? layerPrefix(doneA - 1)
                                        : layerPrefix(doneA - 1) + "/attention");
  }
  p.ipus = n;
  return p;
}

BertPlacement bertLayersPerIpuPlacement(const BertConfig& c, const std::vector<int>& layersPerIpu) {
  const int total = std::accumulate(layersPerIpu.begin(), layersPerIpu.end(), 0);
  if (layersPerIpu.empty() || total != c.layers)
    throw std::invalid_argument(fmt::format(
        "BERT layers_per_ipu: {} layers placed, the model has {}; make the counts add up to {} "
        "(POD16: 3,7,7,7)",
        total, c.layers, c.layers));
  BertPlacement p;
  int done = 0;
  for (size_t k = 0; k < layersPerIpu.size(); ++k) {
    if (layersPerIpu[k] < 1)
      throw std::invalid_argument(
          fmt::format("BERT layers_per_ipu: IPU {} gets {} layers; every IPU needs at least one", k,
                      layersPerIpu[k]));
    const int first = done;
    done += layersPerIpu[k];
    p.splits.push_back(layerPrefix(done - 1));
    checkpointSublayers(p, 2 * first, 2 * done);
    p.stageIpu.push_back(static_cast<int>(k));
    p.stageContents.push_back((k == 0 ? "embeddings, " : "") +
                              fmt::format("layers {} .. {}", first, done - 1));
  }
  p.stageIpu.push_back(0);
  p.stageContents.push_back("pooler, MLM and NSP heads");
  p.ipus = static_cast<int>(layersPerIpu.size());
  return p;
}

}  // namespace ipu::models
