// How a benchmark counts its progress: the learning-rate schedule and the evaluation cadence,
// each in epochs (ResNet-50: warm-up and decay in epochs, evaluation every 4 epochs) or in
// samples (BERT: warm-up and decay in samples, evaluation every N samples).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harness/mlperf_events.h"  // EpochBlock

namespace ipu::harness {

enum class ProgressUnit { kEpochs, kSamples };
const char* toString(ProgressUnit unit);

// Converts amounts of a unit into training steps.
struct StepClock {
  std::int64_t stepsPerEpoch = 1;
  std::int64_t globalBatch = 1;  // samples per step
  double steps(double amount, ProgressUnit unit) const {
    return unit == ProgressUnit::kEpochs ? amount * static_cast<double>(stepsPerEpoch)
                                         : amount / static_cast<double>(globalBatch);
  }
};

// Linear warm-up then polynomial decay to `end`, as the MLPerf references describe it
// (ResNet's sgd_opt_* / lars_opt_* keys in epochs; BERT's LAMB in samples). `warmup` and
// `decay` are in `unit`; the decay ends `decay` from the start (it spans decay - warmup).
// decay_factor > 0 selects exponential decay instead (EfficientNet's RMSProp): after the
// warm-up, base x decay_factor^floor(units since the warm-up / decay_every).
struct LrSchedule {
  double base = 0.1, end = 0.0001, power = 2;
  double warmup = 0, decay = 1;
  ProgressUnit unit = ProgressUnit::kEpochs;
  double decay_factor = 0, decay_every = 1;
  // The BERT reference's form: warm-up base x step / warmup, and the polynomial decay counted
  // from step 0 over `decay` (not from the end of the warm-up).
  bool decay_from_start = false;
  // With decay_from_start: the warm-up counts from this step (the reference's
  // start_warmup_step, in `unit`; negative shortens it).
  double warmup_start = 0;
  // Learning rate of global step `step` (from 0).
  double at(std::int64_t step, const StepClock& clock) const;
};

// One training block of a run and the evaluation that ends it: in epochs, `first` and `count`
// are epoch numbers (from 1); in samples, the samples trained before it and in it.
struct TrainBlock {
  std::int64_t first = 1, count = 1;
  std::int64_t last() const { return first + count - 1; }
};

// When a benchmark evaluates (the MLPerf rule of each benchmark).
//   kEpochs:  blocks of epochs ending at the evaluation epochs: epoch e is evaluated when
//             e % period == offset % period, and always the last epoch of the budget (ResNet
//             closed: period 4, offset 0-3; resnetEvalBlocks).
//   kSamples: a block of every_samples samples, evaluated at its end (BERT: every
//             0.05 x (230.23 x global batch + 3,000,000) samples, rounded as the rules say by
//             the caller); the last block ends at the budget.
struct EvalCadence {
  ProgressUnit unit = ProgressUnit::kEpochs;
  int period = 4, offset = 0;      // kEpochs
  std::int64_t every_samples = 0;  // kSamples
  // The blocks of a budget of `budget` epochs (kEpochs) or samples (kSamples). Throws
  // std::invalid_argument for a budget < 1 or a bad period, offset or interval.
  std::vector<TrainBlock> blocks(std::int64_t budget) const;
};

// MLPerf BERT's evaluation interval for a global batch: floor(0.05 x (230.23 x gbs +
// 3,000,000) / 25,000) x 25,000 samples, at least 25,000.
std::int64_t bertEvalIntervalSamples(std::int64_t globalBatch);
// The mini scale's rule: the same formula scaled down by kBertMiniEvalScale (a mini run trains
// thousands of samples, not millions), rounded down to whole global batches, at least one.
inline constexpr double kBertMiniEvalScale = 1000;
std::int64_t bertMiniEvalIntervalSamples(std::int64_t globalBatch);

// The epoch cadence as EpochBlocks (kept for the MLPerf event helpers and their tests).
std::vector<EpochBlock> evalBlocks(int totalEpochs, int period, int offset);

}  // namespace ipu::harness
