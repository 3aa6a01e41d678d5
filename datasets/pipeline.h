// Multi-threaded prefetching batch pipeline over a Source, one epoch per Pipeline object.
//
// Determinism: the epoch's order is a Fisher-Yates shuffle seeded from (seed, epoch) and each
// sample's augmentation RNG is seeded from (seed, epoch, sample index), so batches are bitwise
// identical whatever the thread count. Workers claim batches in order and a reorder buffer hands
// them out in order.
//
// Memory: at most prefetchBatches batches exist at once, counting those being filled, those
// waiting and those the consumer still holds (a BatchPtr returns its buffer when destroyed).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "datasets/error.h"
#include "datasets/source.h"

namespace datasets {

enum class LastBatch {
  kDrop,  // an incomplete last batch is dropped (training)
  kPad,   // it is delivered with validCount < batchSize; pad slots are zeros with label -1 (eval)
};

struct PipelineOptions {
  int batchSize = 32;
  int numThreads = 2;
  int prefetchBatches = 4;  // bound on live batches, >= 1
  bool shuffle = true;
  uint64_t seed = 0;
  LastBatch lastBatch = LastBatch::kDrop;
  // kSkip: a corrupt sample is reported (corruptFiles()) and its slot is filled with the next
  // sample of the epoch's order that loads (deterministic, so batches stay full), or left empty
  // (replaceCorrupt false).
  // kFail: the consumer's next() throws, naming the file.
  CorruptPolicy corruptPolicy = CorruptPolicy::kFail;
  int maxReplacementAttempts = 64;
  // kSkip without replacement (evaluation): a corrupt sample's slot stays empty (zeros, label
  // -1, sampleIndices -1, counted in Batch::skipped), so no sample is delivered twice nor in
  // another's place; the consumer scores only slots with a label >= 0.
  bool replaceCorrupt = true;
  // Names the pass in error messages, e.g. "evaluation after epoch 3"; empty: "epoch <epoch>".
  std::string context;
  // Data parallelism over processes: each batch holds only slots [sliceBegin, sliceBegin +
  // sliceSize) of the batch of batchSize that the epoch order defines, so that N processes with
  // disjoint slices see together exactly what one process would, each decoding only its part.
  // sliceSize 0: the whole batch.
  int sliceBegin = 0;
  int sliceSize = 0;

  // Training / evaluation defaults (evaluation: in order, padded, corrupt samples not replaced).
  static PipelineOptions train(int batchSize, uint64_t seed, int threads = 2);
  static PipelineOptions eval(int batchSize, int threads = 2);
};

struct Batch {
  int64_t index = 0;   // batch number within the epoch
  int batchSize = 0;   // slots (options.batchSize, or its sliceSize)
  int validCount = 0;  // real samples; < batchSize only for a padded last batch
  int skipped = 0;     // of the validCount slots, those left empty (corrupt, replaceCorrupt off)
  SampleShape shape;
  std::vector<float> images;           // batchSize * shape.elems(), NHWC float32
  std::vector<int32_t> labels;         // batchSize
  std::vector<int64_t> sampleIndices;  // source index per slot (-1 for padding or skipped)

  std::span<const float> image(int slot) const {
    return std::span<const float>(images).subspan(slot * shape.elems(), shape.elems());
  }
};

namespace detail {
struct PipelineState;
struct BatchReturner {
  std::shared_ptr<PipelineState> state;
  void operator()(Batch* b) const;
};
}  // namespace detail

// Owning handle of a delivered batch; destroying it frees a slot for the workers.
using BatchPtr = std::unique_ptr<Batch, detail::BatchReturner>;

class Pipeline {
 public:
  Pipeline(std::shared_ptr<const Source> source, const PipelineOptions& options, uint64_t epoch);
  ~Pipeline();  // stops and joins the workers; never blocks on undelivered batches
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  int64_t numBatches() const { return numBatches_; }
  // The next batch in order, or nullptr after the last. Rethrows a worker's error as a
  // DatasetError naming the sample. Throws std::logic_error if the consumer already holds
  // prefetchBatches batches (it would wait forever).
  BatchPtr next();

  // Order of source indices for this epoch (size() or numBatches*batchSize entries used).
  const std::vector<int64_t>& order() const;
  // Instrumentation: batches alive now / the most ever alive at once.
  int liveBatches() const;
  int peakLiveBatches() const;
  // Files found corrupt so far (kSkip), sorted, and their number.
  std::vector<std::string> corruptFiles() const;
  size_t corruptCount() const;

  // The deterministic epoch order (exposed for tests and for resuming).
  static std::vector<int64_t> epochOrder(int64_t size, uint64_t seed, uint64_t epoch, bool shuffle);

 private:
  std::shared_ptr<detail::PipelineState> state_;
  std::vector<std::thread> workers_;
  int64_t numBatches_ = 0;
};

}  // namespace datasets
