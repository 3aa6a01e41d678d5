#include "harness/schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace ipu::harness {

const char* toString(ProgressUnit unit) {
  return unit == ProgressUnit::kEpochs ? "epochs" : "samples";
}

double LrSchedule::at(std::int64_t step, const StepClock& clock) const {
  const double warmupSteps = clock.steps(warmup, unit);
  const double decaySteps = clock.steps(decay, unit);
  const double s = static_cast<double>(step);
  if (decay_from_start) {
    const double fromStart = s - clock.steps(warmup_start, unit);
    if (warmupSteps > 0 && fromStart < warmupSteps) return base * fromStart / warmupSteps;
    const double p = std::clamp(s / std::max(1.0, decaySteps), 0.0, 1.0);
    return (base - end) * std::pow(1.0 - p, power) + end;
  }
  if (s < warmupSteps) return base * (s + 1) / warmupSteps;
  if (decay_factor > 0) {
    const double every = std::max(1.0, clock.steps(decay_every, unit));
    return base * std::pow(decay_factor, std::floor((s - warmupSteps) / every));
  }
  const double span = std::max(1.0, decaySteps - warmupSteps);
  const double p = std::clamp((s - warmupSteps) / span, 0.0, 1.0);
  return (base - end) * std::pow(1.0 - p, power) + end;
}

std::vector<EpochBlock> evalBlocks(int totalEpochs, int period, int offset) {
  if (period == 4) return resnetEvalBlocks(totalEpochs, offset);
  if (totalEpochs < 1 || period < 1 || offset < 0) {
    throw std::invalid_argument(
        fmt::format("evalBlocks: need totalEpochs >= 1, period >= 1, offset >= 0, got {}, {}, {}",
                    totalEpochs, period, offset));
  }
  std::vector<EpochBlock> blocks;
  int first = 1;
  for (int e = 1; e <= totalEpochs; ++e) {
    if (e % period == offset % period || e == totalEpochs) {
      blocks.push_back({first, e - first + 1});
      first = e + 1;
    }
  }
  return blocks;
}

std::int64_t bertEvalIntervalSamples(std::int64_t globalBatch) {
  const double raw = 0.05 * (230.23 * static_cast<double>(globalBatch) + 3000000.0);
  return std::max<std::int64_t>(25000,
                                static_cast<std::int64_t>(std::floor(raw / 25000.0)) * 25000);
}

std::int64_t bertMiniEvalIntervalSamples(std::int64_t globalBatch) {
  const double raw = 0.05 * (230.23 * static_cast<double>(globalBatch) + 3000000.0);
  const auto steps = static_cast<std::int64_t>(
      std::floor(raw / kBertMiniEvalScale / static_cast<double>(globalBatch)));
  return std::max<std::int64_t>(1, steps) * globalBatch;
}

std::vector<TrainBlock> EvalCadence::blocks(std::int64_t budget) const {
  std::vector<TrainBlock> out;
  if (unit == ProgressUnit::kEpochs) {
    for (const EpochBlock& b : evalBlocks(static_cast<int>(budget), period, offset))
      out.push_back({b.first_epoch, b.epoch_count});
    return out;
  }
  if (budget < 1 || every_samples < 1)
    throw std::invalid_argument(fmt::format(
        "evaluation cadence in samples: need a budget >= 1 and an interval >= 1, got {} and {}",
        budget, every_samples));
  for (std::int64_t first = 0; first < budget; first += every_samples)
    out.push_back({first, std::min(every_samples, budget - first)});
  return out;
}

}  // namespace ipu::harness
