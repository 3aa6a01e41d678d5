#include "harness/bert_task.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include "datasets/bert/mini_data.h"
#include "datasets/bert/shards.h"
#include "datasets/error.h"

namespace ipu::harness {
namespace {

namespace fs = std::filesystem;
namespace bert = datasets::bert;

std::vector<std::string> shardFiles(const fs::path& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& f : fs::directory_iterator(dir, ec))
    if (f.path().extension() == ".bertpak") out.push_back(f.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

constexpr char kRemake[] =
    "make the data for this model with prepare_bert_data (--max-seq-length, --max-per-pack, "
    "--vocab) into <data-dir>/train and <data-dir>/eval, or run without --data-dir for the "
    "default set";

// One micro-batch of records into the graph's inputs, through models::makeBertFeeds (which
// checks every id, position and slot against the model and names the row and slot).
void fillSlot(std::span<const bert::PackedRecord> records, const MicroBatch& in, std::int64_t vocab,
              bool perSequence, std::int64_t step, std::int64_t firstRow) {
  const HostSlot& ids = in["input_ids"];
  models::BertGraph bg;
  bg.shape.batch = ids.shape.at(0);
  bg.shape.seqLength = ids.shape.at(1);
  bg.shape.maskedSlots = in["masked_lm_ids"].elements() / bg.shape.batch;
  bg.shape.maxPerPack = in["cls_rows"].elements() / bg.shape.batch;
  bg.config.vocab = static_cast<int>(vocab);
  bg.config.maxPositions = static_cast<int>(bg.shape.seqLength);
  if (static_cast<std::int64_t>(records.size()) != bg.shape.batch)
    throw std::logic_error("bert: a micro-batch of the wrong number of records");
  models::BertHostBatch hb;
  for (const bert::PackedRecord& r : records) {
    if (static_cast<std::int64_t>(r.inputIds.size()) != bg.shape.seqLength ||
        static_cast<std::int64_t>(r.maskedIds.size()) != bg.shape.maskedSlots ||
        static_cast<std::int64_t>(r.clsPositions.size()) != bg.shape.maxPerPack)
      throw std::invalid_argument(fmt::format(
          "bert: a record of {} tokens, {} masked slots, {} sequences per pack for a model of "
          "{}, {}, {}; {}",
          r.inputIds.size(), r.maskedIds.size(), r.clsPositions.size(), bg.shape.seqLength,
          bg.shape.maskedSlots, bg.shape.maxPerPack, kRemake));
    const auto widen = [](auto& to, const auto& from) {
      to.insert(to.end(), from.begin(), from.end());
    };
    widen(hb.inputIds, r.inputIds);
    widen(hb.segmentIds, r.segmentIds);
    widen(hb.positions, r.positions);
    widen(hb.sequenceIndex, r.inputMask);
    widen(hb.maskedPositions, r.maskedPositions);
    widen(hb.maskedIds, r.maskedIds);
    widen(hb.maskedSequence, r.maskedWeights);
    widen(hb.clsPositions, r.clsPositions);
    widen(hb.nspLabels, r.nspLabels);
    widen(hb.nspWeights, r.nspWeights);
  }
  const models::BertFeeds f = models::makeBertFeeds(
      bg, hb, perSequence ? models::MlmAveraging::PerSequence : models::MlmAveraging::PerToken);
  const auto put = [&](const char* name, const auto& values) {
    const auto dst = in.get<std::remove_cvref_t<decltype(values[0])>>(name);
    if (dst.size() != values.size())
      throw std::logic_error(fmt::format("bert: input '{}' holds {} values, the feed {}", name,
                                         dst.size(), values.size()));
    std::copy(values.begin(), values.end(), dst.begin());
  };
  put("input_ids", f.inputIds);
  put("segment_ids", f.segmentIds);
  put("position_ids", f.positionIds);
  put("sequence_index", f.sequenceIndex);
  put("masked_lm_rows", f.maskedRows);
  put("masked_lm_ids", f.maskedLabels);
  put("masked_lm_weights", f.maskedWeights);
  put("masked_lm_label_index", f.maskedLabelIndex);
  put("cls_rows", f.clsRows);
  put("next_sentence_labels", f.nspLabels);
  put("next_sentence_weights", f.nspWeights);
  for (const HostSlot& s : in.slots())
    if (s.name == "dropout_key") {  // masks keyed by the step and the global row
      const auto key = s.as<std::int32_t>();
      key[0] = static_cast<std::int32_t>(step);
      key[1] = static_cast<std::int32_t>(firstRow);
    }
}

class BertEpochSource : public BatchSource {
 public:
  BertEpochSource(const BertDataSet& data, const BatchGeometry& g, std::uint64_t seed, int epoch,
                  std::int64_t samples, std::int64_t vocab, bool perSequence)
      : g_(g),
        layout_(data.layout),
        vocab_(vocab),
        perSequence_(perSequence),
        reader_(data.train, config(g, seed)) {
    reader_.startEpoch(static_cast<std::uint64_t>(epoch));
    // The reader keeps whole global batches; `samples` caps them.
    steps_ = static_cast<std::int64_t>(reader_.recordsPerEpoch()) / localBatch();
    if (samples > 0) steps_ = std::min(steps_, samples / g.globalBatch());
  }
  bool beginStep(std::int64_t globalStep) override {
    if (taken_ >= steps_) return false;
    records_.assign(static_cast<size_t>(localBatch()), bert::PackedRecord(layout_));
    for (bert::PackedRecord& r : records_)
      if (!reader_.next(r)) return false;
    ++taken_;
    step_ = globalStep;
    return true;
  }
  void fill(int replica, int slot, const MicroBatch& in) override {
    const std::int64_t at = (replica - g_.firstReplica) * g_.perReplica() + slot * g_.microBatch;
    fillSlot(std::span<const bert::PackedRecord>(records_.data() + at,
                                                 static_cast<size_t>(g_.microBatch)),
             in, vocab_, perSequence_, step_, replica * g_.perReplica() + slot * g_.microBatch);
  }

 private:
  std::int64_t localBatch() const { return g_.localReplicas * g_.perReplica(); }
  static bert::ReaderConfig config(const BatchGeometry& g, std::uint64_t seed) {
    bert::ReaderConfig c;
    c.seed = seed;
    c.processCount = g.replicas / g.localReplicas;
    c.processIndex = g.firstReplica / g.localReplicas;
    c.localBatch = static_cast<int>(g.localReplicas * g.perReplica());
    return c;
  }
  BatchGeometry g_;
  bert::PackedLayout layout_;
  std::int64_t vocab_;
  bool perSequence_;
  bert::ShardReader reader_;
  std::vector<bert::PackedRecord> records_;
  std::int64_t steps_ = 0, taken_ = 0, step_ = 0;
};

class BertEvalSource : public EvalSource {
 public:
  BertEvalSource(const std::vector<bert::PackedRecord>& records, std::int64_t batch,
                 std::int64_t vocab, bool perSequence)
      : records_(records), batch_(batch), vocab_(vocab), perSequence_(perSequence) {}
  bool next(const MicroBatch& in, std::vector<bool>& scored) override {
    const std::int64_t n = static_cast<std::int64_t>(records_.size());
    if (i_ >= n) return false;
    // The last batch is padded with copies of its last record, not scored.
    std::vector<bert::PackedRecord> rows;
    for (std::int64_t k = 0; k < batch_; ++k) {
      rows.push_back(records_[static_cast<size_t>(std::min(i_ + k, n - 1))]);
      if (i_ + k >= n) scored[static_cast<size_t>(k)] = false;
    }
    fillSlot(rows, in, vocab_, perSequence_, 0, i_);
    i_ += batch_;
    return true;
  }

 private:
  const std::vector<bert::PackedRecord>& records_;
  std::int64_t batch_, vocab_;
  bool perSequence_;
  std::int64_t i_ = 0;
};

std::vector<std::uint8_t> readFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw datasets::DatasetError("cannot open " + path, path);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

class BertTaskData : public TaskData {
 public:
  explicit BertTaskData(const DataRequest& r) : r_(r), data_(scanBertData(r.data_dir)) {
    // The evaluation set is small (10,000 sequences at full scale): read and verified at once.
    for (const std::string& path : data_.eval) {
      std::vector<bert::PackedRecord> part = bert::parseShard(readFile(path), path);
      std::move(part.begin(), part.end(), std::back_inserter(eval_));
    }
    if (r.eval_samples > 0 && r.eval_samples < static_cast<std::int64_t>(eval_.size()))
      eval_.resize(static_cast<size_t>(r.eval_samples));
  }
  std::int64_t trainSamples() const override {
    return r_.train_samples > 0 ? std::min(r_.train_samples, data_.train_records)
                                : data_.train_records;
  }
  std::int64_t evalSamples() const override { return static_cast<std::int64_t>(eval_.size()); }
  std::unique_ptr<BatchSource> trainEpoch(int epoch, const BatchGeometry& g) const override {
    return bertEpochSource(data_, g, r_.seed, epoch, r_.train_samples, r_.vocab_size,
                           r_.per_sequence);
  }
  std::unique_ptr<EvalSource> evaluation(std::int64_t batch, const std::string&) const override {
    return std::make_unique<BertEvalSource>(eval_, batch, r_.vocab_size, r_.per_sequence);
  }
  std::unique_ptr<Metric> metric() const override {
    return std::make_unique<MaskedLmAccuracy>(r_.per_sequence);
  }

 private:
  DataRequest r_;
  BertDataSet data_;
  std::vector<bert::PackedRecord> eval_;
};

}  // namespace

BertDataSet scanBertData(const fs::path& dir) {
  BertDataSet d;
  d.dir = dir;
  const char* layout =
      "expected <data-dir>/train/*.bertpak and <data-dir>/eval/*.bertpak, each made by "
      "prepare_bert_data --output <data-dir>/train (or eval)";
  bool first = true;
  std::string firstShard;
  for (const char* split : {"train", "eval"}) {
    std::error_code ec;
    if (!fs::is_directory(dir / split, ec))
      throw std::invalid_argument(fmt::format("--data-dir {}: no {} folder ({}); {}", dir.string(),
                                              split, (dir / split).string(), layout));
    std::vector<std::string> files = shardFiles(dir / split);
    if (files.empty())
      throw std::invalid_argument(fmt::format("--data-dir {}: {} holds no .bertpak shard; {}",
                                              dir.string(), (dir / split).string(), layout));
    for (const std::string& f : files) {
      bert::ShardHeader h;
      try {
        h = bert::readShardHeader(f);
      } catch (const datasets::DatasetError& e) {
        throw std::invalid_argument(fmt::format("--data-dir {}: {}", dir.string(), e.what()));
      }
      if (first) {
        d.layout = h.layout;
        d.vocab = h.vocabSize;
        firstShard = f;
        first = false;
      } else if (h.layout.maxSeqLength != d.layout.maxSeqLength ||
                 h.layout.maskedSlots != d.layout.maskedSlots ||
                 h.layout.maxPerPack != d.layout.maxPerPack || h.vocabSize != d.vocab) {
        throw std::invalid_argument(fmt::format(
            "--data-dir {}: shard {} was made for sequence length {}, {} masked slots, {} per "
            "pack, vocabulary {}, but {} for {}, {}, {}, {}: every shard of a run must share "
            "one layout and vocabulary",
            dir.string(), f, h.layout.maxSeqLength, h.layout.maskedSlots, h.layout.maxPerPack,
            h.vocabSize, firstShard, d.layout.maxSeqLength, d.layout.maskedSlots,
            d.layout.maxPerPack, d.vocab));
      }
      (split == std::string("train") ? d.train_records : d.eval_records) +=
          static_cast<std::int64_t>(h.recordCount);
      (split == std::string("train") ? d.train : d.eval).push_back(f);
    }
  }
  return d;
}

void checkBertDataFitsModel(const BertDataSet& d, const ModelRequest::Text& m) {
  const std::string& shard = d.train.front();
  const auto refuse = [&](const char* field, std::int64_t data, std::int64_t model,
                          const char* why) {
    throw std::invalid_argument(
        fmt::format("--data-dir {}: shard {} was made for {} {}, the model's is {} ({}); {}",
                    d.dir.string(), shard, field, data, model, why, kRemake));
  };
  if (d.layout.maxSeqLength > m.sequence_length)
    refuse("sequence length", d.layout.maxSeqLength, m.sequence_length,
           "its sequences are longer than the model allows");
  if (d.layout.maxSeqLength != m.sequence_length)
    refuse("sequence length", d.layout.maxSeqLength, m.sequence_length,
           "max_sequence_length must equal the shards'");
  if (static_cast<std::int64_t>(d.vocab) != m.vocab)
    refuse("vocabulary size", d.vocab, m.vocab,
           "token ids of another vocabulary would index the wrong embeddings; an open mini run "
           "may build its model for the data's with mini_bert_vocab");
  if (d.layout.maskedSlots != m.masked_slots)
    refuse("masked-LM slots per pack", d.layout.maskedSlots, m.masked_slots,
           "the masked-LM head is built for a fixed number of slots");
  if (d.layout.maxPerPack != m.max_per_pack)
    refuse("sequences per pack", d.layout.maxPerPack, m.max_per_pack,
           "the NSP head is built for a fixed number of [CLS] slots");
}

models::BertConfig bertMiniConfig(int vocab, int sequence) {
  models::BertConfig c;
  c.layers = 24;  // every one of the reference's 398 tensors, as the 1.1.0 checker wants
  c.hidden = 32;
  c.heads = 2;
  c.ffn = 128;
  c.vocab = vocab;
  c.maxPositions = sequence;
  return c;
}

models::BertConfig bertMiniConfig(const ModelRequest::Text& t) {
  models::BertConfig c = bertMiniConfig(t.vocab, t.sequence_length);
  if (t.layers > 0) c.layers = t.layers;
  if (t.hidden > 0) c.hidden = t.hidden;
  if (t.heads > 0) c.heads = t.heads;
  if (t.ffn > 0) c.ffn = t.ffn;
  if (c.hidden % c.heads != 0)
    throw std::invalid_argument(fmt::format(
        "mini_bert_hidden {} is not a multiple of mini_bert_heads {}: each head takes hidden / "
        "heads features (e.g. 128 with 2 heads)",
        c.hidden, c.heads));
  return c;
}

ModelInstance buildBert(const ModelRequest& r) {
  const ModelRequest::Text& t = r.text;
  const models::BertConfig config =
      r.scale == Scale::kFull ? models::BertConfig::large() : bertMiniConfig(t);
  const models::BertShape shape{r.micro_batch, t.sequence_length, t.masked_slots, t.max_per_pack};
  OptimizerOptions opt = r.optimizer;
  opt.decay = models::bertLambOptions().decay;  // no decay, trust ratio 1: LayerNorm and biases
  auto train = std::make_shared<models::BertGraph>(
      models::buildBertTraining(config, shape, opt, r.precision));
  const models::BertGraph eval = models::buildBertForward(config, shape);
  ModelInstance m;
  m.train = models::taskGraph(*train, r.precision.lossScaling);
  m.eval = models::taskGraph(eval);
  m.weight_tensor_names = train->paramNames();
  m.init = [train](std::uint64_t seed) { return models::initBertWeights(*train, seed); };
  m.variant = "bert_large";
  m.description = fmt::format(
      "BERT{} ({} layers x {}, {} heads, FFN {}, vocabulary {}, {} parameters; sequence {}, "
      "{} masked slots, {} sequences per pack), models/bert_large",
      r.scale == Scale::kFull ? "-Large" : " mini", config.layers, config.hidden, config.heads,
      config.ffn, config.vocab, train->parameterCount(), t.sequence_length, t.masked_slots,
      t.max_per_pack);
  return m;
}

void MaskedLmAccuracy::accumulate(const MicroBatch& inputs, const MicroBatch& outputs,
                                  const std::vector<bool>& scored) {
  const std::span<const float> w = inputs.get<const float>("masked_lm_weights");
  const std::span<const float> c = outputs.get<const float>("mlm_correct");
  const std::int64_t rows = inputs["input_ids"].rows();
  if (c.size() != w.size() || w.size() % static_cast<size_t>(rows) != 0)
    throw std::logic_error(fmt::format("masked-LM accuracy: {} weights, {} predictions, {} rows",
                                       w.size(), c.size(), rows));
  const size_t slots = w.size() / static_cast<size_t>(rows);
  for (size_t k = 0; k < w.size(); ++k) {
    if (!scored[k / slots]) continue;
    value_.numerator += static_cast<double>(w[k]) * c[k];
    value_.denominator += w[k];
  }
}

std::unique_ptr<BatchSource> bertEpochSource(const BertDataSet& data, const BatchGeometry& g,
                                             std::uint64_t seed, int epoch, std::int64_t samples,
                                             std::int64_t vocab, bool perSequence) {
  return std::make_unique<BertEpochSource>(data, g, seed, epoch, samples, vocab, perSequence);
}

std::unique_ptr<TaskData> makeBertData(const DataRequest& request) {
  return std::make_unique<BertTaskData>(request);
}

}  // namespace ipu::harness

namespace ipu::harness {

BertDataPlan planBertData(const std::string& dataDir, Scale scale, const Json& hp,
                          std::int64_t trainSamplesCap, std::int64_t evalSamplesCap,
                          int miniVocab) {
  BertDataPlan p;
  constexpr int kMaxPerPack = 3;  // Graphcore's max_sequences_per_pack
  constexpr double kMaskedLmProb = 0.15;
  const int seq = hp.value(keys::kMaxSequenceLength, 512);
  if (seq < 8)
    throw std::invalid_argument(fmt::format("max_sequence_length {}: must be >= 8", seq));
  // Before any data is built for it: the reference's position table has 512 rows.
  const int positions = models::BertConfig::large().maxPositions;
  if (seq > positions)
    throw std::invalid_argument(fmt::format(
        "max_sequence_length {}: longer than the model allows (BERT's position embeddings hold "
        "{} positions, max_position_embeddings of the reference's bert_config.json); use a "
        "length <= {}",
        seq, positions, positions));
  p.text.sequence_length = seq;
  p.text.max_per_pack = kMaxPerPack;
  // What prepare_bert_data's packing gives this length (78 at 512, as Graphcore's; 20 at 128).
  p.text.masked_slots = bert::PackedLayout::slotsFor(seq, kMaskedLmProb, kMaxPerPack,
                                                     static_cast<int>(kMaskedLmProb * seq));
  p.text.vocab = scale == Scale::kFull ? models::BertConfig::large().vocab
                 : miniVocab > 0       ? miniVocab
                                       : kBertMiniVocab;
  if (!dataDir.empty()) {
    p.dir = dataDir;
  } else if (scale == Scale::kMini) {
    bert::MiniDataOptions o;
    o.vocabSize = kBertMiniVocab;
    o.maxSeqLength = seq;
    o.maxPerPack = kMaxPerPack;
    p.dir = bert::ensureMiniData(bert::defaultBertCacheRoot(), o);
    p.built_default = true;
  } else {
    throw std::invalid_argument(
        "--scale full needs --data-dir: train/ and eval/ folders of shards made by "
        "prepare_bert_data at sequence length 512 with the 30,522-token vocabulary");
  }
  const BertDataSet d = scanBertData(p.dir);
  checkBertDataFitsModel(d, p.text);
  p.train_samples =
      trainSamplesCap > 0 ? std::min(trainSamplesCap, d.train_records) : d.train_records;
  p.eval_samples = evalSamplesCap > 0 ? std::min(evalSamplesCap, d.eval_records) : d.eval_records;
  return p;
}

}  // namespace ipu::harness
