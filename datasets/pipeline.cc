#include "datasets/pipeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <opencv2/core/utility.hpp>

namespace datasets {

PipelineOptions PipelineOptions::train(int batchSize, uint64_t seed, int threads) {
  PipelineOptions o;
  o.batchSize = batchSize;
  o.seed = seed;
  o.numThreads = threads;
  o.shuffle = true;
  o.lastBatch = LastBatch::kDrop;
  return o;
}

PipelineOptions PipelineOptions::eval(int batchSize, int threads) {
  PipelineOptions o;
  o.batchSize = batchSize;
  o.numThreads = threads;
  o.shuffle = false;
  o.lastBatch = LastBatch::kPad;
  o.replaceCorrupt = false;
  return o;
}

namespace detail {

struct PipelineState {
  std::shared_ptr<const Source> source;
  PipelineOptions opt;
  uint64_t epoch = 0;
  SampleShape shape;
  std::vector<int64_t> order;
  int64_t numBatches = 0;
  int64_t samplesUsed = 0;

  mutable std::mutex mu;
  std::condition_variable workCv;   // a slot was freed / stop
  std::condition_variable readyCv;  // a batch was finished
  std::atomic<bool> stop{false};
  int64_t nextClaim = 0;
  int64_t nextDeliver = 0;
  int live = 0;
  int peak = 0;
  int held = 0;
  std::vector<std::unique_ptr<Batch>> pool;  // reusable buffers
  struct Done {
    std::unique_ptr<Batch> batch;
    std::exception_ptr error;
  };
  std::map<int64_t, Done> ready;  // reorder buffer
  std::exception_ptr failed;
  std::set<std::string> corruptFiles;
  std::set<int64_t> corruptIndices;

  void release(std::unique_ptr<Batch> b) {  // caller holds mu
    --live;
    pool.push_back(std::move(b));
    workCv.notify_one();
  }
  void workerLoop();
  void fill(Batch& b, int64_t batchIndex);
  int64_t loadSlot(int64_t pos, float* out, int32_t* label);
};

void BatchReturner::operator()(Batch* b) const {
  std::unique_ptr<Batch> owned(b);
  if (!state) return;
  std::lock_guard lk(state->mu);
  --state->held;
  state->release(std::move(owned));
}

int64_t PipelineState::loadSlot(int64_t pos, float* out, int32_t* label) {
  const int64_t n = static_cast<int64_t>(order.size());
  const bool replace = opt.corruptPolicy == CorruptPolicy::kSkip && opt.replaceCorrupt;
  const int attempts = replace ? opt.maxReplacementAttempts : 1;
  for (int a = 0; a < attempts; ++a) {
    const int64_t idx = order[(pos + a) % n];
    if (a > 0) {
      std::lock_guard lk(mu);
      if (corruptIndices.count(idx)) continue;
    }
    Rng rng(hashSeed({opt.seed, epoch, static_cast<uint64_t>(idx), static_cast<uint64_t>(a)}));
    try {
      source->load(idx, rng, out, label);
      return idx;
    } catch (const CorruptSampleError& e) {
      if (opt.corruptPolicy == CorruptPolicy::kFail) throw;
      std::lock_guard lk(mu);
      corruptFiles.insert(e.path().empty() ? source->describe(idx) : e.path());
      corruptIndices.insert(idx);
      if (!replace) return -1;  // the slot stays empty
    }
  }
  throw DatasetError(
      fmt::format("{} corrupt samples in a row from position {} of the epoch "
                  "order (last: {}); the data set looks broken",
                  attempts, pos, source->describe(order[(pos + attempts - 1) % n])));
}

void PipelineState::fill(Batch& b, int64_t batchIndex) {
  const int bs = opt.sliceSize > 0 ? opt.sliceSize : opt.batchSize;
  const size_t elems = shape.elems();
  b.index = batchIndex;
  b.batchSize = bs;
  b.shape = shape;
  b.images.resize(elems * bs);
  b.labels.resize(bs);
  b.sampleIndices.resize(bs);
  const int64_t start = batchIndex * opt.batchSize + opt.sliceBegin;
  b.validCount =
      static_cast<int>(std::clamp<int64_t>(samplesUsed - start, 0, static_cast<int64_t>(bs)));
  b.skipped = 0;
  const std::string where = opt.context.empty()
                                ? fmt::format("batch {} of epoch {}", batchIndex, epoch)
                                : fmt::format("{}, batch {}", opt.context, batchIndex);
  for (int s = 0; s < b.validCount; ++s) {
    if (stop.load(std::memory_order_relaxed)) return;
    const int64_t pos = start + s;
    float* img = b.images.data() + elems * s;
    try {
      b.sampleIndices[s] = loadSlot(pos, img, &b.labels[s]);
    } catch (const DatasetError& e) {
      throw DatasetError(fmt::format("{}: {}", where, e.what()), e.path());
    } catch (const std::exception& e) {
      const std::string name = source->describe(order[pos]);
      throw DatasetError(fmt::format("{}: {}: {}", where, name, e.what()), name);
    }
    if (b.sampleIndices[s] < 0) {
      std::memset(img, 0, elems * sizeof(float));
      b.labels[s] = -1;
      ++b.skipped;
    }
  }
  for (int s = b.validCount; s < bs; ++s) {
    std::memset(b.images.data() + elems * s, 0, elems * sizeof(float));
    b.labels[s] = -1;
    b.sampleIndices[s] = -1;
  }
}

void PipelineState::workerLoop() {
  for (;;) {
    std::unique_lock lk(mu);
    workCv.wait(lk, [&] { return stop || nextClaim >= numBatches || live < opt.prefetchBatches; });
    if (stop || nextClaim >= numBatches) return;
    const int64_t b = nextClaim++;
    ++live;
    peak = std::max(peak, live);
    std::unique_ptr<Batch> batch;
    if (!pool.empty()) {
      batch = std::move(pool.back());
      pool.pop_back();
    } else {
      batch = std::make_unique<Batch>();
    }
    lk.unlock();
    std::exception_ptr err;
    try {
      fill(*batch, b);
    } catch (...) {
      err = std::current_exception();
    }
    lk.lock();
    ready[b] = Done{std::move(batch), err};
    readyCv.notify_all();
  }
}

}  // namespace detail

std::vector<int64_t> Pipeline::epochOrder(int64_t size, uint64_t seed, uint64_t epoch,
                                          bool shuffle) {
  std::vector<int64_t> order(size);
  for (int64_t i = 0; i < size; ++i) order[i] = i;
  if (shuffle) {
    Rng rng(hashSeed({seed, epoch, 0x5B0FF1E}));
    for (int64_t i = size - 1; i > 0; --i) std::swap(order[i], order[rng.uniformInt(0, i)]);
  }
  return order;
}

Pipeline::Pipeline(std::shared_ptr<const Source> source, const PipelineOptions& options,
                   uint64_t epoch)
    : state_(std::make_shared<detail::PipelineState>()) {
  if (!source) throw DatasetError("pipeline: null source");
  if (options.sliceBegin < 0 || options.sliceSize < 0 ||
      options.sliceBegin + options.sliceSize > options.batchSize ||
      (options.sliceSize == 0 && options.sliceBegin != 0)) {
    throw DatasetError(fmt::format(
        "pipeline: slice [{}, {} + {}) is not inside a batch of {} (sliceSize 0: the whole batch, "
        "from 0)",
        options.sliceBegin, options.sliceBegin, options.sliceSize, options.batchSize));
  }
  if (options.batchSize <= 0 || options.numThreads <= 0 || options.prefetchBatches <= 0 ||
      options.maxReplacementAttempts <= 0) {
    throw DatasetError(fmt::format(
        "pipeline: batchSize, numThreads, prefetchBatches and maxReplacementAttempts must be > 0 "
        "(got {}, {}, {}, {})",
        options.batchSize, options.numThreads, options.prefetchBatches,
        options.maxReplacementAttempts));
  }
  // One compute threading runtime (OpenMP, via oneDNN): OpenCV must not start its own pool
  // inside our workers.
  cv::setNumThreads(0);
  auto& s = *state_;
  s.source = std::move(source);
  s.opt = options;
  s.epoch = epoch;
  s.shape = s.source->shape();
  const int64_t n = s.source->size();
  s.order = epochOrder(n, options.seed, epoch, options.shuffle);
  if (options.lastBatch == LastBatch::kDrop) {
    s.numBatches = n / options.batchSize;
    s.samplesUsed = s.numBatches * options.batchSize;
  } else {
    s.numBatches = (n + options.batchSize - 1) / options.batchSize;
    s.samplesUsed = n;
  }
  numBatches_ = s.numBatches;
  const int threads =
      static_cast<int>(std::min<int64_t>(options.numThreads, std::max<int64_t>(1, s.numBatches)));
  workers_.reserve(threads);
  for (int i = 0; i < threads; ++i) workers_.emplace_back([st = state_] { st->workerLoop(); });
}

Pipeline::~Pipeline() {
  {
    std::lock_guard lk(state_->mu);
    state_->stop = true;
  }
  state_->workCv.notify_all();
  for (auto& t : workers_) t.join();
}

BatchPtr Pipeline::next() {
  auto& s = *state_;
  std::unique_lock lk(s.mu);
  if (s.failed) std::rethrow_exception(s.failed);
  if (s.nextDeliver >= s.numBatches) return nullptr;
  if (s.held >= s.opt.prefetchBatches) {
    throw std::logic_error(fmt::format(
        "Pipeline::next: the consumer holds all {} batches (prefetchBatches); release one first",
        s.held));
  }
  s.readyCv.wait(lk, [&] { return s.ready.count(s.nextDeliver) > 0; });
  auto node = s.ready.extract(s.nextDeliver);
  ++s.nextDeliver;
  auto& done = node.mapped();
  if (done.error) {
    s.release(std::move(done.batch));
    s.failed = done.error;
    s.stop = true;
    s.workCv.notify_all();
    std::rethrow_exception(done.error);
  }
  ++s.held;
  return BatchPtr(done.batch.release(), detail::BatchReturner{state_});
}

const std::vector<int64_t>& Pipeline::order() const {
  return state_->order;
}

int Pipeline::liveBatches() const {
  std::lock_guard lk(state_->mu);
  return state_->live;
}

int Pipeline::peakLiveBatches() const {
  std::lock_guard lk(state_->mu);
  return state_->peak;
}

std::vector<std::string> Pipeline::corruptFiles() const {
  std::lock_guard lk(state_->mu);
  return {state_->corruptFiles.begin(), state_->corruptFiles.end()};
}

size_t Pipeline::corruptCount() const {
  std::lock_guard lk(state_->mu);
  return state_->corruptFiles.size();
}

}  // namespace datasets
