// Writes the records a one-replica BERT mini run trains on, in the order it trains on them, and
// its evaluation records, so that a reference outside the project (the PyTorch one of
// benchmarks/models/bert_convergence_parity.sh) reads the same data in the same order.
//
// The order is datasets::bert::ShardReader's, as harness/bert_task.cpp drives it on one process:
// epoch 1, 2, ... each a seeded shuffle of every training record cut into whole global batches.
// The evaluation records are those of <data>/eval/*.bertpak in file order (the first
// --eval-records of them), as run_benchmark evaluates them.
//
//   bert_training_stream [--data-dir DIR] --seed S --global-batch B --records N --output OUT
//
// OUT/train.i32 and OUT/eval.i32 hold one row per record, every field widened to int32, in
// PackedRecord order (input_ids, sequence index, segment_ids, positions [S]; masked positions,
// masked ids, masked sequence [P]; [CLS] positions, NSP labels, NSP weights [K]);
// OUT/layout.json gives S, P, K and the row counts. Without --data-dir: run_benchmark's default
// mini data (WordNet's glosses, built into the cache on first use).
//
// --init-weights also writes the mini model's initial weights for the seed, exactly those
// run_benchmark starts from (harness/bert_task.h bertMiniConfig with --layers / --hidden /
// --heads / --ffn as the mini_bert_* keys, the data's vocabulary; models::initBertWeights):
// OUT/init_weights.f32, every parameter in canonical (TF checkpoint) order and layout, and
// their names and shapes under "weights" in layout.json. A reference that loads them starts
// from the same point, so the two curves agree value by value early on.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>

#include "datasets/bert/mini_data.h"
#include "datasets/bert/shards.h"
#include "harness/bert_task.h"
#include "models/bert_large/bert.h"

namespace fs = std::filesystem;
namespace bert = datasets::bert;

namespace {

std::vector<std::string> shardsIn(const fs::path& dir) {
  std::vector<std::string> out;
  if (!fs::is_directory(dir))
    throw std::invalid_argument(fmt::format("{}: no such folder of .bertpak shards", dir.string()));
  for (const auto& f : fs::directory_iterator(dir))
    if (f.path().extension() == ".bertpak") out.push_back(f.path().string());
  std::sort(out.begin(), out.end());
  if (out.empty()) throw std::invalid_argument(fmt::format("{} holds no .bertpak", dir.string()));
  return out;
}

void append(const bert::PackedRecord& r, std::vector<std::int32_t>& out) {
  auto put = [&](const auto& v) { out.insert(out.end(), v.begin(), v.end()); };
  put(r.inputIds);
  put(r.inputMask);
  put(r.segmentIds);
  put(r.positions);
  put(r.maskedPositions);
  put(r.maskedIds);
  put(r.maskedWeights);
  put(r.clsPositions);
  put(r.nspLabels);
  put(r.nspWeights);
}

void writeRows(const fs::path& path, const std::vector<std::int32_t>& v) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(v.data()),
          static_cast<std::streamsize>(v.size() * sizeof(std::int32_t)));
  if (!f) throw std::runtime_error("cannot write " + path.string());
}

// The model run_benchmark builds for this data (its bertMiniConfig) and its initial weights.
std::string writeInitialWeights(const fs::path& out, const ipu::harness::ModelRequest::Text& text,
                                std::uint64_t seed) {
  const ipu::models::BertConfig c = ipu::harness::bertMiniConfig(text);
  const ipu::models::BertGraph g = ipu::models::buildBertForward(
      c, {1, text.sequence_length, text.masked_slots, text.max_per_pack});
  const auto values = ipu::models::initBertWeights(g, seed);
  std::vector<float> flat;
  std::string names;
  for (int p : g.params) {
    const ipu::Tensor& t = g.graph.tensor(p);
    const std::vector<float>& v = values.at(t.name);
    flat.insert(flat.end(), v.begin(), v.end());
    names += fmt::format("{}[\"{}\", [{}]]", names.empty() ? "" : ", ", t.name,
                         fmt::join(t.shape, ", "));
  }
  std::ofstream f(out / "init_weights.f32", std::ios::binary);
  f.write(reinterpret_cast<const char*>(flat.data()),
          static_cast<std::streamsize>(flat.size() * sizeof(float)));
  if (!f) throw std::runtime_error("cannot write " + (out / "init_weights.f32").string());
  return fmt::format(
      ", \"model\": {{\"layers\": {}, \"hidden\": {}, \"heads\": {}, "
      "\"ffn\": {}, \"vocab\": {}}}, \"weights\": [{}]",
      c.layers, c.hidden, c.heads, c.ffn, c.vocab, names);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Writes a BERT mini run's training stream and evaluation records as int32 rows"};
  std::string dataDir, output;
  std::uint64_t seed = 1;
  int globalBatch = 8, vocabSize = 512;
  std::int64_t records = 0, evalRecords = 0;
  app.add_option("--data-dir", dataDir, "train/ and eval/ shards (default: the mini default)");
  app.add_option("--vocab-size", vocabSize, "the default data's vocabulary (run_benchmark's)");
  app.add_option("--seed", seed, "run_benchmark's --seed (the data order)")->required();
  app.add_option("--global-batch", globalBatch, "records per step")->required();
  app.add_option("--records", records, "training records to write (crossing epochs)")->required();
  app.add_option("--eval-records", evalRecords, "evaluation records (0: all)");
  app.add_option("--output", output, "output folder")->required();
  bool initWeights = false;
  ipu::harness::ModelRequest::Text text;
  app.add_flag("--init-weights", initWeights,
               "also write run_benchmark's initial weights of the mini model for --seed");
  app.add_option("--layers", text.layers, "mini_bert_layers (0: the closed mini model's)");
  app.add_option("--hidden", text.hidden, "mini_bert_hidden (0: the closed mini model's)");
  app.add_option("--heads", text.heads, "mini_bert_heads (0: the closed mini model's)");
  app.add_option("--ffn", text.ffn, "mini_bert_ffn (0: the closed mini model's)");
  CLI11_PARSE(app, argc, argv);
  try {
    fs::path dir = dataDir;
    if (dir.empty()) {
      bert::MiniDataOptions o;
      o.vocabSize = vocabSize;
      dir = bert::ensureMiniData(bert::defaultBertCacheRoot(), o);
    }
    fs::create_directories(output);
    bert::ReaderConfig c;
    c.seed = seed;
    c.localBatch = globalBatch;
    bert::ShardReader reader(shardsIn(dir / "train"), c);
    const bert::PackedLayout layout = reader.layout();
    std::vector<std::int32_t> rows;
    bert::PackedRecord r(layout);
    std::int64_t written = 0;
    for (int epoch = 1; written < records; ++epoch) {
      reader.startEpoch(static_cast<std::uint64_t>(epoch));
      if (reader.recordsPerEpoch() == 0) throw std::invalid_argument("fewer records than a batch");
      while (written < records && reader.next(r)) {
        append(r, rows);
        ++written;
      }
    }
    writeRows(fs::path(output) / "train.i32", rows);
    rows.clear();
    std::int64_t evalWritten = 0;
    for (const std::string& path : shardsIn(dir / "eval")) {
      std::ifstream f(path, std::ios::binary);
      const std::vector<std::uint8_t> bytes{std::istreambuf_iterator<char>(f),
                                            std::istreambuf_iterator<char>()};
      for (const bert::PackedRecord& e : bert::parseShard(bytes, path))
        if (evalRecords == 0 || evalWritten < evalRecords) {
          append(e, rows);
          ++evalWritten;
        }
    }
    writeRows(fs::path(output) / "eval.i32", rows);
    std::string weights;
    if (initWeights) {
      text.sequence_length = layout.maxSeqLength;
      text.masked_slots = layout.maskedSlots;
      text.max_per_pack = layout.maxPerPack;
      text.vocab =
          static_cast<int>(bert::readShardHeader(shardsIn(dir / "train").front()).vocabSize);
      weights = writeInitialWeights(output, text, seed);
    }
    std::ofstream(fs::path(output) / "layout.json") << fmt::format(
        "{{\"seq_length\": {}, \"masked_slots\": {}, \"max_per_pack\": {}, \"train\": {}, "
        "\"eval\": {}, \"data_dir\": \"{}\"{}}}\n",
        layout.maxSeqLength, layout.maskedSlots, layout.maxPerPack, written, evalWritten,
        dir.string(), weights);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bert_training_stream: %s\n", e.what());
    return 1;
  }
  return 0;
}
