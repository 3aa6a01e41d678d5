// The model-agnostic training loop on the backend: feeds micro-batches from a batch source into
// a compiled training step (replicated, accumulated, loss-scaled as the options say), evaluates
// with the inference graph through a metric, and moves weights between the two graphs by name.
// The model is a models::TaskGraph (any number of data inputs of any dtype); what the data is
// and how quality is measured are the BatchSource / EvalSource / Metric a task plugs in
// (harness/image_task.h: image classification; a masked-LM task plugs in the same way).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "datasets/image_dataset.h"
#include "ipu_backend/compiler/compiler.h"
#include "ipu_backend/compiler/pipeline.h"
#include "ipu_backend/engine/engine.h"
#include "ipu_backend/engine/pipeline_engine.h"
#include "ipu_backend/precision/loss_scaling.h"
#include "ipu_backend/replication/replica_group.h"
#include "models/task_graph.h"

namespace ipu::harness {

// A replica over several IPUs (ipu_backend/compiler/pipeline.h): the forward pass cut at
// `splits`, stage s on IPU stageIpu[s]. Without splits the replica is one IPU (unpipelined);
// `recompute` then still applies: the splits become recomputation checkpoints on that IPU.
struct TrainerPipeline {
  std::vector<std::string> splits;
  std::vector<int> stageIpu;  // empty: stage s on IPU s
  int ipus = 1;               // IPUs per replica
  pipeline::Schedule schedule = pipeline::Schedule::Grouped;
  bool recompute = false;  // checkpoints at every stage boundary (recompute-then-backpropagate)
  bool pipelined() const { return ipus > 1 || !stageIpu.empty(); }
};

struct TrainerOptions {
  std::int64_t batch = 64;
  EngineMode mode = EngineMode::Fused;
  Target target = Target::mk2();
  bool checkMemory = true;
  std::uint64_t seed = 1;
  // Data parallelism: `batch` is the micro-batch of one replica; a step trains
  // replicas x accumulation x batch samples. `link` joins this process's replicas to other
  // processes' (mpirun); null: every replica runs here.
  int replicas = 1;
  int accumulation = 1;
  bool shardOptimizerState = false;
  replication::RingLink* link = nullptr;
  int threadsPerReplica = 1;
  // Train-time augmentation of in-memory image datasets (off by default); the image task seeds
  // it per epoch from `seed` and the epoch's number.
  datasets::SmallImageAugment augment;
  TrainerPipeline pipeline;

  // The pipeline compiler's options of these settings (split points, stage map, schedule,
  // accumulation, replicas, sharding, memory check): one translation for the trainer's compile
  // and the preflight's automatic placement.
  pipeline::PipelineOptions pipelineOptions() const;
};

// The C++ type that holds one element of a dtype on the host: float (f32), std::int32_t (i32),
// std::uint16_t (the bits of f16 / bf16).
template <class T>
constexpr bool holdsDType(DType d) {
  if constexpr (std::is_same_v<std::remove_const_t<T>, float>) return d == DType::F32;
  if constexpr (std::is_same_v<std::remove_const_t<T>, std::int32_t>) return d == DType::I32;
  if constexpr (std::is_same_v<std::remove_const_t<T>, std::uint16_t>)
    return d == DType::F16 || d == DType::BF16;
  return false;
}

// One micro-batch of one tensor on the host: raw bytes, its dtype and per-micro-batch shape.
struct HostSlot {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;  // one micro-batch ([rows, ...])
  std::span<std::byte> bytes;

  std::int64_t rows() const { return shape.empty() ? 1 : shape[0]; }
  std::int64_t elements() const { return numElements(shape); }
  // The bytes as T; std::invalid_argument naming the tensor when T does not hold its dtype.
  template <class T>
  std::span<T> as() const {
    checkType(holdsDType<T>(dtype), typeid(T).name());
    return {reinterpret_cast<T*>(bytes.data()), bytes.size() / sizeof(T)};
  }

 private:
  void checkType(bool ok, const char* type) const;
};

// What a source fills and a metric reads: one slot of every data input (or output), by name.
class MicroBatch {
 public:
  explicit MicroBatch(std::vector<HostSlot> slots = {}) : slots_(std::move(slots)) {}
  // std::invalid_argument naming the tensor and the ones there are when `name` is absent.
  const HostSlot& operator[](std::string_view name) const;
  template <class T>
  std::span<T> get(std::string_view name) const {
    return (*this)[name].as<T>();
  }
  const std::vector<HostSlot>& slots() const { return slots_; }
  std::int64_t rows() const { return slots_.empty() ? 0 : slots_.front().rows(); }

 private:
  std::vector<HostSlot> slots_;
};

// Where the trainer's replicas sit: what a batch source needs to know to give each micro-batch
// slot its part of the global batch.
struct BatchGeometry {
  std::int64_t microBatch = 1;
  int accumulation = 1;
  int replicas = 1;       // over every process
  int firstReplica = 0;   // this process's first
  int localReplicas = 1;  // this process's count
  std::int64_t perReplica() const { return microBatch * accumulation; }
  std::int64_t globalBatch() const { return perReplica() * replicas; }
};

// Feeds training steps. For each step the trainer calls beginStep(), then fill() once per
// (local replica, micro-batch slot), then endStep(). A source counts its own position: each
// beginStep() moves to its next global batch. The global batch of a step is the same whatever
// the replica and accumulation split: replica r's slot a holds samples
// [r A b + a b, r A b + (a + 1) b) of it.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // Prepares the next step, the trainer's `globalStep` (from 0 at its first: for sources that
  // key something on it); false: the source has no further whole global batch.
  virtual bool beginStep(std::int64_t globalStep) = 0;
  // Fills micro-batch `slot` of global replica `replica` for the step begun.
  virtual void fill(int replica, int slot, const MicroBatch& inputs) = 0;
  virtual void endStep() {}
  // Samples found corrupt and replaced so far (CorruptPolicy::kSkip), sorted; empty: none.
  virtual std::vector<std::string> corruptFiles() const { return {}; }
};

// Several sources one after the other as one stream: when one runs dry, the next (`open(k)`
// for the k-th, from 0) carries on. A samples-counted schedule trains across epoch boundaries.
class ConcatenatedSource : public BatchSource {
 public:
  explicit ConcatenatedSource(std::function<std::unique_ptr<BatchSource>(int)> open)
      : open_(std::move(open)) {}
  bool beginStep(std::int64_t globalStep) override;
  void fill(int replica, int slot, const MicroBatch& inputs) override;
  void endStep() override;
  std::vector<std::string> corruptFiles() const override;
  int part() const { return part_; }  // the source now read (from 0)

 private:
  std::function<std::unique_ptr<BatchSource>(int)> open_;
  std::unique_ptr<BatchSource> current_;
  int part_ = -1;
  std::vector<std::string> corrupt_;
};

// Feeds evaluation: one micro-batch of the inference graph at a time.
class EvalSource {
 public:
  virtual ~EvalSource() = default;
  // Fills the next batch; false when the evaluation set is done. `scored[k]` (rows() long, all
  // true on entry) is set false for rows that must not count: padding, skipped samples.
  virtual bool next(const MicroBatch& inputs, std::vector<bool>& scored) = 0;
  // Samples the source had to skip (CorruptPolicy::kSkip) and their names, in order.
  virtual std::int64_t skipped() const { return 0; }
  virtual std::vector<std::string> skippedFiles() const { return {}; }
};

// A quality metric, accumulated batch by batch from the inputs fed and the outputs read back.
struct MetricValue {
  double numerator = 0, denominator = 0;  // e.g. correct predictions, samples scored
  double value() const { return denominator > 0 ? numerator / denominator : 0.0; }
};
class Metric {
 public:
  virtual ~Metric() = default;
  virtual std::string name() const = 0;
  // The evaluation graph's output roles this metric reads (models::TaskGraph::outputs).
  virtual std::vector<std::string> outputs() const = 0;
  virtual void reset() = 0;
  virtual void accumulate(const MicroBatch& inputs, const MicroBatch& outputs,
                          const std::vector<bool>& scored) = 0;
  virtual MetricValue result() const = 0;
};

// Top-1 accuracy of a classifier: output "logits" [N, classes] against input `labels` [N]
// (i32); rows not scored and labels < 0 do not count (numerator: hits, denominator: scored rows).
class TopOneAccuracy : public Metric {
 public:
  explicit TopOneAccuracy(std::string labels = "labels") : labels_(std::move(labels)) {}
  std::string name() const override { return "top1"; }
  std::vector<std::string> outputs() const override { return {"logits"}; }
  void reset() override { correct_ = scored_ = 0; }
  void accumulate(const MicroBatch& inputs, const MicroBatch& outputs,
                  const std::vector<bool>& scored) override;
  MetricValue result() const override {
    return {static_cast<double>(correct_), static_cast<double>(scored_)};
  }

 private:
  std::string labels_;
  std::int64_t correct_ = 0, scored_ = 0;
};

struct EpochStats {
  double meanLoss = 0;
  std::int64_t samples = 0;
  std::int64_t steps = 0;
  double seconds = 0;
  bool finite = true;  // false: a NaN/Inf loss was seen (training diverged)
  // Loss scaling (16-bit policies): steps skipped for non-finite gradients in this call and
  // the scale at its end (1 without loss scaling).
  std::int64_t skippedSteps = 0;
  float lossScale = 1.0f;
  // Sources under CorruptPolicy::kSkip: the files found corrupt and replaced (sorted).
  std::vector<std::string> corruptFiles;
};

struct EvalResult {
  MetricValue metric;
  std::int64_t rows = 0;     // rows scored
  std::int64_t skipped = 0;  // samples the source skipped (not scored, nothing in their place)
  std::vector<std::string> skippedFiles;
};

// The two programs a trainer runs, compiled for opts.target (the replicated training step when
// opts has replicas or accumulation): what a fit check needs, without engines or host tensors.
struct TrainerPrograms {
  std::shared_ptr<Executable> train, eval;                         // train: null when pipelined
  std::shared_ptr<const pipeline::PipelinedExecutable> pipelined;  // opts.pipeline.pipelined()
  std::vector<std::string> zeroInitialised;  // variables the replication pass created
};
TrainerPrograms compileTrainerPrograms(const models::TaskGraph& train,
                                       const models::TaskGraph& eval, const TrainerOptions& opts);

// The recomputation checkpoints of `splits` on a training graph: the tensors that cross a stage
// boundary of its forward pass (the ops up to the one producing `loss`), stage k ending after the
// last forward op whose output pipeline::splitMatches splits[k]. pipeline::PipelineError naming
// a split that matches no forward op.
std::vector<std::string> splitCheckpoints(const Graph& g, int loss,
                                          const std::vector<std::string>& splits);

class Trainer {
 public:
  // Compiles both graphs (the compile reports are kept for the caller). The two graphs have the
  // same data inputs (by name, dtype and micro-batch shape).
  Trainer(models::TaskGraph train, models::TaskGraph eval, const TrainerOptions& opts);

  // Writes initial values for every variable of the training graph (by name).
  void initialise(const std::map<std::string, std::vector<float>>& values);

  // Up to `maxSteps` weight updates (0: until the source runs dry). `lr(step)` gives the
  // learning rate of each (global step count, from 0 at the trainer's first). `onStep(steps,
  // loss)` runs after every step (the run loop's progress, divergence and SIGINT checks, which
  // leave by throwing); may be empty.
  EpochStats train(BatchSource& source, std::int64_t maxSteps,
                   const std::function<float(std::int64_t)>& lr,
                   const std::function<void(std::int64_t, float)>& onStep = {});

  // The metric over every batch of `source` (the training weights copied to the inference
  // graph first). `onBatch` runs after every batch (the run loop's SIGINT check).
  EvalResult evaluate(EvalSource& source, Metric& metric,
                      const std::function<void()>& onBatch = {});

  BatchGeometry geometry() const;
  const TrainerOptions& options() const { return opts_; }
  // The unpipelined training program (std::logic_error when pipelined: see pipelinedExecutable).
  const Executable& trainExecutable() const;
  const pipeline::PipelinedExecutable* pipelinedExecutable() const { return pipelined_.get(); }
  const Executable& evalExecutable() const { return *evalExe_; }
  std::shared_ptr<const Executable> trainExecutablePtr() const { return trainExe_; }
  std::shared_ptr<const Executable> evalExecutablePtr() const { return evalExe_; }
  // The first local replica's engine (every replica holds the same weights); unpipelined only.
  Engine& trainEngine();
  // The training graph's variables (the model's, by name, in its order) as the first local
  // replica holds them: the same names and values pipelined or not.
  std::vector<std::string> modelVariables() const;
  std::vector<float> readVariable(const std::string& name) const;
  Engine& evalEngine() { return *evalEngine_; }
  std::int64_t stepsDone() const { return steps_; }
  std::int64_t evalRunsDone() const { return evalRuns_; }  // inference program runs
  // Samples one step trains over every replica: replicas x accumulation x micro-batch.
  std::int64_t globalBatch() const { return opts_.batch * opts_.replicas * opts_.accumulation; }
  replication::ReplicaGroup* replicaGroup() { return group_.get(); }
  // The host side of loss scaling: current scale, skipped steps, overflow events, and what
  // the last step decided (lastReport()). Without loss scaling: scale 1, never skips.
  const precision::LossScaler& lossScaler() const { return scaler_; }

 private:
  // Host buffers of `slots` micro-batches of each of `tensors` (ids in `g`) and their views.
  struct HostTensors {
    std::vector<std::vector<std::byte>> storage;
    std::vector<MicroBatch> slots;  // one per micro-batch slot
    void allocate(const Graph& g, const std::vector<int>& tensors, int slots);
  };
  void setUpReplicas();
  void setUpPipelines();
  void runPipelines();
  // One weight update on the inputs already filled; returns the step's loss (mean over the
  // micro-batches of this process's replicas).
  float step(const std::function<float(std::int64_t)>& lr, EpochStats& st);

  models::TaskGraph train_, eval_;
  TrainerOptions opts_;
  std::shared_ptr<Executable> trainExe_, evalExe_;
  std::unique_ptr<Engine> trainEngine_, evalEngine_;
  // Per local replica, its A micro-batch slots of every data input (one replica, one slot
  // without replication or accumulation); the evaluation's inputs and outputs.
  std::vector<HostTensors> trainInputs_;
  HostTensors evalInputs_, evalOutputs_;
  std::vector<std::vector<float>> losses_;        // [local replica][slot]
  std::vector<float> lr_, scale_, inverseScale_;  // per slot: lr, S, 1/S
  std::vector<std::vector<float>> overflow_;      // [local replica][slot]
  float loss_ = 0;
  precision::LossScaler scaler_;
  std::int64_t steps_ = 0;
  std::int64_t evalRuns_ = 0;
  std::unique_ptr<replication::ReplicaGroup> group_;
  std::vector<std::string> zeroInitialised_;
  // Pipelined: this process's replicas, each a PipelineEngine, joined by one ring.
  std::shared_ptr<const pipeline::PipelinedExecutable> pipelined_;
  std::unique_ptr<replication::RingCollective> ring_;
  std::vector<std::unique_ptr<pipeline::PipelineEngine>> pipelines_;
  int firstReplica_ = 0;
};

// Copies every variable of dst's graph from the same-named variable of src (converted when
// the two store it in different dtypes). `useEma`: a weight whose exponential moving average
// `<weight>/ema` src holds gets the average (what evaluation reads under a weight EMA).
void copyVariables(const Engine& src, Engine& dst, bool useEma = false);

}  // namespace ipu::harness
