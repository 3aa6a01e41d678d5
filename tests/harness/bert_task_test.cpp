// The BERT task's pieces without a model run: the training source's per-process slices of each
// global batch, the masked-LM accuracy (per token and per sequence), the data checks.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>

#include "datasets/bert/shards.h"
#include "harness/bert_task.h"

namespace ipu::harness {
namespace {

namespace fs = std::filesystem;
namespace bert = datasets::bert;

constexpr int kSeq = 16, kSlots = 4, kPerPack = 2, kVocab = 1000;
const bert::PackedLayout kLayout{kSeq, kSlots, kPerPack};

// Record k: one sequence of 8 tokens whose second token is 10 + k (read back to identify it).
bert::PackedRecord record(int k) {
  bert::PackedRecord r(kLayout);
  for (int t = 0; t < 8; ++t) {
    r.inputIds[t] = t == 1 ? 10 + k : 5;
    r.inputMask[t] = 1;
    r.positions[t] = static_cast<uint16_t>(t);
  }
  r.maskedPositions[0] = 2;
  r.maskedIds[0] = 7;
  r.maskedWeights[0] = 1;
  r.nspWeights[0] = 1;
  return r;
}

// Host buffers shaped as the BERT graph's inputs for `rows` packs.
struct Buffers {
  std::map<std::string, std::vector<std::byte>> bytes;
  MicroBatch batch;
  explicit Buffers(std::int64_t rows) {
    const std::vector<std::tuple<std::string, DType, Shape>> inputs = {
        {"input_ids", DType::I32, {rows, kSeq}},
        {"segment_ids", DType::I32, {rows, kSeq}},
        {"position_ids", DType::I32, {rows, kSeq}},
        {"sequence_index", DType::F32, {rows, kSeq}},
        {"masked_lm_rows", DType::I32, {rows * kSlots}},
        {"masked_lm_ids", DType::I32, {rows * kSlots}},
        {"masked_lm_weights", DType::F32, {rows * kSlots}},
        {"masked_lm_label_index", DType::I32, {rows * kSlots}},
        {"cls_rows", DType::I32, {rows * kPerPack}},
        {"next_sentence_labels", DType::I32, {rows * kPerPack}},
        {"next_sentence_weights", DType::F32, {rows * kPerPack}}};
    std::vector<HostSlot> slots;
    for (const auto& [name, dtype, shape] : inputs) {
      auto& b = bytes[name];
      b.resize(static_cast<size_t>(numElements(shape)) * 4);
      slots.push_back({name, dtype, shape, std::span<std::byte>(b)});
    }
    batch = MicroBatch(std::move(slots));
  }
  // The record numbers of the rows filled.
  std::vector<int> records() const {
    std::vector<int> out;
    const auto ids = batch.get<std::int32_t>("input_ids");
    for (size_t r = 0; r < ids.size() / kSeq; ++r) out.push_back(ids[r * kSeq + 1] - 10);
    return out;
  }
};

class BertTaskTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("bert_task_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
            "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    for (const char* split : {"train", "eval"}) {
      fs::create_directories(dir_ / split);
      bert::ShardWriter w((dir_ / split / "part-00000.bertpak").string(), kLayout, kVocab);
      for (int k = 0; k < 64; ++k) w.write(record(k));
      w.close();
    }
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

// Replica r's slot a holds samples [r A b + a b, +b) of the global batch, whichever process
// reads it: two processes of two replicas each see exactly the one-process batch.
TEST_F(BertTaskTest, EachProcessReadsItsReplicasSliceOfTheSameGlobalBatch) {
  const BertDataSet data = scanBertData(dir_);
  EXPECT_EQ(data.train_records, 64);
  BatchGeometry one{2, 2, 4, 0, 4};  // micro-batch 2, accumulation 2, 4 replicas here
  auto whole = bertEpochSource(data, one, 7, 1, 0, kVocab, false);
  std::vector<std::unique_ptr<BatchSource>> parts;
  for (int p = 0; p < 2; ++p)
    parts.push_back(
        bertEpochSource(data, BatchGeometry{2, 2, 4, 2 * p, 2}, 7, 1, 0, kVocab, false));
  Buffers a(2), b(2);
  std::set<int> seen;
  for (int step = 0; step < 4; ++step) {  // 64 records / global batch 16
    ASSERT_TRUE(whole->beginStep(step));
    for (auto& p : parts) ASSERT_TRUE(p->beginStep(step));
    for (int r = 0; r < 4; ++r)
      for (int slot = 0; slot < 2; ++slot) {
        whole->fill(r, slot, a.batch);
        parts[static_cast<size_t>(r / 2)]->fill(r, slot, b.batch);
        EXPECT_EQ(a.records(), b.records()) << "step " << step << " replica " << r;
        for (int k : a.records()) EXPECT_TRUE(seen.insert(k).second) << "record " << k << " twice";
      }
  }
  EXPECT_EQ(seen.size(), 64u);  // every record once per epoch
  EXPECT_FALSE(whole->beginStep(4));
}

TEST_F(BertTaskTest, MaskedLmAccuracyPerTokenAndPerSequence) {
  // One row, two sequences: the first with 3 masked tokens (2 right), the second with 1 (right).
  Buffers in(1);
  auto w = in.batch.get<float>("masked_lm_weights");
  std::vector<std::byte> correctBytes(kSlots * 4);
  const MicroBatch out({{"mlm_correct", DType::F32, {kSlots}, std::span<std::byte>(correctBytes)}});
  auto c = out.get<float>("mlm_correct");
  const float c0[kSlots] = {1, 0, 1, 1};
  std::copy(c0, c0 + kSlots, c.begin());
  const float perToken[kSlots] = {1, 1, 1, 1};
  std::copy(perToken, perToken + kSlots, w.begin());
  MaskedLmAccuracy token(false);
  token.accumulate(in.batch, out, {true});
  EXPECT_DOUBLE_EQ(token.result().value(), 0.75);
  const float perSeq[kSlots] = {1.f / 3, 1.f / 3, 1.f / 3, 1};  // 1 / masked tokens of its sequence
  std::copy(perSeq, perSeq + kSlots, w.begin());
  MaskedLmAccuracy seq(true);
  seq.accumulate(in.batch, out, {true});
  EXPECT_NEAR(seq.result().value(), (2.0 / 3 + 1.0) / 2, 1e-6);  // the mean of the sequences'
  seq.accumulate(in.batch, out, {false});                        // a padding row does not count
  EXPECT_NEAR(seq.result().value(), (2.0 / 3 + 1.0) / 2, 1e-6);
}

TEST_F(BertTaskTest, DataForAnotherModelIsRefusedNamingTheShardAndField) {
  const BertDataSet data = scanBertData(dir_);
  const ModelRequest::Text fits{kSeq, kSlots, kPerPack, kVocab};
  EXPECT_NO_THROW(checkBertDataFitsModel(data, fits));
  const auto message = [&](ModelRequest::Text m) {
    try {
      checkBertDataFitsModel(data, m);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  ModelRequest::Text m = fits;
  m.vocab = 30522;
  std::string e = message(m);
  EXPECT_NE(e.find("vocabulary size 1000, the model's is 30522"), std::string::npos) << e;
  EXPECT_NE(e.find("part-00000.bertpak"), std::string::npos) << e;
  EXPECT_NE(e.find("prepare_bert_data"), std::string::npos) << e;  // the hint
  m = fits;
  m.sequence_length = 8;  // the shards' sequences are longer than the model allows
  e = message(m);
  EXPECT_NE(e.find("sequence length 16, the model's is 8"), std::string::npos) << e;
  EXPECT_NE(e.find("longer than the model allows"), std::string::npos) << e;
  m = fits;
  m.sequence_length = 32;
  EXPECT_NE(message(m).find("sequence length 16, the model's is 32"), std::string::npos);
  m = fits;
  m.masked_slots = 5;
  EXPECT_NE(message(m).find("masked-LM slots"), std::string::npos);
  // A folder without eval/ is named.
  fs::remove_all(dir_ / "eval");
  try {
    (void)scanBertData(dir_);
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& x) {
    EXPECT_NE(std::string(x.what()).find("no eval folder"), std::string::npos) << x.what();
  }
}

}  // namespace
}  // namespace ipu::harness
