// BERT pretraining as a training task (harness/task.h) on the trainer: packed shards of
// datasets/bert streamed by a ShardReader (each process reads its replicas' slice of every
// global batch), a held-out evaluation shard set, and the masked-LM accuracy read from the
// graph's "mlm_correct" output with the slots' weights: per token (closed division, the
// reference's metric) or per sequence (open division, as Graphcore's open runs averaged it).
//
// A data folder holds train/*.bertpak and eval/*.bertpak (each made by prepare_bert_data);
// without --data-dir a mini run builds the default set from WordNet's glosses into a cache
// (datasets/bert/mini_data.h). A sample is one packed row (up to max_per_pack sequences).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "datasets/bert/packing.h"
#include "harness/benchmark_registry.h"
#include "harness/task.h"
#include "models/bert_large/bert.h"

namespace ipu::harness {

// The shards of a BERT data folder, their (common) layout and vocabulary, as their headers say.
struct BertDataSet {
  std::filesystem::path dir;
  std::vector<std::string> train, eval;  // shard files, sorted
  datasets::bert::PackedLayout layout;
  std::uint32_t vocab = 0;
  std::int64_t train_records = 0, eval_records = 0;
};

// Reads every shard header of <dir>/train and <dir>/eval (sizes checked against the headers).
// std::invalid_argument naming the folder or file, what was expected and a hint: a missing
// folder, no shards, shards of different layouts or vocabularies.
BertDataSet scanBertData(const std::filesystem::path& dir);

// The model a data set must have been made for: std::invalid_argument naming the shard, the
// header field, the shard's and the model's values, and how to remake the data, when the
// sequence length, masked-LM slots, sequences per pack or vocabulary differ.
void checkBertDataFitsModel(const BertDataSet& data, const ModelRequest::Text& model);

// The mini model: the reference architecture (models/bert_large, the same code) with all 24
// layers (so all 398 tensors of the closed checker's list) narrowed to 32, 2 heads, FFN 128,
// for `vocab` tokens and `sequence` positions. An open run may set another encoder shape
// (text.layers / hidden / heads / ffn, from the mini_bert_* keys; 0 keeps the closed one): the
// real-text mini of docs/PERFORMANCE.md is 2 layers x 128.
models::BertConfig bertMiniConfig(int vocab, int sequence);
models::BertConfig bertMiniConfig(const ModelRequest::Text& text);
inline constexpr int kBertMiniVocab = 512;  // the default data's trained vocabulary

// The model of a request: mini (bertMiniConfig) or BERT-Large, LAMB with the reference's
// exclusions (no weight decay, trust ratio 1 for LayerNorm and bias tensors).
ModelInstance buildBert(const ModelRequest& request);

// The masked-LM accuracy: sum over scored rows of weight x correct / sum of weights, the
// weights as fed (1 per masked token: per token; 1 / masked tokens of the slot's sequence: per
// sequence, which then averages each sequence's accuracy).
class MaskedLmAccuracy : public Metric {
 public:
  explicit MaskedLmAccuracy(bool perSequence) : perSequence_(perSequence) {}
  std::string name() const override {
    return perSequence_ ? "masked_lm_accuracy_per_sequence" : "masked_lm_accuracy";
  }
  std::vector<std::string> outputs() const override { return {"mlm_correct"}; }
  void reset() override { value_ = {}; }
  void accumulate(const MicroBatch& inputs, const MicroBatch& outputs,
                  const std::vector<bool>& scored) override;
  MetricValue result() const override { return value_; }

 private:
  bool perSequence_;
  MetricValue value_;
};

// Epoch `epoch` of the training shards for the trainer's geometry: a ShardReader with this
// process's slice (process = firstReplica / localReplicas), at most `samples` (0: all) rows.
std::unique_ptr<BatchSource> bertEpochSource(const BertDataSet& data, const BatchGeometry& g,
                                             std::uint64_t seed, int epoch, std::int64_t samples,
                                             std::int64_t vocab, bool perSequence);

// The BERT task of a run: request.data_dir is a BERT data folder (scanBertData).
std::unique_ptr<TaskData> makeBertData(const DataRequest& request);

}  // namespace ipu::harness

namespace ipu::harness {

// The BERT part of run_benchmark's plan, before anything runs: the model's text shape (the
// sequence length of max_sequence_length, the masked-LM slots the data tools give that length,
// 3 sequences per pack, the mini vocabulary or BERT-Large's), the data folder (--data-dir, or
// at mini scale the default set built into datasets::bert::defaultBertCacheRoot()) scanned and
// checked against it, and the sample counts the log carries (rows: packs). Throws
// std::invalid_argument naming the folder, shard and field.
struct BertDataPlan {
  std::filesystem::path dir;
  ModelRequest::Text text;
  std::int64_t train_samples = 0, eval_samples = 0;
  bool built_default = false;  // the default set (cached)
};
// `miniVocab` is the mini model's vocabulary (0: kBertMiniVocab, the default data's).
BertDataPlan planBertData(const std::string& dataDir, Scale scale, const Json& hyperparameters,
                          std::int64_t trainSamplesCap, std::int64_t evalSamplesCap,
                          int miniVocab = 0);

}  // namespace ipu::harness
